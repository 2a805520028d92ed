//! The serve test harness: a running `melforge serve` child with its own
//! directories and socket (killed on drop), and checks over its output.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use melforge::config::Config;
use serde_json::Value;

use crate::common::{features_of, read_split, synth_corpus};

pub(super) const BIN: &str = env!("CARGO_BIN_EXE_melforge");
pub(super) const WAIT: Duration = Duration::from_secs(30);

/// Polls `f` every 20 ms until it returns `Some`, or panics with `what` after `limit`.
pub(super) fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The compute stage a service under test runs: the serve matrix runs its
/// tests once with each and expects the same results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// CPU workers (what `auto` picks on a host without a GPU).
    Cpu,
    /// The CUDA stage over the host double and the host-built kernels
    /// (`MELFORGE_CUDA_HOST_DOUBLE=1`, a build with the `host-kernels` feature).
    CudaDouble,
}

impl Stage {
    /// The backend `ctl status` must report.
    pub(super) fn backend(self) -> &'static str {
        match self {
            Stage::Cpu => "cpu",
            Stage::CudaDouble => "cuda",
        }
    }
}

/// Runs a serve test once per compute stage: `both_stages!(name)` makes
/// `name::cpu` and `name::cuda_double` from `fn name(stage: Stage)`.
macro_rules! both_stages {
    ($name:ident) => {
        mod $name {
            #[test]
            fn cpu() {
                super::$name(super::harness::Stage::Cpu);
            }
            #[test]
            fn cuda_double() {
                super::$name(super::harness::Stage::CudaDouble);
            }
        }
    };
}
pub(super) use both_stages;

/// A service under test: its directories, config, socket, logs and process.
pub(super) struct Svc {
    pub(super) root: tempfile::TempDir,
    pub(super) drop: PathBuf,
    pub(super) out: PathBuf,
    pub(super) cfg: PathBuf,
    pub(super) sock: PathBuf,
    pub(super) child: Option<Child>,
    pub(super) runs: usize,
    pub(super) staged: AtomicUsize,
    pub(super) stage: Stage,
    /// Extra environment for the next runs (e.g. an LD_PRELOAD fault shim).
    pub(super) env: Vec<(String, String)>,
}

impl Svc {
    /// A service config with `flush_interval_ms` and extra TOML after the
    /// `[serve]`/`[control]` sections (not started yet).
    pub(super) fn new(flush_ms: u64, extra: &str) -> Svc {
        Svc::with_stage(Stage::Cpu, flush_ms, extra)
    }

    /// As [`Svc::new`], computing on `stage`.
    pub(super) fn with_stage(stage: Stage, flush_ms: u64, extra: &str) -> Svc {
        let root = tempfile::tempdir().unwrap();
        let drop = root.path().join("drop");
        std::fs::create_dir_all(&drop).unwrap();
        std::fs::create_dir_all(root.path().join("stage")).unwrap();
        let s = Svc {
            drop,
            out: root.path().join("out"),
            cfg: root.path().join("cfg.toml"),
            sock: root.path().join("ctl.sock"),
            root,
            child: None,
            runs: 0,
            staged: AtomicUsize::new(0),
            stage,
            env: Vec::new(),
        };
        s.write_config(flush_ms, extra);
        s
    }

    pub(super) fn write_config(&self, flush_ms: u64, extra: &str) {
        let text = format!(
            "[serve]\nwatch_dir = \"drop\"\noutput_dir = \"out\"\nflush_interval_ms = {flush_ms}\n\
             [control]\nsocket = \"ctl.sock\"\n{extra}\n"
        );
        std::fs::write(&self.cfg, text).unwrap();
    }

    pub(super) fn log_path(&self, run: usize) -> PathBuf {
        self.root.path().join(format!("serve.{run}.log"))
    }

    /// The log of the current (or last) run.
    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(self.log_path(self.runs)).unwrap_or_default()
    }

    /// Starts `melforge serve` (a new log per run) without waiting for it.
    pub(super) fn spawn(&mut self) {
        assert!(self.child.is_none(), "already running");
        self.runs += 1;
        let log = std::fs::File::create(self.log_path(self.runs)).unwrap();
        let mut cmd = Command::new(BIN);
        match self.stage {
            Stage::Cpu => cmd.env_remove(melforge::compute::HOST_DOUBLE_ENV),
            Stage::CudaDouble => cmd.env(melforge::compute::HOST_DOUBLE_ENV, "1"),
        };
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = cmd
            .args(["--log-level", "debug", "serve", "--config"])
            .arg(&self.cfg)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Starts the service and waits until its loop answers `status`, which
    /// must name the backend of the stage under test.
    pub(super) fn start(&mut self) {
        let st = self.start_any();
        assert_eq!(
            st["backend"],
            self.stage.backend(),
            "the service runs another backend than the test asked for: {st}"
        );
    }

    /// Starts the service and waits until its loop answers `status`,
    /// whichever backend it runs (a test of a fall-back); that status.
    pub(super) fn start_any(&mut self) -> Value {
        self.spawn();
        wait_for(WAIT, "the service to answer status", || {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("serve exited at start-up ({st}):\n{}", self.log());
            }
            self.try_ctl("status").filter(|v| v["ok"] == true)
        })
    }

    pub(super) fn pid(&self) -> libc::pid_t {
        self.child.as_ref().expect("running").id() as libc::pid_t
    }

    pub(super) fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Waits (bounded) for the process to exit and returns its status.
    pub(super) fn wait_exit(&mut self) -> ExitStatus {
        let child = self.child.as_mut().expect("running");
        let st = wait_for(WAIT, "serve to exit", || child.try_wait().unwrap());
        self.child = None;
        st
    }

    pub(super) fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        self.wait_exit();
    }

    /// `ctl shutdown`, then the exit status must be success.
    pub(super) fn shutdown(&mut self) {
        let r = self.ctl("shutdown");
        assert_eq!(r["state"], "stopping", "{r}");
        let st = self.wait_exit();
        assert!(st.success(), "serve exited with {st}:\n{}", self.log());
    }

    /// `melforge ctl --json <cmd>`; `None` when it cannot connect or the reply
    /// is not JSON.
    pub(super) fn try_ctl(&self, cmd: &str) -> Option<Value> {
        let out = Command::new(BIN)
            .args(["ctl", "--json", "--timeout", "30", "--socket"])
            .arg(&self.sock)
            .arg(cmd)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(line.trim()).ok()
    }

    pub(super) fn ctl(&self, cmd: &str) -> Value {
        self.try_ctl(cmd)
            .unwrap_or_else(|| panic!("no reply to `{cmd}`:\n{}", self.log()))
    }

    pub(super) fn status(&self) -> Value {
        let s = self.ctl("status");
        assert_eq!(s["ok"], true, "{s}");
        s
    }

    /// Waits until the splits hold `rows` rows in all and nothing is queued or
    /// in flight; returns the last status.
    pub(super) fn wait_rows(&self, rows: u64) -> Value {
        wait_for(WAIT, &format!("{rows} rows"), || {
            let s = self.status();
            let idle = s["queued"] == 0 && s["in_flight"] == 0;
            (idle && total_rows(&s) == rows).then_some(s)
        })
    }

    /// Writes `bytes` in `stage/` and renames it to `drop/<rel>` (the writer
    /// contract); folders in `drop/` are created first.
    pub(super) fn drop_file(&self, rel: &str, bytes: &[u8]) {
        let n = self.staged.fetch_add(1, Ordering::Relaxed);
        let tmp = self.root.path().join("stage").join(n.to_string());
        std::fs::write(&tmp, bytes).unwrap();
        let to = self.drop.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::rename(&tmp, &to).unwrap();
    }
}

impl Drop for Svc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            for run in 1..=self.runs {
                let log = std::fs::read_to_string(self.log_path(run)).unwrap_or_default();
                // Without the status polling, which would bury everything else.
                let tail: Vec<&str> = log
                    .lines()
                    .filter(|l| !l.contains("command=status") && !l.contains("Command status"))
                    .rev()
                    .take(60)
                    .collect();
                eprintln!("--- serve run {run} log (last lines) ---");
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}

pub(super) fn total_rows(status: &Value) -> u64 {
    status["rows"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// Files the journal has committed (`journal.index_entries`: its snapshot
/// and its tail), as `ctl status` reports them: rows count as soon as they
/// are appended, these only once a flush made them durable and the journal
/// confirmed them.
pub(super) fn committed_files(status: &Value) -> u64 {
    status["journal"]["index_entries"].as_u64().unwrap_or(0)
}

/// The clips of a synthetic corpus: relative path → bytes, sorted.
pub(super) fn clips(files: u64, seed: u64) -> Vec<(String, Vec<u8>)> {
    let d = synth_corpus(files, seed);
    let mut out = Vec::new();
    let mut stack = vec![d.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(d.path()).unwrap().to_str().unwrap();
                out.push((rel.to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Every `<split>.h5` of `out` read back (the service must be stopped).
pub(super) fn splits(out: &Path) -> BTreeMap<String, crate::common::Split> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(out).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "h5") {
            let name = p.file_stem().unwrap().to_str().unwrap().to_string();
            m.insert(name, read_split(&p));
        }
    }
    m
}

/// All `path` entries of every split, sorted (duplicates kept).
pub(super) fn all_paths(out: &Path) -> Vec<String> {
    let mut v: Vec<String> = splits(out).into_values().flat_map(|s| s.path).collect();
    v.sort();
    v
}

/// Asserts that the stopped service's files hold `want` exactly once each,
/// that the journal confirms exactly those rows, and that the values of
/// `sample` rows equal a direct computation with `cfg`.
pub(super) fn assert_exactly_once(
    svc: &Svc,
    want: &[(String, Vec<u8>)],
    cfg: &Config,
    sample: usize,
) {
    let got = all_paths(&svc.out);
    let mut expect: Vec<String> = want.iter().map(|(p, _)| p.clone()).collect();
    expect.sort();
    let dups: Vec<&String> = got
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| &w[0])
        .collect();
    assert!(dups.is_empty(), "duplicated rows: {dups:?}");
    let got_set: BTreeSet<&String> = got.iter().collect();
    let missing: Vec<&String> = expect.iter().filter(|p| !got_set.contains(p)).collect();
    assert!(missing.is_empty(), "missing rows: {missing:?}");
    assert_eq!(got, expect);

    let (_journal, state) =
        melforge::app::serve::journal::Journal::open(&svc.out.join(".melforge")).unwrap();
    let files = splits(&svc.out);
    for (split, s) in &files {
        assert_eq!(
            state.rows_of(split),
            s.path.len(),
            "journal rows of {split}"
        );
        assert_eq!(s.mel.shape()[0], s.path.len());
        assert_eq!(s.label.len(), s.path.len());
    }
    assert_eq!(state.rows.values().sum::<usize>(), got.len());

    let bytes: HashMap<&str, &[u8]> = want.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
    let step = (want.len() / sample.max(1)).max(1);
    let mut checked = 0;
    for s in files.values() {
        for (i, p) in s.path.iter().enumerate() {
            if i % step != 0 {
                continue;
            }
            let want = features_of(bytes[p.as_str()], cfg);
            let row = s.mel.index_axis(ndarray::Axis(0), i);
            assert_eq!(row.as_slice().unwrap(), &want[..], "row {i} ({p})");
            checked += 1;
        }
    }
    assert!(checked > 0);
}

/// Whether `python3 -c "import h5py"` works; prints why not.
pub(super) fn have_h5py(test: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import h5py"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("{test}: skipped the h5py part: `import h5py` fails in python3");
    }
    ok
}

/// Opens `path` (a file serve appends to: string columns) with h5py (SWMR
/// read when `swmr`), checks its paths are distinct and returns its row
/// count.
pub(super) fn h5py_rows(path: &Path, swmr: bool) -> Result<usize, String> {
    let script = "import sys, h5py\n\
        swmr = sys.argv[2] == '1'\n\
        f = h5py.File(sys.argv[1], 'r', libver='latest', swmr=swmr)\n\
        n = min(f[k].shape[0] for k in ('mel', 'label', 'path_end'))\n\
        end = f['path_end'][:n]\n\
        data = f['path_utf8'][:end[-1] if n else 0].tobytes()\n\
        paths = [data[a:b].decode() for a, b in zip([0, *end[:-1]], end)]\n\
        assert len(set(paths)) == n, 'duplicate paths'\n\
        print(n)\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .arg(if swmr { "1" } else { "0" })
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|e| format!("{e}"))
}
