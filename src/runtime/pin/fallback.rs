//! The core_affinity fallback, used only when hwloc topology discovery fails.
//!
//! It knows no cores, packages or PCI devices: every CPU in the calling
//! thread's `sched_getaffinity` mask is its own "core", GPU locality is
//! ignored (the caller notes that), and pinning is a plain
//! `sched_setaffinity`. Call it before the calling thread is pinned, or the
//! mask it reads is that one CPU.

use super::{Error, HwlocError, Layout};

/// Every CPU in the calling thread's affinity mask as its own core, or `None`
/// when the mask cannot be read (or is empty).
pub(super) fn layout() -> Option<Layout> {
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => Some(Layout {
            cores: ids.into_iter().map(|c| vec![c.id]).collect(),
            unit: "CPUs",
            source: "core_affinity",
        }),
        _ => None,
    }
}

/// The CPUs in the calling thread's affinity mask, sorted; `hwloc` is why
/// hwloc could not answer, for the error.
pub(super) fn allowed_cpus(hwloc: HwlocError) -> Result<Vec<usize>, Error> {
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => {
            let mut cpus: Vec<usize> = ids.into_iter().map(|c| c.id).collect();
            cpus.sort_unstable();
            Ok(cpus)
        }
        _ => Err(Error::AllowedSet { hwloc }),
    }
}

/// Pins the calling thread to `cpu` with `sched_setaffinity`; `hwloc` is
/// why hwloc could not do it, for the error.
pub(super) fn pin_current(cpu: usize, hwloc: HwlocError) -> Result<(), Error> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        Ok(())
    } else {
        Err(Error::SetAffinity {
            cpu,
            source: std::io::Error::last_os_error(),
            hwloc,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all, thread_affinity};
    use super::super::{HwlocError, plan_auto};

    #[test]
    fn hwloc_failure_falls_back_to_core_affinity() {
        let allowed = thread_affinity();
        let p = plan_auto(Err(HwlocError::NoAllowedCpus), 1, 1, Some("0000:65:00.0"));
        assert_eq!(p.source, "core_affinity");
        assert!(all(&p).iter().all(|c| allowed.contains(c)));
        assert_eq!(
            p.notes[0],
            "hwloc unavailable (no allowed CPUs in the hwloc topology), using core_affinity"
        );
        assert!(
            p.notes.iter().any(|n| n.contains("locality ignored")),
            "{p}"
        );
    }
}
