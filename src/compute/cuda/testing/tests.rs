//! Orchestration tests on the host double: operation order, graph capture per
//! shape, extent release only after the copy (model check with late-completing
//! streams), teardown without panics, and real numbers through the host-built
//! kernels compared with the CPU backend.

use std::sync::{Arc, Mutex};

use super::double::{Call, Entry, HostArg, HostDouble, HostKernels, Log, Progress, Work, note};
use crate::compute::cuda::device::{
    Arg, DevBuf, Device, DeviceError, Event, FftPlan, FftShape, Graph, GraphExec, HostReg, Kernel,
    LaunchDims, Pinned, Result, Stream,
};
use crate::compute::cuda::orchestrate::{
    BatchRunner, Desc, HostBytes, Recipe, RunnerConfig, Shape, Staged,
};
use crate::decode::wav::{SampleFormat, WavInfo};

// ---------------------------------------------------------------- fixtures

/// A tiny recipe: one kernel copies 16 bytes from each file's data to its row.
pub(super) struct Gather;

pub(super) const ROW: usize = 16;

impl Recipe for Gather {
    type Work = DevBuf;
    fn desc_bytes(&self) -> usize {
        8
    }
    fn encode(&self, f: Desc<'_>, out: &mut [u8]) {
        let v = match f {
            Desc::File(p) => p.data,
            Desc::Pad { .. } => u64::MAX,
        };
        out.copy_from_slice(&v.to_le_bytes());
    }
    fn clip_samples(&self) -> usize {
        16
    }
    fn row_bytes(&self) -> usize {
        ROW
    }
    fn init<D: Device>(&mut self, dev: &mut D) -> Result<()> {
        // Like MelRecipe: an upload stream first (so copy = 1, compute = 2).
        dev.create_stream()?;
        dev.kernel("gather").map(|_| ())
    }
    fn alloc_work<D: Device>(&mut self, dev: &mut D, files: usize) -> Result<DevBuf> {
        dev.alloc(files * ROW)
    }
    fn prepare<D: Device>(&mut self, _dev: &mut D, _files: usize) -> Result<()> {
        Ok(())
    }
    fn issue<D: Device>(
        &mut self,
        dev: &mut D,
        s: Stream,
        rows: &DevBuf,
        input: DevBuf,
        descs: DevBuf,
        out: Pinned,
        shape: Shape,
    ) -> Result<()> {
        let n = shape.files;
        dev.launch(
            s,
            Kernel(0),
            LaunchDims { grid: 1, block: 1 },
            &[
                Arg::buf(input),
                Arg::buf(descs),
                Arg::I32(n as i32),
                Arg::buf(*rows),
            ],
        )?;
        dev.memcpy_dtoh_async(s, out, 0, *rows, 0, n * ROW)
    }
}

pub(super) struct GatherKernel;

impl HostKernels for GatherKernel {
    unsafe fn run(&mut self, name: &str, _d: LaunchDims, a: &[HostArg]) -> Result<()> {
        let &[
            HostArg::Ptr(input),
            HostArg::Ptr(descs),
            HostArg::I32(n),
            HostArg::Ptr(rows),
        ] = a
        else {
            return Err(DeviceError::new("launch", format!("{name}: bad args")));
        };
        for b in 0..n as usize {
            // SAFETY: test buffers sized by `Gather` for n files.
            unsafe {
                let mut d = [0u8; 8];
                std::ptr::copy_nonoverlapping(descs.add(b * 8), d.as_mut_ptr(), 8);
                let off = u64::from_le_bytes(d);
                let dst = rows.add(b * ROW);
                if off == u64::MAX {
                    std::ptr::write_bytes(dst, 0, ROW);
                } else {
                    std::ptr::copy_nonoverlapping(input.add(off as usize), dst, ROW);
                }
            }
        }
        Ok(())
    }
}

/// File bytes inside a shared test "arena"; dropping logs the release and
/// poisons the bytes, as a reader reusing the extent would.
pub(super) struct TestBytes {
    pub(super) id: usize,
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    pub(super) log: Log,
}

impl HostBytes for TestBytes {
    fn ptr(&self) -> *const u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for TestBytes {
    fn drop(&mut self) {
        note(&self.log, Entry::Note(format!("release {}", self.id)));
        // SAFETY: the range is this value's part of the test arena.
        unsafe { std::ptr::write_bytes(self.ptr, 0xAA, self.len) };
    }
}

pub(super) const HEADER: usize = 44;
pub(super) const FILE: usize = HEADER + 32;

pub(super) fn info() -> WavInfo {
    WavInfo {
        sample_rate: 4096,
        channels: 1,
        format: SampleFormat::I16,
        block_align: 2,
        data_offset: HEADER,
        frames: 16,
    }
}

/// An arena of `n` files; file i's data bytes are (i, i+1, …). Files are
/// adjacent, so consecutive ones coalesce into one copy; `gap` inserts a hole
/// after every third file to exercise both paths.
pub(super) fn arena(n: usize) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut mem = Vec::new();
    let mut spans = Vec::new();
    for i in 0..n {
        if i % 3 == 0 {
            mem.extend(std::iter::repeat_n(0u8, 13));
        }
        let start = mem.len();
        mem.extend(std::iter::repeat_n(0u8, HEADER));
        mem.extend((0..32).map(|k| (i * 7 + k) as u8));
        spans.push((start, FILE));
    }
    (mem, spans)
}

pub(super) fn expected_row(i: usize) -> Vec<u8> {
    (0..ROW).map(|k| (i * 7 + k) as u8).collect()
}

pub(super) type Runner<D> = BatchRunner<D, Gather, usize, TestBytes>;

pub(super) fn runner(log: &Log, progress: Progress, b: usize) -> Runner<HostDouble> {
    let dev = HostDouble::new(Arc::clone(log), progress).with_kernels(Box::new(GatherKernel));
    let cfg = RunnerConfig::new(b, 4096);
    BatchRunner::new(dev, Gather, cfg).unwrap()
}

/// Feeds `n` files through a runner; returns the rows by file id.
pub(super) fn feed<D: Device>(
    r: &mut Runner<D>,
    mem: &mut [u8],
    spans: &[(usize, usize)],
    log: &Log,
) -> Result<Vec<Option<Vec<u8>>>> {
    let rows = std::cell::RefCell::new(vec![None; spans.len()]);
    let mut sink = |id: usize, vals: &[f32]| {
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert!(rows.borrow()[id].is_none(), "file {id} harvested twice");
        rows.borrow_mut()[id] = Some(bytes);
    };
    for (id, &(start, len)) in spans.iter().enumerate() {
        let item = Staged {
            tag: id,
            bytes: TestBytes {
                id,
                // The test arena outlives the runner's use of every item.
                ptr: mem[start..].as_mut_ptr(),
                len,
                log: Arc::clone(log),
            },
            info: info(),
        };
        if let Err(back) = r.add(item) {
            r.flush(&mut sink)?;
            assert!(r.add(back).is_ok());
        }
        r.poll(&mut sink)?;
    }
    r.finish(&mut sink)?;
    Ok(rows.into_inner())
}

pub(super) fn calls(log: &Log) -> Vec<Call> {
    log.lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Entry::Call(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------- tests

#[test]
fn three_batches_issue_copy_wait_replay_in_order_and_capture_once_per_shape() {
    let log: Log = Arc::default();
    let (mut mem, spans) = arena(10); // B = 4: batches of 4, 4, 2
    let mut r = runner(&log, Progress::Eager, 4);
    let rows = feed(&mut r, &mut mem, &spans, &log).unwrap();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.as_deref(), Some(&expected_row(i)[..]), "file {i}");
    }
    let st = r.stats();
    assert_eq!((st.batches, st.files, st.padded_files), (3, 10, 0));
    drop(r);

    let c = calls(&log);
    let (copy, compute) = (Stream(1), Stream(2)); // stream 0: the recipe's upload
    // Every graph launch is preceded, since the previous one, by: descriptor
    // copy and byte copies on the copy stream, the copy event, the compute
    // stream's wait on it; and followed by the done event.
    let launches: Vec<usize> = (0..c.len())
        .filter(|&i| matches!(c[i], Call::GraphLaunch { .. }))
        .collect();
    assert_eq!(launches.len(), 3);
    let mut prev = 0;
    for &at in &launches {
        let window = &c[prev..at];
        let pos = |f: &dyn Fn(&Call) -> bool| window.iter().position(f);
        let ptod = pos(&|c| matches!(c, Call::Issue { stream, work: Work::PtoD { .. }, captured: false } if *stream == copy)).expect("descriptor copy");
        let htod = pos(&|c| matches!(c, Call::Issue { stream, work: Work::HtoD { .. }, captured: false } if *stream == copy)).expect("byte copy");
        let rec = pos(&|c| matches!(c, Call::Issue { stream, work: Work::Record { .. }, .. } if *stream == copy)).expect("copy event");
        let wait = pos(&|c| matches!(c, Call::Issue { stream, work: Work::Wait { .. }, .. } if *stream == compute)).expect("wait");
        assert!(ptod < htod && htod < rec && rec < wait, "{window:#?}");
        assert!(matches!(c[at], Call::GraphLaunch { stream, .. } if stream == compute));
        assert!(
            matches!(&c[at + 1], Call::Issue { stream, work: Work::Record { .. }, .. } if *stream == compute)
        );
        prev = at + 1;
    }
    // Captures: (slot 0, 4), (slot 1, 4), (slot 0, 2) — each once, each right
    // before its first launch; the D2H is inside the graph.
    let begins: Vec<usize> = (0..c.len())
        .filter(|&i| matches!(c[i], Call::BeginCapture(_)))
        .collect();
    assert_eq!(begins.len(), 3);
    for (&b, &l) in begins.iter().zip(&launches) {
        assert!(b < l);
        let end = b + c[b..]
            .iter()
            .position(|c| matches!(c, Call::EndCapture { .. }))
            .unwrap();
        assert!(end < l);
        let body = &c[b..end];
        assert!(body.iter().any(|c| matches!(
            c,
            Call::Issue {
                work: Work::DtoH { .. },
                captured: true,
                ..
            }
        )));
        assert!(body.iter().all(
            |c| !matches!(c, Call::Issue { captured: false, stream, .. } if *stream == compute)
        ));
    }
    // In execution: each batch's copies ran before its kernel, its kernel
    // before its D2H.
    let exec: Vec<Entry> = log.lock().unwrap().clone();
    let kinds: Vec<&str> = exec
        .iter()
        .filter_map(|e| match e {
            Entry::Exec {
                work: Work::HtoD { .. },
                ..
            } => Some("h2d"),
            Entry::Exec {
                work: Work::Launch { .. },
                ..
            } => Some("kernel"),
            Entry::Exec {
                work: Work::DtoH { .. },
                ..
            } => Some("d2h"),
            _ => None,
        })
        .collect();
    let first_kernel = kinds.iter().position(|k| *k == "kernel").unwrap();
    assert!(kinds[..first_kernel].contains(&"h2d"));
    let mut seen_kernel = 0;
    for k in &kinds {
        match *k {
            "kernel" => seen_kernel += 1,
            "d2h" => assert!(seen_kernel > 0),
            _ => {}
        }
    }
}

#[test]
fn a_short_batch_is_padded_to_a_captured_shape_and_replays_it() {
    let log: Log = Arc::default();
    let (mut mem, spans) = arena(11); // B = 4: 4, 4, 3 → shape 4 on slot 0 again
    let mut r = runner(&log, Progress::Eager, 4);
    let rows = feed(&mut r, &mut mem, &spans, &log).unwrap();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.as_deref(), Some(&expected_row(i)[..]), "file {i}");
    }
    let st = r.stats();
    assert_eq!(
        (st.batches, st.padded_files, st.captures, st.graph_launches),
        (3, 1, 2, 3)
    );
    drop(r);
    let c = calls(&log);
    assert_eq!(
        c.iter()
            .filter(|c| matches!(c, Call::BeginCapture(_)))
            .count(),
        2
    );
    assert_eq!(
        c.iter()
            .filter(|c| matches!(c, Call::Instantiate { .. }))
            .count(),
        2
    );
}

#[test]
fn adjacent_extents_go_as_one_copy() {
    let log: Log = Arc::default();
    let (mut mem, spans) = arena(6); // holes before files 0 and 3
    let mut r = runner(&log, Progress::Eager, 6);
    feed(&mut r, &mut mem, &spans, &log).unwrap();
    assert_eq!(r.stats().h2d_copies, 2);
    assert_eq!(r.stats().h2d_bytes, 6 * FILE as u64);
}

/// The model check: streams progress a random, seeded amount at each call, so
/// copies and events complete late and in varied interleavings. Whatever the
/// schedule, no file is released before every copy reading it executed, and
/// every row is right (a too-early release poisons the bytes).
#[test]
fn no_extent_is_released_before_its_copy_ran_under_any_schedule() {
    for seed in 0..300u64 {
        let log: Log = Arc::default();
        let (mut mem, spans) = arena(11);
        let base = mem.as_ptr() as usize;
        let progress = Progress::Random {
            seed: seed * 7919 + 1,
            max_steps: (seed % 4) as u32,
        };
        let mut r = runner(&log, progress, 3);
        let rows = feed(&mut r, &mut mem, &spans, &log).unwrap();
        drop(r);
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(
                row.as_deref(),
                Some(&expected_row(i)[..]),
                "seed {seed} file {i}"
            );
        }
        // Replay the log: track which byte ranges have been copied.
        let mut copied: Vec<(usize, usize)> = Vec::new();
        let mut released = vec![false; spans.len()];
        for e in log.lock().unwrap().iter() {
            match e {
                Entry::Exec {
                    work: Work::HtoD { src, len, .. },
                    ..
                } => {
                    for (i, r) in released.iter().enumerate() {
                        let (s, l) = spans[i];
                        let (a, b) = (base + s, base + s + l);
                        assert!(
                            !(*r && *src < b && a < src + len),
                            "seed {seed}: copy read file {i} after its release"
                        );
                    }
                    copied.push((*src, *src + *len));
                }
                Entry::Note(n) => {
                    let id: usize = n.trim_start_matches("release ").parse().unwrap();
                    let (s, l) = spans[id];
                    let (a, b) = (base + s, base + s + l);
                    let covered = copied.iter().any(|&(x, y)| x <= a && b <= y);
                    assert!(
                        covered,
                        "seed {seed}: file {id} released before its copy ran"
                    );
                    released[id] = true;
                }
                _ => {}
            }
        }
        assert!(
            released.iter().all(|&r| r),
            "seed {seed}: every file is released"
        );
    }
}

/// Delegates to a double; from `fail_after` calls on, event waits fail.
struct Flaky {
    inner: HostDouble,
    calls: Arc<Mutex<usize>>,
    fail_after: usize,
}

impl Flaky {
    fn bump(&mut self) -> bool {
        let mut c = self.calls.lock().unwrap();
        *c += 1;
        *c > self.fail_after
    }
}

impl Device for Flaky {
    fn describe(&self) -> String {
        "flaky".into()
    }
    unsafe fn register_host(&mut self, p: *mut u8, l: usize) -> Result<HostReg> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.register_host(p, l) }
    }
    fn alloc(&mut self, b: usize) -> Result<DevBuf> {
        self.inner.alloc(b)
    }
    fn alloc_pinned(&mut self, b: usize) -> Result<Pinned> {
        self.inner.alloc_pinned(b)
    }
    unsafe fn pinned(&self, p: Pinned) -> &[u8] {
        // SAFETY: forwarded contract.
        unsafe { self.inner.pinned(p) }
    }
    unsafe fn pinned_mut(&mut self, p: Pinned) -> &mut [u8] {
        // SAFETY: forwarded contract.
        unsafe { self.inner.pinned_mut(p) }
    }
    fn create_stream(&mut self) -> Result<Stream> {
        self.inner.create_stream()
    }
    fn create_event(&mut self) -> Result<Event> {
        self.inner.create_event()
    }
    fn kernel(&mut self, n: &str) -> Result<Kernel> {
        self.inner.kernel(n)
    }
    fn fft_plan(&mut self, s: FftShape) -> Result<FftPlan> {
        self.inner.fft_plan(s)
    }
    unsafe fn memcpy_htod_async(
        &mut self,
        s: Stream,
        d: DevBuf,
        o: usize,
        p: *const u8,
        l: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.memcpy_htod_async(s, d, o, p, l) }
    }
    fn memcpy_ptod_async(
        &mut self,
        s: Stream,
        d: DevBuf,
        o: usize,
        p: Pinned,
        po: usize,
        l: usize,
    ) -> Result<()> {
        self.inner.memcpy_ptod_async(s, d, o, p, po, l)
    }
    fn memcpy_dtoh_async(
        &mut self,
        s: Stream,
        d: Pinned,
        o: usize,
        b: DevBuf,
        bo: usize,
        l: usize,
    ) -> Result<()> {
        self.inner.memcpy_dtoh_async(s, d, o, b, bo, l)
    }
    fn launch(&mut self, s: Stream, k: Kernel, d: LaunchDims, a: &[Arg]) -> Result<()> {
        self.inner.launch(s, k, d, a)
    }
    fn fft_exec(&mut self, s: Stream, p: FftPlan, i: DevBuf, o: DevBuf) -> Result<()> {
        self.inner.fft_exec(s, p, i, o)
    }
    fn record_event(&mut self, e: Event, s: Stream) -> Result<()> {
        self.inner.record_event(e, s)
    }
    fn stream_wait_event(&mut self, s: Stream, e: Event) -> Result<()> {
        self.inner.stream_wait_event(s, e)
    }
    fn event_query(&mut self, e: Event) -> Result<bool> {
        if self.bump() {
            return Ok(false); // a hung device: never completes
        }
        self.inner.event_query(e)
    }
    fn event_synchronize(&mut self, e: Event) -> Result<()> {
        if self.bump() {
            return Err(DeviceError::new(
                "cuEventSynchronize",
                "CUDA_ERROR_LAUNCH_FAILED",
            ));
        }
        self.inner.event_synchronize(e)
    }
    fn begin_capture(&mut self, s: Stream) -> Result<()> {
        self.inner.begin_capture(s)
    }
    fn end_capture(&mut self, s: Stream) -> Result<Graph> {
        self.inner.end_capture(s)
    }
    fn graph_instantiate(&mut self, g: Graph) -> Result<GraphExec> {
        self.inner.graph_instantiate(g)
    }
    fn graph_launch(&mut self, g: GraphExec, s: Stream) -> Result<()> {
        self.inner.graph_launch(g, s)
    }
}

#[test]
fn dropping_a_runner_on_a_failing_device_records_errors_and_never_releases_early() {
    let log: Log = Arc::default();
    let (mut mem, spans) = arena(5);
    let calls = Arc::new(Mutex::new(0));
    let dev = Flaky {
        // No progress at all: every copy is still pending at drop time.
        inner: HostDouble::new(
            Arc::clone(&log),
            Progress::Random {
                seed: 1,
                max_steps: 0,
            },
        )
        .with_kernels(Box::new(GatherKernel)),
        calls: Arc::clone(&calls),
        fail_after: usize::MAX,
    };
    let cfg = RunnerConfig::new(2, 4096);
    let mut r: Runner<Flaky> = BatchRunner::new(dev, Gather, cfg).unwrap();
    let mut sink = |_: usize, _: &[f32]| {};
    for (id, &(start, len)) in spans.iter().enumerate().take(4) {
        let item = Staged {
            tag: id,
            bytes: TestBytes {
                id,
                ptr: mem[start..].as_mut_ptr(),
                len,
                log: Arc::clone(&log),
            },
            info: info(),
        };
        if let Err(back) = r.add(item) {
            r.flush(&mut sink).unwrap();
            assert!(r.add(back).is_ok());
        }
    }
    r.flush(&mut sink).unwrap();
    // From now on the device fails every wait.
    let so_far = *calls.lock().unwrap();
    r.dev_mut_for_test().fail_after = so_far;
    let errors = r.error_sink();
    drop(r); // must not panic
    let errors = errors.lock().unwrap().clone();
    assert!(!errors.is_empty());
    assert!(
        errors
            .iter()
            .any(|e| e.contains("leaked rather than released")),
        "{errors:?}"
    );
    let released = log
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Entry::Note(_)))
        .count();
    assert_eq!(
        released, 0,
        "no file may be released while its copy may still run"
    );
}

#[test]
fn the_double_refuses_what_cuda_refuses_during_capture() {
    let log: Log = Arc::default();
    let mut d = HostDouble::new(log, Progress::Eager);
    let s = d.create_stream().unwrap();
    let e = d.create_event().unwrap();
    d.record_event(e, s).unwrap();
    d.begin_capture(s).unwrap();
    assert!(d.event_synchronize(e).is_err());
    assert!(d.alloc(8).is_err());
    assert!(d.stream_wait_event(s, e).is_err());
    assert!(d.record_event(e, s).is_err());
    let g = d.end_capture(s).unwrap();
    assert!(d.graph_instantiate(g).is_ok());
    assert!(d.end_capture(s).is_err());
}

/// The whole stage on the host double with the host-built kernels, started as
/// the program starts it (`host_stage`): rows equal the CPU backend's, header
/// rejections carry the CPU backend's text.
#[test]
fn the_stage_on_the_double_computes_the_cpu_rows_and_rejects_like_the_cpu() {
    use super::host_stage::{DEVICE_NAME, start_host_double_workers_with};
    use crate::compute::Wiring as CudaWiring;
    use crate::compute::cuda::backend::CudaOptions;
    use crate::dsp::{Plan, Scratch};
    use crate::reader::{FileBytes, Loaded};

    let plan = Arc::new(Plan::new(&crate::config::Config::default().spec));
    let rate = plan.spec().sample_rate;
    let mut files: Vec<Vec<u8>> = (0..9)
        .map(|i| crate::synth::encode_wav_pcm16(&crate::synth::clip(7, i, (i % 3) as usize), rate))
        .collect();
    files[2] = b"RIFF....not a wav".to_vec();
    files[5] = crate::synth::encode_wav_pcm16(&crate::synth::clip(7, 5, 0), rate * 2);
    // A short file (padding inside the clip) and a long one (trimmed copy).
    files[6] = crate::synth::encode_wav_pcm16(&crate::synth::clip(7, 6, 0)[..1000], rate);
    let mut long = crate::synth::clip(7, 7, 1);
    long.extend_from_slice(&crate::synth::clip(7, 8, 1));
    files[7] = crate::synth::encode_wav_pcm16(&long, rate);

    let (wiring, input, output) = CudaWiring::standalone(64);
    let opts = CudaOptions {
        batch_files: 4,
        ..CudaOptions::default()
    };
    let workers = start_host_double_workers_with(
        opts,
        wiring.librosa(&Arc::clone(&plan)),
        Progress::Random {
            seed: 3,
            max_steps: 2,
        },
    )
    .unwrap();
    for (job, f) in files.iter().enumerate() {
        input
            .push(Loaded {
                job,
                bytes: Ok(FileBytes::Heap(f.clone())),
                segment: None,
            })
            .unwrap();
    }
    input.close();
    let mut got: Vec<Option<std::result::Result<Vec<f32>, String>>> = vec![None; files.len()];
    while let Some(o) = output.pop() {
        assert!(got[o.job].is_none(), "job {} twice", o.job);
        got[o.job] = Some(o.row.map_err(|e| e.to_string()));
    }
    let report = workers.join().unwrap();
    assert_eq!(report.runner.files, 7);
    assert_eq!(report.device, DEVICE_NAME);

    let mut clip = vec![0f32; plan.spec().clip_samples()];
    let mut scratch = Scratch::new(&plan);
    let mut want = vec![0f32; plan.spec().row_len()];
    for (job, f) in files.iter().enumerate() {
        let g = got[job].clone().expect("every job has an outcome");
        match crate::decode::wav::decode(f, rate, &mut clip) {
            Err(e) => assert_eq!(g.unwrap_err(), e.to_string(), "job {job}"),
            Ok(_) => {
                plan.compute(&clip, &mut scratch, &mut want);
                let row = g.unwrap();
                let worst = row
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(worst <= 1e-3, "job {job}: max |Δ| = {worst} dB");
            }
        }
    }
}
