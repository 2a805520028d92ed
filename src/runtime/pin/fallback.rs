//! The core_affinity fallback, used only when hwloc topology discovery fails.
//!
//! It knows no cores, packages or PCI devices: every CPU in the calling
//! thread's `sched_getaffinity` mask is its own "core", GPU locality is
//! ignored (the caller notes that), and pinning is a plain
//! `sched_setaffinity`. Call it before the calling thread is pinned, or the
//! mask it reads is that one CPU.

use super::Layout;

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

/// The CPUs in the calling thread's affinity mask, sorted; `hwloc_why` is why
/// hwloc could not answer, for the error.
pub(super) fn allowed_cpus(hwloc_why: &str) -> Result<Vec<usize>, String> {
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => {
            let mut cpus: Vec<usize> = ids.into_iter().map(|c| c.id).collect();
            cpus.sort_unstable();
            Ok(cpus)
        }
        _ => Err(format!(
            "cannot read the allowed CPU set: hwloc unavailable ({hwloc_why}) and sched_getaffinity failed"
        )),
    }
}

/// Pins the calling thread to `cpu` with `sched_setaffinity`; `hwloc_why` is
/// why hwloc could not do it, for the error.
pub(super) fn pin_current(cpu: usize, hwloc_why: &str) -> Result<(), String> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        Ok(())
    } else {
        Err(format!(
            "cannot pin to CPU {cpu}: sched_setaffinity failed ({}); hwloc unavailable: {hwloc_why}",
            std::io::Error::last_os_error()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::plan_auto;
    use super::super::tests::{all, thread_affinity};

    #[test]
    fn hwloc_failure_falls_back_to_core_affinity() {
        let allowed = thread_affinity();
        let p = plan_auto(Err("forced by test".to_owned()), 1, 1, Some("0000:65:00.0"));
        assert_eq!(p.source, "core_affinity");
        assert!(all(&p).iter().all(|c| allowed.contains(c)));
        assert!(p.notes[0].contains("forced by test"), "{p}");
        assert!(
            p.notes.iter().any(|n| n.contains("locality ignored")),
            "{p}"
        );
    }
}
