//! Running loss and accuracy of an epoch or an evaluation, kept on the device.
//!
//! Each batch only hands over tensors it already has (its mean loss, its per-sample hits);
//! every [`FOLD`] batches they are concatenated and summed into a running total on the device,
//! which is read when the totals are asked for. Summing per batch instead cost five tiny
//! device ops per step (about 2% of a small model's CPU training step); never folding kept
//! thousands of live tensors, which made each step of Burn's fusion backend slower than the
//! last (`bench/results/gpu_h200.md`).

/// Batches kept pending before they are folded into the running totals.
const FOLD: usize = 64;

use crate::tensor::B;
use burn::tensor::{Bool, Int, Tensor};

/// Which samples of a batch were predicted right: one mark per sample, or their count.
pub(crate) enum Hits {
    /// One mark per sample.
    Rows(Tensor<B, 1, Bool>),
    /// How many (one element).
    Count(Tensor<B, 1, Int>),
}

/// Losses and hits of the batches seen so far.
pub(crate) struct Tally {
    /// Rows of a full batch: pending losses are means over this many samples.
    batch_size: usize,
    /// Batch mean losses not yet summed (a partial batch's is rescaled to a full batch's).
    losses: Vec<Tensor<B, 1>>,
    /// Per-sample hits not yet counted.
    hits: Vec<Tensor<B, 1, Bool>>,
    /// Counts of hits not yet summed.
    counts: Vec<Tensor<B, 1, Int>>,
    /// Folded batches: the sum of their mean losses.
    loss_acc: Option<Tensor<B, 1>>,
    /// Folded batches: their hits.
    hit_acc: Option<Tensor<B, 1, Int>>,
}

impl Tally {
    /// An empty tally for batches of `batch_size` rows.
    pub(crate) fn new(batch_size: usize) -> Tally {
        Tally {
            batch_size: batch_size.max(1),
            losses: Vec::new(),
            hits: Vec::new(),
            counts: Vec::new(),
            loss_acc: None,
            hit_acc: None,
        }
    }

    /// Records a batch of `rows` samples: its mean `loss` and, for classification, which of
    /// its samples were predicted right.
    pub(crate) fn add(&mut self, loss: Tensor<B, 1>, rows: usize, hits: Option<Hits>) {
        let loss = if rows == self.batch_size {
            loss
        } else {
            loss.mul_scalar(rows as f64 / self.batch_size as f64)
        };
        self.losses.push(loss);
        match hits {
            Some(Hits::Rows(h)) => self.hits.push(h),
            Some(Hits::Count(c)) => self.counts.push(c),
            None => {}
        }
        if self.losses.len() >= FOLD {
            self.fold();
        }
    }

    /// Sums the pending batches into the running device totals (no device read).
    fn fold(&mut self) {
        if self.losses.is_empty() {
            return;
        }
        let loss = Tensor::cat(std::mem::take(&mut self.losses), 0).sum();
        self.loss_acc = Some(match self.loss_acc.take() {
            Some(acc) => acc.add(loss),
            None => loss,
        });
        let mut sums = std::mem::take(&mut self.counts);
        if !self.hits.is_empty() {
            sums.push(Tensor::cat(std::mem::take(&mut self.hits), 0).int().sum());
        }
        if !sums.is_empty() {
            let hits = Tensor::cat(sums, 0).sum();
            self.hit_acc = Some(match self.hit_acc.take() {
                Some(acc) => acc.add(hits),
                None => hits,
            });
        }
    }

    /// Folds what is pending and reads the totals so far (one device read each): the summed
    /// per-sample loss and the number of hits.
    pub(crate) fn totals(&mut self) -> (f64, i64) {
        self.fold();
        let loss = self.loss_acc.clone().map_or(0.0, |l| {
            let mean_sum: f64 = l.into_data().iter::<f64>().next().unwrap_or(f64::NAN);
            mean_sum * self.batch_size as f64
        });
        let hits = self.hit_acc.clone().map_or(0, |h| h.into_scalar() as i64);
        (loss, hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    #[test]
    fn folded_totals_equal_the_plain_sums() {
        let device = burn::DispatchDevice::Flex(burn::backend::flex::FlexDevice);
        let mut tally = Tally::new(4);
        let (mut want_loss, mut want_hits) = (0.0, 0);
        // 3 * FOLD + 5 batches, the last one partial (2 rows): folds, then a pending remainder
        let batches = 3 * FOLD + 5;
        for k in 0..batches {
            let rows = if k + 1 == batches { 2 } else { 4 };
            let mean = (k % 7) as f32 * 0.25;
            let hits: Vec<bool> = (0..rows).map(|r| (k + r) % 3 == 0).collect();
            want_loss += mean as f64 * rows as f64;
            want_hits += hits.iter().filter(|h| **h).count() as i64;
            let loss = Tensor::<B, 1>::from_data(TensorData::new(vec![mean], [1]), &device);
            let hit = Tensor::<B, 1, Bool>::from_data(TensorData::new(hits, [rows]), &device);
            let hit = if k % 2 == 0 {
                Hits::Rows(hit)
            } else {
                Hits::Count(hit.int().sum())
            };
            tally.add(loss, rows, Some(hit));
            assert!(tally.losses.len() < FOLD, "pending batches are bounded");
        }
        let (loss, hits) = tally.totals();
        assert!((loss - want_loss).abs() < 1e-3, "{loss} vs {want_loss}");
        assert_eq!(hits, want_hits);
        // reading again adds nothing
        assert_eq!(tally.totals(), (loss, hits));
    }
}
