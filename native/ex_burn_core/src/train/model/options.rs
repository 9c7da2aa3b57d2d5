//! The options of training calls, as `ExBurn.Training` sends them (maps or keyword lists with
//! these field names; the NIF decodes them directly, unknown keys refused).

use serde::Deserialize;
use std::time::Duration;

/// What training does with a step whose loss, gradients or updated parameters (batch-norm
/// statistics included) hold NaN or infinity. Each step reads one vector from the device that
/// tells (the loss and one 0-or-NaN mark per gradient and parameter); a step that fails it is
/// undone, so no such value is ever written into the weights or the optimizer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnNonFinite {
    /// Fail with [`Error::NonFinite`](crate::Error::NonFinite) naming the epoch, batch and
    /// what was not finite; the weights stay as they were before that step.
    #[default]
    Raise,
    /// Leave the step out (no update) and go on.
    Skip,
    /// End the epoch there (no update); [`Stats::stopped`](super::Stats::stopped) tells.
    Stop,
}

/// Options of one training step ([`Model::train_step`](super::Model::train_step)).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepOptions {
    /// The step's learning rate (finite, not negative).
    pub learning_rate: f64,
    /// What a non-finite step does.
    pub on_non_finite: OnNonFinite,
}

/// Per-epoch options ([`Model::train_epoch`](super::Model::train_epoch)).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpochOptions {
    /// Samples per batch.
    pub batch_size: usize,
    /// Shuffle with this seed (none: keep order).
    pub shuffle: Option<u64>,
    /// Learning rate of each optimizer step (the last repeats; empty: 1e-3).
    pub lrs: Vec<f64>,
    /// Linear warmup over this many optimizer steps of the model's training (0: none): step
    /// `s` (0-based; this epoch's `k`-th is `first_step + k`) trains at
    /// `min(1, (s + 1) / warmup)` of its rate.
    pub warmup: u64,
    /// Optimizer steps taken before this epoch (where the warmup stands).
    pub first_step: u64,
    /// Micro-batches per optimizer step (gradient accumulation; 1 = none).
    pub accumulate: usize,
    /// Report progress every this many batches (0: never).
    pub progress_every: usize,
    /// Count correct predictions for the epoch's accuracy (classification losses only; when
    /// false no per-batch argmax/compare runs and [`Stats::accuracy`](super::Stats::accuracy)
    /// is `None`).
    pub accuracy: bool,
    /// What a step with a non-finite loss, gradient or updated parameter does.
    pub on_non_finite: OnNonFinite,
    /// The epoch's number (1-based) for error messages.
    pub epoch: usize,
    /// Check the data (and the validation data, when given) for NaN and infinities before
    /// training: [`Model::check_inputs`](super::Model::check_inputs), which the caller runs
    /// with the epoch.
    #[serde(default)]
    pub check_inputs: bool,
    /// Milliseconds the epoch may still run (what is left of `fit`'s timeout), its wait for the
    /// model included: the caller bounds the call with [`crate::cancel::within`] and
    /// [`EpochOptions::time_limit`].
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Devices to train on, the model's own first (data parallelism: each batch's rows split
    /// evenly over them, gradients summed across them); empty: the model's device alone.
    #[serde(default)]
    pub devices: Vec<crate::Device>,
}

impl EpochOptions {
    /// How long the epoch may still run (`None`: no limit).
    pub fn time_limit(&self) -> Option<Duration> {
        self.timeout.map(Duration::from_millis)
    }
}

/// Options of an evaluation ([`Model::evaluate`](super::Model::evaluate)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalOptions {
    /// Samples per batch.
    pub batch_size: usize,
    /// Count correct predictions (classification losses only).
    pub accuracy: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode<T: for<'de> Deserialize<'de>>(json: &str) -> std::result::Result<T, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn options_decode_from_their_field_names() {
        let s: StepOptions = decode(r#"{"learning_rate": 0.1, "on_non_finite": "skip"}"#).unwrap();
        assert_eq!(s.on_non_finite, OnNonFinite::Skip);
        let e: EpochOptions = decode(
            r#"{"batch_size": 2, "shuffle": null, "lrs": [0.1], "warmup": 0, "first_step": 0,
                "accumulate": 1, "progress_every": 0, "accuracy": true, "on_non_finite": "stop",
                "epoch": 1, "timeout": 1500}"#,
        )
        .unwrap();
        assert_eq!(e.time_limit(), Some(Duration::from_millis(1500)));
        assert!(!e.check_inputs);
    }

    #[test]
    fn unknown_or_missing_fields_and_bad_values_are_refused() {
        let bad =
            decode::<StepOptions>(r#"{"learning_rate": 0.1, "on_non_finite": "skip", "x": 1}"#);
        assert!(bad.unwrap_err().contains("unknown field `x`"));
        let missing = decode::<EvalOptions>(r#"{"batch_size": 2}"#);
        assert!(missing.unwrap_err().contains("accuracy"));
        let value = decode::<StepOptions>(r#"{"learning_rate": 0.1, "on_non_finite": "ignore"}"#);
        assert!(value.unwrap_err().contains("ignore"));
        let negative = decode::<EvalOptions>(r#"{"batch_size": -1, "accuracy": true}"#);
        assert!(negative.is_err());
    }
}
