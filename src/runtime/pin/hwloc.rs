//! hwloc: topology discovery, the allowed CPU set, cores near a GPU's PCIe
//! bus id, and binding the calling thread.
//!
//! The topology is discovered once per process and shared by every call:
//! [`topology`] has the CPUs alone, [`topology_with_io`] also the important
//! PCI devices, so a GPU can be found by bus id. Only placing threads near a
//! GPU needs the second: its PCI discovery took 0.22 s on the 16-core GPU
//! box (0.56 s with cold caches), before any read could start.
//! Its allowed CPUs (already cgroup-aware) are intersected with the process's
//! CPU binding (taskset), so a placement never names a CPU this process may
//! not run on. When discovery fails the caller falls back to
//! [`super::fallback`]; nothing here panics on a strange machine.

use std::sync::OnceLock;

use hwlocality::Topology;
use hwlocality::cpu::binding::CpuBindingFlags;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::object::types::ObjectType;
use hwlocality::topology::builder::TypeFilter;

use super::policy::MAX_CPU_ID;
use super::{Error, HwlocError, Layout};

/// The process-wide hwloc topology of the CPUs, discovered once (no I/O
/// devices: binding and CPU placement need none).
pub(super) fn topology() -> Result<&'static Topology, HwlocError> {
    static TOPOLOGY: OnceLock<Result<Topology, HwlocError>> = OnceLock::new();
    TOPOLOGY
        .get_or_init(|| Topology::builder().build().map_err(HwlocError::Discovery))
        .as_ref()
        .map_err(Clone::clone)
}

/// The process-wide hwloc topology with the important PCI devices,
/// discovered once, so a GPU's locality can be looked up.
pub(super) fn topology_with_io() -> Result<&'static Topology, HwlocError> {
    static TOPOLOGY: OnceLock<Result<Topology, HwlocError>> = OnceLock::new();
    TOPOLOGY
        .get_or_init(|| {
            Topology::builder()
                .with_io_type_filter(TypeFilter::KeepImportant)
                .map_err(HwlocError::IoFilter)?
                .build()
                .map_err(HwlocError::Discovery)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Binds the calling thread to `cpu` (OS index) with `hwloc_set_cpubind`.
pub(super) fn pin_current(topo: &Topology, cpu: usize) -> Result<(), Error> {
    if cpu > MAX_CPU_ID || !topo.cpuset().is_set(cpu) {
        return Err(Error::NotAllowed {
            cpu,
            allowed: CpuSet::clone(&topo.cpuset()),
        });
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    topo.bind_cpu(&set, CpuBindingFlags::THREAD)
        .map_err(|source| Error::Bind { cpu, source })
}

/// The CPUs this process may run on, sorted (see [`hwloc_allowed`]).
pub(super) fn allowed_cpus(topo: &Topology) -> Vec<usize> {
    let (set, _) = hwloc_allowed(topo);
    set.iter_set().map(usize::from).collect()
}

/// hwloc's allowed CPUs (cgroup-aware) intersected with the process binding
/// (taskset-aware), plus a note when the binding could not be read.
fn hwloc_allowed(topo: &Topology) -> (CpuSet, Option<String>) {
    let mut set: CpuSet = CpuSet::clone(&topo.allowed_cpuset());
    match topo
        .cpu_binding(CpuBindingFlags::PROCESS)
        .or_else(|_| topo.cpu_binding(CpuBindingFlags::THREAD))
    {
        Ok(binding) => {
            set &= binding;
            (set, None)
        }
        Err(e) => {
            let note = format!(
                "could not read the process CPU binding ({e}); using all CPUs hwloc allows"
            );
            (set, Some(note))
        }
    }
}

/// Allowed CPUs grouped into physical cores (hwloc `Core` objects), the cores
/// local to the GPU at `gpu` first; notes say what was found.
pub(super) fn layout(
    topo: &Topology,
    gpu: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<Layout, HwlocError> {
    let (allowed, note) = hwloc_allowed(topo);
    notes.extend(note);
    if allowed.is_empty() {
        return Err(HwlocError::NoAllowedCpus);
    }
    let allowed_pus = |set: &CpuSet| -> Vec<usize> {
        set.iter_set()
            .map(usize::from)
            .filter(|&p| allowed.is_set(p))
            .collect()
    };
    let mut cores: Vec<Vec<usize>> = topo
        .objects_with_type(ObjectType::Core)
        .filter_map(|core| core.cpuset().map(|set| allowed_pus(&set)))
        .filter(|pus| !pus.is_empty())
        .collect();
    if cores.is_empty() {
        notes.push("hwloc reports no cores; treating each CPU as a core".to_owned());
        cores = allowed.iter_set().map(|p| vec![usize::from(p)]).collect();
    }
    if let Some(bus) = gpu {
        prefer_gpu_local(topo, bus, &mut cores, notes);
    }
    Ok(Layout {
        cores,
        unit: "cores",
        source: "hwloc",
    })
}

/// Moves the cores local to the GPU at `bus` to the front (stable), noting
/// what was found; an unknown or malformed bus id only adds a note.
fn prefer_gpu_local(topo: &Topology, bus: &str, cores: &mut [Vec<usize>], notes: &mut Vec<String>) {
    let device = match topo.pci_device_by_bus_id_string(bus.trim()) {
        Err(_) => {
            notes.push(format!(
                "GPU bus id {bus:?} is not a PCI bus id (expected dddd:bb:dd.f); GPU locality ignored"
            ));
            return;
        }
        Ok(None) => {
            notes.push(format!(
                "GPU {bus} not found in the hwloc topology; GPU locality ignored"
            ));
            return;
        }
        Ok(Some(device)) => device,
    };
    let Some(local) = device.first_non_io_ancestor().and_then(|a| a.cpuset()) else {
        notes.push(format!(
            "GPU {bus} has no CPU locality in hwloc; GPU locality ignored"
        ));
        return;
    };
    let is_local = |core: &Vec<usize>| core.iter().any(|&p| local.is_set(p));
    let n_local = cores.iter().filter(|c| is_local(c)).count();
    if n_local == 0 {
        notes.push(format!(
            "no allowed CPU is local to GPU {bus} (local CPUs {}); GPU locality ignored",
            *local
        ));
    } else if n_local < cores.len() {
        cores.sort_by_key(|c| !is_local(c));
        notes.push(format!(
            "{n_local} of {} cores are local to GPU {bus} and are used first",
            cores.len()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all, thread_affinity};
    use super::super::{PinPolicy, plan};
    use super::*;

    fn core_count() -> usize {
        let topo = topology().expect("hwloc topology on the test machine");
        let mut notes = Vec::new();
        layout(topo, None, &mut notes).unwrap().cores.len()
    }

    #[test]
    fn auto_uses_distinct_allowed_cores_first() {
        let allowed = thread_affinity();
        let cores = core_count();
        for (nr, nw) in [(1, 0), (0, 1), (1, 1), (1, 3), (2, 5)] {
            let p = plan(&PinPolicy::Auto, nr, nw, None);
            assert_eq!(p.source, "hwloc", "{p}");
            assert_eq!((p.readers.len(), p.workers.len()), (nr, nw));
            let cpus = all(&p);
            assert!(
                cpus.iter().all(|c| allowed.contains(c)),
                "{p} vs {allowed:?}"
            );
            let first = &cpus[..cpus.len().min(cores)];
            let mut distinct = first.to_vec();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), first.len(), "first {cores} distinct: {p}");
            let wrapped = p.notes.iter().any(|n| n.starts_with("wrapped:"));
            assert_eq!(wrapped, nr + nw > cores, "{p}");
        }
    }

    #[test]
    fn auto_wraps_with_a_note_when_threads_exceed_cores() {
        let cores = core_count();
        let p = plan(&PinPolicy::Auto, 1, cores + 1, None);
        let note = format!("wrapped: {} threads on {cores} cores", cores + 2);
        assert!(p.notes.iter().any(|n| n.starts_with(&note)), "{p}");
        assert!(p.to_string().contains(&note));
        if cores == 2 && thread_affinity() == [0, 1] {
            // This machine (2 cores, no SMT): the example sentence from the spec.
            let p = plan(&PinPolicy::Auto, 1, 2, None);
            assert_eq!(
                p.to_string(),
                "Placement (hwloc): readers on CPU 0; workers on CPUs 1, 0 \
                 (wrapped: 3 threads on 2 cores, 1 CPU shared)."
            );
        }
        // Wrapping is round robin: thread i and thread i + cores share a CPU
        // (no hyperthreads here; with them, the wrap goes to siblings first).
        let cpus = all(&p);
        assert_eq!(cpus.len(), cores + 2);
    }

    #[test]
    fn pin_current_outside_the_topology_names_its_cpuset() {
        let topo = topology().expect("hwloc topology on the test machine");
        let e = pin_current(topo, MAX_CPU_ID + 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot pin to CPU {}: not in this machine's allowed CPUs ({})",
                MAX_CPU_ID + 1,
                topo.cpuset()
            )
        );
    }

    #[test]
    fn zero_threads_is_an_empty_placement() {
        let p = plan(&PinPolicy::Auto, 0, 0, None);
        assert!(p.readers.is_empty() && p.workers.is_empty());
        assert_eq!(p.to_string(), "Placement (hwloc): no readers; no workers.");
    }

    #[test]
    fn unknown_gpu_adds_a_note_and_places_normally() {
        let plain = plan(&PinPolicy::Auto, 1, 2, None);
        let p = plan(&PinPolicy::Auto, 1, 2, Some("0000:ff:1f.7"));
        assert_eq!(p.source, "hwloc");
        assert_eq!(all(&p), all(&plain));
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("GPU 0000:ff:1f.7 not found")),
            "{p}"
        );
        let bad = plan(&PinPolicy::Auto, 1, 2, Some("gpu0"));
        assert_eq!(all(&bad), all(&plain));
        assert!(
            bad.notes.iter().any(|n| n.contains("not a PCI bus id")),
            "{bad}"
        );
    }
}
