//! Thread placement: which CPU each I/O thread and compute worker runs on.
//!
//! This module owns the *decision* ([`plan`] → [`Placement`]) and the *act*
//! ([`pin_current`], called by each thread on itself at start-up). It does not
//! own config: [`PinPolicy`] parses from the `io.pin` / `compute.pin` strings
//! (`"auto"`, `"off"`, `"0,2,4-7"`) and [`validate_cores`] lets the config
//! layer reject unknown CPUs at load time.
//!
//! How `auto` places threads, in order of preference:
//! 1. distinct physical cores (hwloc `Core` objects), I/O threads first, then
//!    workers; when a GPU PCI bus id is given, cores inside the cpuset of the
//!    GPU's first non-I/O ancestor (its package / NUMA node) come first;
//! 2. hyperthread siblings of those cores;
//! 3. round robin over everything again (sharing), with a note.
//!
//! Invariants:
//! * every CPU in a placement is in the process's allowed set: the hwloc
//!   topology (which already excludes cgroup-disallowed CPUs) intersected with
//!   the process's CPU binding (taskset / `sched_setaffinity`), or, in the
//!   core_affinity fallback, the calling thread's `sched_getaffinity` mask —
//!   call [`plan`] before pinning the calling thread;
//! * `readers.len() == n_readers` and `workers.len() == n_workers`, whatever
//!   the source; entries are all `Some` or all `None` (source `"off"`);
//! * nothing here panics on a strange machine: hwloc failing falls back to
//!   core_affinity, that failing falls back to `off`, and each step down is
//!   recorded in [`Placement::notes`] so the start-up log line says why.
//!
//! The hwloc topology is discovered once per process (with important PCI
//! devices kept, for GPU locality) and shared by every call.
//!
//! Files: [`policy`] parses and prints [`PinPolicy`]; this file plans
//! ([`plan`], [`Placement`]) and pins ([`pin_current`], [`pin_or_warn`]);
//! [`hwloc`] discovers the topology and finds cores near a GPU; [`fallback`]
//! is the core_affinity path for when hwloc fails; [`error`] holds
//! [`Error`] and [`HwlocError`].

mod error;
mod fallback;
mod hwloc;
mod policy;

use std::fmt;

use hwlocality::Topology;

pub use error::{Error, HwlocError};
use policy::compact_list;
pub use policy::{ParsePinPolicyError, PinPolicy};

/// One placement decision per thread role.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Placement {
    /// CPU for I/O thread `i`, or `None` to leave it unpinned.
    pub readers: Vec<Option<usize>>,
    /// CPU for compute worker `i`, or `None` to leave it unpinned.
    pub workers: Vec<Option<usize>>,
    /// Where the decision came from: `"hwloc"`, `"core_affinity"`, `"config"` or `"off"`.
    pub source: &'static str,
    /// Why the placement is less than ideal (fallbacks, wrapping, GPU locality).
    pub notes: Vec<String>,
}

impl Placement {
    fn off(n_readers: usize, n_workers: usize, notes: Vec<String>) -> Self {
        Placement {
            readers: vec![None; n_readers],
            workers: vec![None; n_workers],
            source: "off",
            notes,
        }
    }
}

impl fmt::Display for Placement {
    /// One log sentence, e.g.
    /// `Placement (hwloc): readers on CPU 0; workers on CPUs 1, 0 (wrapped: 3 threads on 2 cores).`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn role(f: &mut fmt::Formatter<'_>, name: &str, cpus: &[Option<usize>]) -> fmt::Result {
            if cpus.is_empty() {
                return write!(f, "no {name}");
            }
            if cpus.iter().all(Option::is_none) {
                return write!(f, "{} {name} unpinned", cpus.len());
            }
            let list: Vec<String> = cpus
                .iter()
                .map(|c| c.map_or_else(|| "unpinned".to_owned(), |c| c.to_string()))
                .collect();
            let plural = if cpus.len() == 1 { "CPU" } else { "CPUs" };
            write!(f, "{name} on {plural} {}", list.join(", "))
        }
        write!(f, "Placement ({}): ", self.source)?;
        role(f, "readers", &self.readers)?;
        f.write_str("; ")?;
        role(f, "workers", &self.workers)?;
        if !self.notes.is_empty() {
            write!(f, " ({})", self.notes.join("; "))?;
        }
        f.write_str(".")
    }
}

/// Plans where `n_readers` I/O threads and `n_workers` compute workers go.
///
/// `Auto` prefers distinct physical cores (I/O threads first, then workers),
/// cores near the GPU's PCIe root first when `gpu_pci_bus_id` is given
/// (`"0000:65:00.0"` or `"65:00.0"`), then hyperthread siblings, then wraps
/// round robin with a note. Only CPUs the process may run on are used. Falls
/// back to `core_affinity::get_core_ids()` when hwloc fails and to `Off` when
/// neither works; the notes say why. `Cores` uses the listed CPUs round robin,
/// dropping (with a note) any this process may not use.
pub fn plan(
    policy: &PinPolicy,
    n_readers: usize,
    n_workers: usize,
    gpu_pci_bus_id: Option<&str>,
) -> Placement {
    match policy {
        PinPolicy::Off => Placement::off(n_readers, n_workers, Vec::new()),
        PinPolicy::Cores(cpus) => plan_cores(cpus, n_readers, n_workers),
        PinPolicy::Auto => {
            let topo = match gpu_pci_bus_id {
                Some(_) => hwloc::topology_with_io(),
                None => hwloc::topology(),
            };
            plan_auto(topo, n_readers, n_workers, gpu_pci_bus_id)
        }
    }
}

/// Starts hwloc's topology discovery on a thread of its own, so the
/// [`plan`] made before the first read finds it done (8 ms on the 2-core dev
/// VM). With `gpu`, the discovery of the PCI devices follows (0.22 s on the
/// 16-core GPU box), for a placement near the GPU. A later call waits for
/// it, or discovers it itself when the thread could not be started.
pub fn discover_in_background(gpu: bool) {
    let spawned = std::thread::Builder::new()
        .name("hwloc".into())
        .spawn(move || {
            let _ = hwloc::topology();
            if gpu {
                let _ = hwloc::topology_with_io();
            }
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "No thread for hwloc's discovery; the placement does it.");
    }
}

/// Pins the calling thread to `cpu` when a placement gave one; a failure is
/// logged (naming `who`, e.g. "Reader 0") and the thread runs unpinned.
pub fn pin_or_warn(cpu: Option<usize>, who: &str) {
    if let Some(cpu) = cpu
        && let Err(e) = pin_current(cpu)
    {
        tracing::warn!(thread = who, cpu, error = %e, "A thread runs unpinned.");
    }
}

/// Pins the calling thread to `cpu` (OS index); the error says why it failed.
///
/// Uses hwloc (`hwloc_set_cpubind` with `THREAD`), or core_affinity
/// (`sched_setaffinity`) when the hwloc topology is unavailable.
pub fn pin_current(cpu: usize) -> Result<(), Error> {
    match hwloc::topology() {
        Ok(topo) => hwloc::pin_current(topo, cpu),
        Err(why) => fallback::pin_current(cpu, why),
    }
}

/// Checks an explicit CPU list against the CPUs this process may run on; for
/// the config layer, so a bad `io.pin` / `compute.pin` fails at load time.
pub fn validate_cores(cpus: &[usize]) -> Result<(), Error> {
    if cpus.is_empty() {
        return Err(Error::EmptyList);
    }
    let (allowed, _) = allowed_cpus()?;
    let bad: Vec<usize> = cpus
        .iter()
        .copied()
        .filter(|c| !allowed.contains(c))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Error::Unavailable { cpus: bad, allowed })
    }
}

/// The CPUs this process may run on, sorted, and which library said so.
fn allowed_cpus() -> Result<(Vec<usize>, &'static str), Error> {
    match hwloc::topology() {
        Ok(topo) => Ok((hwloc::allowed_cpus(topo), "hwloc")),
        Err(why) => fallback::allowed_cpus(why).map(|cpus| (cpus, "core_affinity")),
    }
}

/// Allowed CPUs grouped into cores, in order of preference.
struct Layout {
    /// Each core's allowed CPUs (OS indices), first choice first.
    cores: Vec<Vec<usize>>,
    /// What a "core" is, for the wrap note: "cores", "CPUs", "configured CPUs".
    unit: &'static str,
    source: &'static str,
}

/// `Auto`: the hwloc layout (`topo` is [`hwloc::topology`], passed in so a
/// test can force the fallback), else core_affinity's, else unpinned.
fn plan_auto(
    topo: Result<&Topology, HwlocError>,
    n_readers: usize,
    n_workers: usize,
    gpu: Option<&str>,
) -> Placement {
    let mut notes = Vec::new();
    let layout = match topo.and_then(|t| hwloc::layout(t, gpu, &mut notes)) {
        Ok(layout) => layout,
        Err(why) => {
            notes.push(format!("hwloc unavailable ({why}), using core_affinity"));
            if let Some(bus) = gpu {
                notes.push(format!("GPU {bus} locality ignored without hwloc"));
            }
            match fallback::layout() {
                Some(layout) => layout,
                None => {
                    notes.push("core_affinity could not read the CPU set either".to_owned());
                    return Placement::off(n_readers, n_workers, notes);
                }
            }
        }
    };
    assign(&layout, n_readers, n_workers, notes)
}

/// Hands out CPUs: first CPU of each core in order, then each core's second
/// CPU (hyperthread sibling), and so on; then round robin again.
fn assign(
    layout: &Layout,
    n_readers: usize,
    n_workers: usize,
    mut notes: Vec<String>,
) -> Placement {
    let depth = layout.cores.iter().map(Vec::len).max().unwrap_or(0);
    let sequence: Vec<usize> = (0..depth)
        .flat_map(|round| {
            layout
                .cores
                .iter()
                .filter_map(move |core| core.get(round).copied())
        })
        .collect();
    if sequence.is_empty() {
        notes.push("no CPU to place threads on".to_owned());
        return Placement::off(n_readers, n_workers, notes);
    }
    let total = n_readers + n_workers;
    let n_cores = layout.cores.len();
    if total > n_cores {
        let mut note = format!("wrapped: {total} threads on {n_cores} {}", layout.unit);
        if sequence.len() > n_cores {
            note.push_str(", hyperthread siblings used");
        }
        if total > sequence.len() {
            let shared = sequence.len().min(total - sequence.len());
            let noun = if shared == 1 { "CPU" } else { "CPUs" };
            note.push_str(&format!(", {shared} {noun} shared"));
        }
        notes.push(note);
    }
    let mut cpus = (0..total).map(|i| Some(sequence[i % sequence.len()]));
    Placement {
        readers: cpus.by_ref().take(n_readers).collect(),
        workers: cpus.collect(),
        source: layout.source,
        notes,
    }
}

fn plan_cores(cpus: &[usize], n_readers: usize, n_workers: usize) -> Placement {
    let mut notes = Vec::new();
    let usable: Vec<usize> = match allowed_cpus() {
        Ok((allowed, _)) => {
            let (ok, bad): (Vec<usize>, Vec<usize>) =
                cpus.iter().partition(|c| allowed.contains(c));
            if !bad.is_empty() {
                notes.push(format!(
                    "configured CPUs {} are not available to this process and were dropped",
                    compact_list(&bad)
                ));
            }
            ok
        }
        Err(why) => {
            notes.push(format!("configured CPUs not checked: {why}"));
            cpus.to_vec()
        }
    };
    if usable.is_empty() {
        notes.push("no configured CPU is usable; threads unpinned".to_owned());
        return Placement::off(n_readers, n_workers, notes);
    }
    let layout = Layout {
        cores: usable.into_iter().map(|c| vec![c]).collect(),
        unit: "configured CPUs",
        source: "config",
    };
    assign(&layout, n_readers, n_workers, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's affinity mask, straight from the kernel.
    pub(super) fn thread_affinity() -> Vec<usize> {
        crate::runtime::sys::thread_affinity().expect("sched_getaffinity")
    }

    pub(super) fn all(p: &Placement) -> Vec<usize> {
        p.readers
            .iter()
            .chain(&p.workers)
            .map(|c| c.unwrap())
            .collect()
    }

    #[test]
    fn off_leaves_everything_unpinned() {
        let p = plan(&PinPolicy::Off, 2, 3, Some("0000:65:00.0"));
        assert_eq!(p.source, "off");
        assert_eq!(p.readers, vec![None; 2]);
        assert_eq!(p.workers, vec![None; 3]);
        assert_eq!(
            p.to_string(),
            "Placement (off): 2 readers unpinned; 3 workers unpinned."
        );
    }

    #[test]
    fn explicit_cores_are_used_round_robin() {
        let allowed = thread_affinity();
        let list: Vec<usize> = allowed.iter().rev().copied().collect();
        let p = plan(&PinPolicy::Cores(list.clone()), 1, list.len() + 1, None);
        assert_eq!(p.source, "config");
        let expected: Vec<usize> = (0..list.len() + 2).map(|i| list[i % list.len()]).collect();
        assert_eq!(all(&p), expected);
        assert!(p.notes.iter().any(|n| n.starts_with("wrapped:")), "{p}");

        let exact = plan(&PinPolicy::Cores(list.clone()), 0, list.len(), None);
        assert!(exact.notes.is_empty(), "{exact}");
    }

    #[test]
    fn explicit_cores_not_allowed_are_dropped_with_a_note() {
        let allowed = thread_affinity();
        let p = plan(&PinPolicy::Cores(vec![allowed[0], 8000]), 1, 1, None);
        assert_eq!(all(&p), vec![allowed[0], allowed[0]]);
        assert!(p.notes.iter().any(|n| n.contains("8000")), "{p}");

        let none = plan(&PinPolicy::Cores(vec![8000]), 1, 1, None);
        assert_eq!(none.source, "off");
        assert_eq!(none.readers, vec![None]);
        assert!(
            none.notes.iter().any(|n| n.contains("no configured CPU")),
            "{none}"
        );
    }

    #[test]
    fn validate_cores_rejects_unknown_and_empty() {
        let allowed = thread_affinity();
        validate_cores(&allowed).unwrap();
        let e = validate_cores(&[allowed[0], 8000]).unwrap_err();
        assert!(
            matches!(&e, Error::Unavailable { cpus, allowed: a } if *cpus == [8000] && *a == allowed),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "CPU 8000 is not available to this process (allowed CPUs: {})",
                compact_list(&allowed)
            )
        );
        let e = validate_cores(&[7000, 7001]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("CPUs 7000-7001 are not available to this process"),
            "{e}"
        );
        let e = validate_cores(&[]).unwrap_err();
        assert!(matches!(e, Error::EmptyList), "{e:?}");
        assert_eq!(e.to_string(), "the CPU list is empty");
    }

    #[test]
    fn pin_current_changes_the_thread_affinity() {
        let allowed = thread_affinity();
        for &cpu in &allowed {
            let seen = std::thread::spawn(move || {
                pin_current(cpu).unwrap();
                thread_affinity()
            })
            .join()
            .unwrap();
            assert_eq!(seen, vec![cpu]);
        }
        // The test thread itself is untouched.
        assert_eq!(thread_affinity(), allowed);
    }

    #[test]
    fn pin_current_to_a_missing_cpu_says_why() {
        let e = std::thread::spawn(|| pin_current(8000))
            .join()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::NotAllowed { cpu: 8000, .. } | Error::SetAffinity { cpu: 8000, .. }
            ),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("cannot pin to CPU 8000: "), "{e}");
    }

    #[test]
    fn display_is_one_sentence() {
        let p = Placement {
            readers: vec![Some(0)],
            workers: vec![Some(1), Some(0)],
            source: "hwloc",
            notes: vec!["wrapped: 3 threads on 2 cores".to_owned()],
        };
        assert_eq!(
            p.to_string(),
            "Placement (hwloc): readers on CPU 0; workers on CPUs 1, 0 (wrapped: 3 threads on 2 cores)."
        );
    }
}
