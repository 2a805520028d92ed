//! Why placing threads failed: [`HwlocError`] (hwloc cannot answer, so the
//! caller falls back to core_affinity and keeps this as the reason) and
//! [`Error`] (what [`super::pin_current`] and [`super::validate_cores`]
//! return). Each variant's `Display` is the sentence the start-up log or the
//! config error shows; the fields are what a caller matches or counts.

use std::io;

use hwlocality::cpu::binding::CpuBindingError;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::errors::{HybridError, RawHwlocError};
use hwlocality::topology::builder::TypeFilterError;

use super::policy::compact_list;

/// Why hwloc cannot place threads. Cached with the topology (discovery runs
/// once per process), hence `Clone`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HwlocError {
    /// Keeping important PCI devices (for GPU locality) was refused.
    #[error("hwloc I/O filter refused: {0}")]
    IoFilter(#[source] HybridError<TypeFilterError>),
    /// Topology discovery itself failed.
    #[error("hwloc topology discovery failed: {0}")]
    Discovery(#[source] RawHwlocError),
    /// The topology has no CPU this process may run on.
    #[error("no allowed CPUs in the hwloc topology")]
    NoAllowedCpus,
}

/// Why a thread could not be pinned, or a configured CPU list was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `validate_cores` was given no CPU.
    #[error("the CPU list is empty")]
    EmptyList,
    /// `validate_cores`: `cpus` are outside the process's allowed set.
    #[error(
        "{} not available to this process (allowed CPUs: {})",
        subject(.cpus),
        compact_list(.allowed)
    )]
    Unavailable {
        /// The configured CPUs this process may not use, in list order.
        cpus: Vec<usize>,
        /// The CPUs it may use, sorted.
        allowed: Vec<usize>,
    },
    /// hwloc: `cpu` is not in the topology's CPU set. (hwlocality prints a
    /// `CpuSet` as `CpuSet(0-3)`; the sentence has always shown it so.)
    #[error("cannot pin to CPU {cpu}: not in this machine's allowed CPUs ({allowed})")]
    NotAllowed {
        cpu: usize,
        /// The topology's CPU set.
        allowed: CpuSet,
    },
    /// hwloc: `hwloc_set_cpubind` refused.
    #[error("cannot pin to CPU {cpu}: hwloc_set_cpubind failed: {source}")]
    Bind {
        cpu: usize,
        source: HybridError<CpuBindingError>,
    },
    /// core_affinity (hwloc unavailable): `sched_setaffinity` refused.
    #[error(
        "cannot pin to CPU {cpu}: sched_setaffinity failed ({source}); hwloc unavailable: {hwloc}"
    )]
    SetAffinity {
        cpu: usize,
        source: io::Error,
        /// Why hwloc could not do it.
        hwloc: HwlocError,
    },
    /// Neither hwloc nor `sched_getaffinity` can say which CPUs are allowed.
    #[error(
        "cannot read the allowed CPU set: hwloc unavailable ({hwloc}) and sched_getaffinity failed"
    )]
    AllowedSet {
        #[source]
        hwloc: HwlocError,
    },
}

/// "CPU 3 is" or "CPUs 3,5-6 are", for [`Error::Unavailable`].
fn subject(cpus: &[usize]) -> String {
    match cpus {
        [one] => format!("CPU {one} is"),
        many => format!("CPUs {} are", compact_list(many)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_cpus_are_named_in_singular_or_plural() {
        let e = Error::Unavailable {
            cpus: vec![8000],
            allowed: vec![0, 1, 2, 3],
        };
        assert_eq!(
            e.to_string(),
            "CPU 8000 is not available to this process (allowed CPUs: 0-3)"
        );
        let e = Error::Unavailable {
            cpus: vec![7000, 7001, 9000],
            allowed: vec![0, 2],
        };
        assert_eq!(
            e.to_string(),
            "CPUs 7000-7001,9000 are not available to this process (allowed CPUs: 0,2)"
        );
    }

    #[test]
    fn pin_failures_say_which_cpu_and_why() {
        let mut allowed = CpuSet::new();
        for cpu in [0, 1, 4, 5, 6] {
            allowed.set(cpu);
        }
        let e = Error::NotAllowed { cpu: 8, allowed };
        assert_eq!(
            e.to_string(),
            "cannot pin to CPU 8: not in this machine's allowed CPUs (CpuSet(0-1,4-6))"
        );
        let e = Error::SetAffinity {
            cpu: 3,
            source: io::Error::from_raw_os_error(libc::EINVAL),
            hwloc: HwlocError::NoAllowedCpus,
        };
        assert_eq!(
            e.to_string(),
            "cannot pin to CPU 3: sched_setaffinity failed (Invalid argument (os error 22)); \
             hwloc unavailable: no allowed CPUs in the hwloc topology"
        );
        let e = Error::AllowedSet {
            hwloc: HwlocError::NoAllowedCpus,
        };
        assert_eq!(
            e.to_string(),
            "cannot read the allowed CPU set: hwloc unavailable (no allowed CPUs in the hwloc \
             topology) and sched_getaffinity failed"
        );
    }
}
