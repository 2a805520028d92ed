//! Whether the serve loop may feed the stage graph, as one value: healthy,
//! degraded (writes fail: `degraded`), or compute failed (the GPU failed:
//! `gpu_failure`). Each state carries what the loop needs to leave it, so a
//! combination that cannot happen cannot be written down.
//!
//! Transitions:
//! * `Healthy` → `Degraded` on a failed write (`Service::degrade`); back once
//!   a recovery reopens the outputs (`Service::try_recover`).
//! * `Healthy` or `Degraded` → `ComputeFailed` on the GPU's first failed
//!   file (`Service::device_failed`); at the end of that loop turn
//!   `Service::replace_failed_compute` replaces the stage graph and returns
//!   to the state it came from (a degraded service stays degraded: its
//!   recovery does not depend on the compute stage).
//!
//! The recovery's backoff is not a state here: it outlives a recovery and
//! relaxes only after a good commit (`degraded`), so the loop keeps it beside
//! this value.

use std::sync::Arc;
use std::time::Instant;

use crate::compute::cuda::Cause;

/// Why a write-degraded service is paused, and when it tries again.
#[derive(Debug)]
pub(super) struct Degraded {
    /// The failed write's error (the last failed recovery's, after one).
    pub(super) error: String,
    /// When writes first failed.
    pub(super) since: Instant,
    /// The next recovery attempt.
    pub(super) next_try: Instant,
}

/// See the module documentation.
#[derive(Debug)]
pub(super) enum Health {
    /// Writes work and the stage graph computes: ingest runs.
    Healthy,
    /// A write failed: nothing is read until a recovery works.
    Degraded(Degraded),
    /// The GPU failed on a file (`cause`): nothing more is fed to it until
    /// the loop replaces the stage graph, at the end of this loop turn.
    /// `degraded` is the write failure it interrupted, if any.
    ComputeFailed {
        cause: Arc<Cause>,
        degraded: Option<Degraded>,
    },
}

impl Health {
    /// Whether the loop may hand files to the readers.
    pub(super) fn feeds(&self) -> bool {
        matches!(self, Health::Healthy)
    }

    /// The write failure, while writes fail.
    pub(super) fn degraded(&self) -> Option<&Degraded> {
        match self {
            Health::Degraded(d)
            | Health::ComputeFailed {
                degraded: Some(d), ..
            } => Some(d),
            _ => None,
        }
    }

    /// The write failure, to update while writes fail.
    pub(super) fn degraded_mut(&mut self) -> Option<&mut Degraded> {
        match self {
            Health::Degraded(d)
            | Health::ComputeFailed {
                degraded: Some(d), ..
            } => Some(d),
            _ => None,
        }
    }

    /// Writes work again: a degraded service is healthy (or, within the
    /// turn of a GPU failure, no longer degraded behind it).
    pub(super) fn recovered(&mut self) {
        match self {
            Health::ComputeFailed { degraded, .. } => *degraded = None,
            h => *h = Health::Healthy,
        }
    }

    /// Takes the GPU's failure, if any, leaving the state it interrupted.
    pub(super) fn take_compute_failure(&mut self) -> Option<Arc<Cause>> {
        if !matches!(self, Health::ComputeFailed { .. }) {
            return None;
        }
        match std::mem::replace(self, Health::Healthy) {
            Health::ComputeFailed { cause, degraded } => {
                if let Some(d) = degraded {
                    *self = Health::Degraded(d);
                }
                Some(cause)
            }
            _ => unreachable!("checked above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn degraded() -> Degraded {
        Degraded {
            error: "disk full".into(),
            since: Instant::now(),
            next_try: Instant::now(),
        }
    }

    /// A GPU failure that interrupts a degraded service leaves it degraded
    /// once taken; one that interrupts a healthy one leaves it healthy.
    #[test]
    fn a_compute_failure_returns_to_the_state_it_interrupted() {
        let mut h = Health::ComputeFailed {
            cause: Arc::new(Cause::NoDevice),
            degraded: Some(degraded()),
        };
        assert!(!h.feeds());
        assert_eq!(h.degraded().unwrap().error, "disk full");
        assert_eq!(
            h.take_compute_failure().map(|c| c.to_string()).as_deref(),
            Some("no CUDA device")
        );
        assert!(matches!(h, Health::Degraded(_)));
        assert!(h.take_compute_failure().is_none());

        let mut h = Health::ComputeFailed {
            cause: Arc::new(Cause::NoDevice),
            degraded: None,
        };
        assert!(h.degraded().is_none());
        assert_eq!(
            h.take_compute_failure().map(|c| c.to_string()).as_deref(),
            Some("no CUDA device")
        );
        assert!(h.feeds());
    }
}
