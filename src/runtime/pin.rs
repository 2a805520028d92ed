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

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use hwlocality::Topology;
use hwlocality::cpu::binding::CpuBindingFlags;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::object::types::ObjectType;
use hwlocality::topology::builder::TypeFilter;

/// Largest CPU id accepted in an explicit list (Linux supports at most 8192).
const MAX_CPU_ID: usize = 8191;

/// How the user wants threads placed (config key `io.pin` / `compute.pin`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum PinPolicy {
    /// Let [`plan`] choose from the machine's topology.
    Auto,
    /// Do not pin; the kernel schedules freely.
    Off,
    /// Explicit logical CPU ids (OS indices), used round robin.
    Cores(Vec<usize>),
}

/// A pin policy string that does not parse; the message names the bad part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParsePinPolicyError(String);

const EXPECTED: &str = r#"expected "auto", "off" or a CPU list like "0,2,4-7""#;

impl FromStr for PinPolicy {
    type Err = ParsePinPolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |msg: String| Err(ParsePinPolicyError(msg));
        let text = s.trim();
        if text.is_empty() {
            return err(format!("empty pin policy; {EXPECTED}"));
        }
        if text.eq_ignore_ascii_case("auto") {
            return Ok(PinPolicy::Auto);
        }
        if text.eq_ignore_ascii_case("off") {
            return Ok(PinPolicy::Off);
        }
        let mut cpus: Vec<usize> = Vec::new();
        for item in text.split(',').map(str::trim) {
            if item.is_empty() {
                return err(format!("empty entry in CPU list {text:?}; {EXPECTED}"));
            }
            let parse_id = |part: &str| -> Result<usize, ParsePinPolicyError> {
                let id: usize = part.trim().parse().map_err(|_| {
                    ParsePinPolicyError(format!(
                        "{item:?} is not a CPU number or range (in {text:?}); {EXPECTED}"
                    ))
                })?;
                if id > MAX_CPU_ID {
                    return Err(ParsePinPolicyError(format!(
                        "CPU {id} is out of range (at most {MAX_CPU_ID}) in {text:?}"
                    )));
                }
                Ok(id)
            };
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (parse_id(a)?, parse_id(b)?),
                None => {
                    let id = parse_id(item)?;
                    (id, id)
                }
            };
            if lo > hi {
                return err(format!(
                    "range {item:?} is reversed in {text:?}; write it low-high"
                ));
            }
            for id in lo..=hi {
                if cpus.contains(&id) {
                    return err(format!("CPU {id} is listed twice in {text:?}"));
                }
                cpus.push(id);
            }
        }
        Ok(PinPolicy::Cores(cpus))
    }
}

impl fmt::Display for PinPolicy {
    /// The config spelling, which parses back to the same policy.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinPolicy::Auto => f.write_str("auto"),
            PinPolicy::Off => f.write_str("off"),
            PinPolicy::Cores(cpus) => f.write_str(&compact_list(cpus)),
        }
    }
}

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
        PinPolicy::Auto => plan_auto(topology(), n_readers, n_workers, gpu_pci_bus_id),
    }
}

/// Pins the calling thread to `cpu` when a placement gave one; a failure is
/// logged (naming `who`, e.g. "Reader 0") and the thread runs unpinned.
pub fn pin_or_warn(cpu: Option<usize>, who: &str) {
    if let Some(cpu) = cpu
        && let Err(e) = pin_current(cpu)
    {
        tracing::warn!("{who} runs unpinned: {e}.");
    }
}

/// Pins the calling thread to `cpu` (OS index); the error says why it failed.
///
/// Uses hwloc (`hwloc_set_cpubind` with `THREAD`), or core_affinity
/// (`sched_setaffinity`) when the hwloc topology is unavailable.
pub fn pin_current(cpu: usize) -> Result<(), String> {
    match topology() {
        Ok(topo) => {
            if cpu > MAX_CPU_ID || !topo.cpuset().is_set(cpu) {
                return Err(format!(
                    "cannot pin to CPU {cpu}: not in this machine's allowed CPUs ({})",
                    topo.cpuset()
                ));
            }
            let mut set = CpuSet::new();
            set.set(cpu);
            topo.bind_cpu(&set, CpuBindingFlags::THREAD)
                .map_err(|e| format!("cannot pin to CPU {cpu}: hwloc_set_cpubind failed: {e}"))
        }
        Err(why) => {
            if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
                Ok(())
            } else {
                Err(format!(
                    "cannot pin to CPU {cpu}: sched_setaffinity failed ({}); hwloc unavailable: {why}",
                    std::io::Error::last_os_error()
                ))
            }
        }
    }
}

/// Checks an explicit CPU list against the CPUs this process may run on; for
/// the config layer, so a bad `io.pin` / `compute.pin` fails at load time.
pub fn validate_cores(cpus: &[usize]) -> Result<(), String> {
    if cpus.is_empty() {
        return Err("the CPU list is empty".to_owned());
    }
    let (allowed, _) = allowed_cpus()?;
    let bad: Vec<usize> = cpus
        .iter()
        .copied()
        .filter(|c| !allowed.contains(c))
        .collect();
    match bad.as_slice() {
        [] => Ok(()),
        [one] => Err(format!(
            "CPU {one} is not available to this process (allowed CPUs: {})",
            compact_list(&allowed)
        )),
        many => Err(format!(
            "CPUs {} are not available to this process (allowed CPUs: {})",
            compact_list(many),
            compact_list(&allowed)
        )),
    }
}

/// The process-wide hwloc topology, discovered once (with important PCI
/// devices, so a GPU's locality can be looked up).
fn topology() -> Result<&'static Topology, String> {
    static TOPOLOGY: OnceLock<Result<Topology, String>> = OnceLock::new();
    TOPOLOGY
        .get_or_init(|| {
            Topology::builder()
                .with_io_type_filter(TypeFilter::KeepImportant)
                .map_err(|e| format!("hwloc I/O filter refused: {e}"))?
                .build()
                .map_err(|e| format!("hwloc topology discovery failed: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The CPUs this process may run on, sorted, and which library said so.
fn allowed_cpus() -> Result<(Vec<usize>, &'static str), String> {
    match topology() {
        Ok(topo) => {
            let (set, _) = hwloc_allowed(topo);
            Ok((set.iter_set().map(usize::from).collect(), "hwloc"))
        }
        Err(why) => match core_affinity::get_core_ids() {
            Some(ids) if !ids.is_empty() => {
                let mut cpus: Vec<usize> = ids.into_iter().map(|c| c.id).collect();
                cpus.sort_unstable();
                Ok((cpus, "core_affinity"))
            }
            _ => Err(format!(
                "cannot read the allowed CPU set: hwloc unavailable ({why}) and sched_getaffinity failed"
            )),
        },
    }
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

/// Allowed CPUs grouped into cores, in order of preference.
struct Layout {
    /// Each core's allowed CPUs (OS indices), first choice first.
    cores: Vec<Vec<usize>>,
    /// What a "core" is, for the wrap note: "cores", "CPUs", "configured CPUs".
    unit: &'static str,
    source: &'static str,
}

fn plan_auto(
    topo: Result<&Topology, String>,
    n_readers: usize,
    n_workers: usize,
    gpu: Option<&str>,
) -> Placement {
    let mut notes = Vec::new();
    let layout = match topo.and_then(|t| hwloc_layout(t, gpu, &mut notes)) {
        Ok(layout) => layout,
        Err(why) => {
            notes.push(format!("hwloc unavailable ({why}), using core_affinity"));
            if let Some(bus) = gpu {
                notes.push(format!("GPU {bus} locality ignored without hwloc"));
            }
            match core_affinity::get_core_ids() {
                Some(ids) if !ids.is_empty() => Layout {
                    cores: ids.into_iter().map(|c| vec![c.id]).collect(),
                    unit: "CPUs",
                    source: "core_affinity",
                },
                _ => {
                    notes.push("core_affinity could not read the CPU set either".to_owned());
                    return Placement::off(n_readers, n_workers, notes);
                }
            }
        }
    };
    assign(&layout, n_readers, n_workers, notes)
}

fn hwloc_layout(
    topo: &Topology,
    gpu: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<Layout, String> {
    let (allowed, note) = hwloc_allowed(topo);
    notes.extend(note);
    if allowed.is_empty() {
        return Err("no allowed CPUs in the hwloc topology".to_owned());
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

/// `[0, 2, 4, 5, 6, 7]` → `"0,2,4-7"` (runs of consecutive ids as ranges).
fn compact_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", cpus[i], cpus[j])
        } else {
            cpus[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's affinity mask, straight from the kernel.
    fn thread_affinity() -> Vec<usize> {
        // SAFETY: cpu_set_t is plain bit data; all-zero is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; the pointer and size describe
        // `set`, which lives across the call.
        let rc =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        assert_eq!(
            rc,
            0,
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| {
                // SAFETY: c < CPU_SETSIZE, so the bit is inside `set`.
                unsafe { libc::CPU_ISSET(c, &set) }
            })
            .collect()
    }

    fn parse_err(s: &str) -> String {
        s.parse::<PinPolicy>().unwrap_err().to_string()
    }

    fn core_count() -> usize {
        let topo = topology().expect("hwloc topology on the test machine");
        let mut notes = Vec::new();
        hwloc_layout(topo, None, &mut notes).unwrap().cores.len()
    }

    fn all(p: &Placement) -> Vec<usize> {
        p.readers
            .iter()
            .chain(&p.workers)
            .map(|c| c.unwrap())
            .collect()
    }

    #[test]
    fn parse_valid_policies() {
        assert_eq!("auto".parse(), Ok(PinPolicy::Auto));
        assert_eq!(" AUTO ".parse(), Ok(PinPolicy::Auto));
        assert_eq!("off".parse(), Ok(PinPolicy::Off));
        assert_eq!("Off".parse(), Ok(PinPolicy::Off));
        assert_eq!("3".parse(), Ok(PinPolicy::Cores(vec![3])));
        assert_eq!("4-4".parse(), Ok(PinPolicy::Cores(vec![4])));
        assert_eq!(
            "0,2,4-7".parse(),
            Ok(PinPolicy::Cores(vec![0, 2, 4, 5, 6, 7]))
        );
        assert_eq!(" 1 , 3 - 4 ".parse(), Ok(PinPolicy::Cores(vec![1, 3, 4])));
        assert_eq!(
            "5,1".parse(),
            Ok(PinPolicy::Cores(vec![5, 1])),
            "order is kept"
        );
    }

    #[test]
    fn parse_invalid_policies_say_why() {
        assert!(parse_err("").contains("empty pin policy"));
        assert!(parse_err("   ").contains("expected \"auto\""));
        assert!(parse_err("fast").contains("\"fast\" is not a CPU number or range"));
        assert!(parse_err("0;1").contains("\"0;1\" is not a CPU number"));
        assert!(parse_err("1-").contains("\"1-\" is not a CPU number or range"));
        assert!(parse_err("-1").contains("\"-1\" is not a CPU number or range"));
        assert!(parse_err("7-4").contains("range \"7-4\" is reversed"));
        assert!(parse_err("0,,1").contains("empty entry in CPU list \"0,,1\""));
        assert!(parse_err("0,").contains("empty entry"));
        assert!(parse_err("0-3,2").contains("CPU 2 is listed twice"));
        assert!(parse_err("99999").contains("CPU 99999 is out of range"));
    }

    #[test]
    fn policy_display_round_trips() {
        for s in ["auto", "off", "0,2,4-7", "5,1", "3"] {
            let p: PinPolicy = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
            assert_eq!(p.to_string().parse::<PinPolicy>().unwrap(), p);
        }
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
    fn zero_threads_is_an_empty_placement() {
        let p = plan(&PinPolicy::Auto, 0, 0, None);
        assert!(p.readers.is_empty() && p.workers.is_empty());
        assert_eq!(p.to_string(), "Placement (hwloc): no readers; no workers.");
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
        assert_eq!(validate_cores(&allowed), Ok(()));
        let e = validate_cores(&[allowed[0], 8000]).unwrap_err();
        assert!(
            e.contains("CPU 8000 is not available to this process"),
            "{e}"
        );
        assert!(
            e.contains(&format!("allowed CPUs: {}", compact_list(&allowed))),
            "{e}"
        );
        let e = validate_cores(&[7000, 7001]).unwrap_err();
        assert!(e.contains("CPUs 7000-7001 are not available"), "{e}");
        assert!(validate_cores(&[]).unwrap_err().contains("empty"));
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
        assert!(e.contains("cannot pin to CPU 8000"), "{e}");
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

    #[test]
    fn compact_list_makes_ranges() {
        assert_eq!(compact_list(&[0, 2, 4, 5, 6, 7]), "0,2,4-7");
        assert_eq!(compact_list(&[]), "");
        assert_eq!(compact_list(&[3, 2]), "3,2");
    }
}
