//! Strided views of host tensors for ExBurn's own CPU kernels (`host_gemm`, `host_map`, the
//! fused attention): the storage, the first element's offset and a stride per axis, read in
//! place, with one bounds check for a whole view before any element is read.

use crate::Tensor;

/// A strided host view: storage, element offset and strides over the axes of a tensor (zero
/// where it is broadcast).
pub(crate) struct View<'a, T> {
    /// The whole storage the view lies in.
    pub data: &'a [T],
    /// The element offset of the view's first element.
    pub offset: usize,
    /// Element strides, one per axis.
    pub strides: Vec<isize>,
}

impl<'a> View<'a, f32> {
    /// The view of an f32 host tensor (`None`: another type or device).
    pub(crate) fn of_f32(t: &'a Tensor) -> Option<Self> {
        t.host_f32_strided().map(|(data, offset, strides)| View {
            data,
            offset,
            strides: strides.to_vec(),
        })
    }
}

impl<'a> View<'a, u8> {
    /// The view of a boolean host tensor, one byte per element (`None`: not one).
    pub(crate) fn of_bool(t: &'a Tensor) -> Option<Self> {
        t.host_bool_strided().map(|(data, offset, strides)| View {
            data,
            offset,
            strides: strides.to_vec(),
        })
    }
}

impl<T: Copy> View<'_, T> {
    /// The element offset of batch matrix `bi` (row-major over the leading axes `batch`).
    pub(crate) fn base(&self, bi: usize, batch: &[usize]) -> isize {
        let mut rest = bi;
        let mut at = self.offset as isize;
        for (axis, &len) in batch.iter().enumerate().rev() {
            at += (rest % len) as isize * self.strides[axis];
            rest /= len;
        }
        at
    }

    /// The element at offset `at`, or `None` outside the storage (a malformed view).
    pub(crate) fn get(&self, at: isize) -> Option<T> {
        usize::try_from(at)
            .ok()
            .and_then(|i| self.data.get(i).copied())
    }

    /// Whether every element reached from `base` by `(length, stride)` axes lies inside the
    /// storage: its lowest and highest offsets do, the offsets being affine in the indices.
    /// Every length is at least 1.
    pub(crate) fn spans(
        &self,
        base: isize,
        axes: impl IntoIterator<Item = (usize, isize)>,
    ) -> bool {
        let (mut lo, mut hi) = (base, base);
        for (len, stride) in axes {
            let reach = (len as isize - 1) * stride;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        self.get(lo).is_some() && self.get(hi).is_some()
    }

    /// Whether the whole view of `shape` lies inside the storage ([`View::spans`] from its
    /// offset over all its axes). Every axis of `shape` has at least 1 element.
    pub(crate) fn fits(&self, shape: &[usize]) -> bool {
        self.strides.len() == shape.len()
            && self.spans(
                self.offset as isize,
                shape.iter().copied().zip(self.strides.iter().copied()),
            )
    }
}
