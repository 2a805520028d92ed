//! `HostDouble`: a [`Device`] made of host memory, for tests on GPU-less hosts.
//!
//! It keeps CUDA's semantics and is stricter where that helps a test:
//! * every call is appended to a shared [`Log`] as an [`Entry::Call`], in
//!   issue order; every piece of work is appended as [`Entry::Exec`] when it
//!   *executes*, which is later than its issue: work waits in per-stream FIFO
//!   queues and runs in stream order, with waits honoured;
//! * [`Progress::Random`] executes a seeded random number of runnable items
//!   at each call (and nothing else), so copies and events complete "late" and
//!   in varying interleavings — the fake clock of the ordering model check;
//!   [`Progress::Eager`] runs everything runnable after each call;
//! * copies read their host source when they *execute*, as DMA does: a host
//!   buffer released (and overwritten) too early yields wrong data;
//! * inside a capture: work on the capturing stream goes into the graph;
//!   synchronising, allocating, planning, recording an event on, or waiting on
//!   an outside event from the capturing stream is an error;
//! * `launch` runs a host build of the real kernel when a [`HostKernels`]
//!   executor is attached (see `double_kernels.rs`), else it only logs;
//!   `fft_exec` runs a realfft f64 transform, so the double computes numbers.
//!
//! Device memory is `u64`-backed (8-byte aligned, as device allocations are
//! 256-byte aligned), so f64 views made by host kernels are aligned.

mod device;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::compute::cuda::device::{
    Arg, DevBuf, Device, DeviceError, Event, FftKind, FftPlan, FftShape, Graph, GraphExec, HostReg,
    Kernel, LaunchDims, Pinned, Result, Stream,
};

/// Work queued on a stream (also the body of a graph).
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    HtoD {
        dst: DevBuf,
        off: usize,
        src: usize,
        len: usize,
    },
    PtoD {
        dst: DevBuf,
        off: usize,
        src: Pinned,
        src_off: usize,
        len: usize,
    },
    DtoH {
        dst: Pinned,
        off: usize,
        src: DevBuf,
        src_off: usize,
        len: usize,
    },
    Launch {
        kernel: String,
        dims: LaunchDims,
        args: Vec<Arg>,
    },
    Fft {
        plan: FftPlan,
        input: DevBuf,
        output: DevBuf,
    },
    /// Completes generation `generation` of `event`.
    Record { event: Event, generation: u64 },
    /// Blocks the stream until `event` reached `generation`.
    Wait { event: Event, generation: u64 },
}

/// What the host asked for, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    RegisterHost {
        len: usize,
    },
    Alloc(DevBuf),
    AllocPinned(Pinned),
    CreateStream(Stream),
    CreateEvent(Event),
    Kernel(String),
    FftPlan(FftShape),
    /// Any stream-ordered operation (copy, launch, fft, record, wait).
    Issue {
        stream: Stream,
        work: Work,
        captured: bool,
    },
    Query {
        event: Event,
        done: bool,
    },
    Sync(Event),
    BeginCapture(Stream),
    EndCapture {
        stream: Stream,
        graph: Graph,
    },
    Instantiate {
        graph: Graph,
        exec: GraphExec,
    },
    GraphLaunch {
        stream: Stream,
        exec: GraphExec,
    },
}

/// One line of the log.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    Call(Call),
    Exec {
        stream: Stream,
        work: Work,
    },
    /// A marker written by the code under test or the test itself.
    Note(String),
}

/// The shared, ordered log.
pub type Log = Arc<Mutex<Vec<Entry>>>;

/// Appends `e` to `log` (a poisoned lock is still appended to).
pub fn note(log: &Log, e: Entry) {
    log.lock().unwrap_or_else(|p| p.into_inner()).push(e);
}

/// When queued work executes.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// Everything runnable, after every call.
    Eager,
    /// 0..=`max_steps` runnable items at each call, chosen with `seed`.
    Random { seed: u64, max_steps: u32 },
}

/// A kernel argument resolved to host memory.
#[derive(Clone, Copy, Debug)]
pub enum HostArg {
    Ptr(*mut u8),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
}

/// Runs kernels on the host (the real kernel source built for the host).
pub trait HostKernels: Send {
    /// Runs kernel `name` over `dims` with `args`.
    ///
    /// # Safety
    /// Every `HostArg::Ptr` points into a live buffer large enough for what the
    /// kernel indexes with the other arguments.
    unsafe fn run(&mut self, name: &str, dims: LaunchDims, args: &[HostArg]) -> Result<()>;
}

#[derive(Default, Clone, Copy)]
struct EventState {
    recorded: u64,
    completed: u64,
}

/// The host double. See the module doc.
pub struct HostDouble {
    /// None: [`HostDouble::unlogged`] (a long run must not grow a log).
    log: Option<Log>,
    progress: Progress,
    rng: u64,
    bufs: Vec<Box<[u64]>>,
    buf_lens: Vec<usize>,
    pinned: Vec<Box<[u64]>>,
    kernels: Vec<String>,
    plans: Vec<FftShape>,
    streams: Vec<VecDeque<Work>>,
    events: Vec<EventState>,
    capture: Option<(Stream, Vec<Work>)>,
    graphs: Vec<Vec<Work>>,
    execs: Vec<usize>,
    exec: Option<Box<dyn HostKernels>>,
    fft: realfft::RealFftPlanner<f64>,
    fft32: realfft::RealFftPlanner<f32>,
    /// Operations that fail (fault injection): the driver's op name and the
    /// result code it answers with.
    refuse: Vec<(&'static str, &'static str)>,
    /// Once this file exists every host-to-device copy fails
    /// ([`HostDouble::failing_once`]).
    fail_once: Option<std::path::PathBuf>,
    /// Where Drop records teardown failures (`attach_error_sink`).
    sink: Option<Arc<Mutex<Vec<String>>>>,
}

fn words(bytes: usize) -> Box<[u64]> {
    vec![0u64; bytes.div_ceil(8)].into_boxed_slice()
}

fn as_bytes(w: &[u64], len: usize) -> &[u8] {
    // SAFETY: `w` is `w.len() * 8` initialised bytes, `len <= w.len() * 8`
    // (callers pass the allocation's byte length), and u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), len.min(w.len() * 8)) }
}

fn as_bytes_mut(w: &mut [u64], len: usize) -> &mut [u8] {
    // SAFETY: as in `as_bytes`, and the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), len.min(w.len() * 8)) }
}

/// A real type the double's FFT reads and writes as native-endian bytes.
trait Real: realfft::FftNum {
    const BYTES: usize;
    fn read(b: &[u8]) -> Self;
    fn write(self, b: &mut [u8]);
}

impl Real for f64 {
    const BYTES: usize = 8;
    fn read(b: &[u8]) -> f64 {
        f64::from_ne_bytes(b.try_into().expect("8 bytes"))
    }
    fn write(self, b: &mut [u8]) {
        b.copy_from_slice(&self.to_ne_bytes());
    }
}

impl Real for f32 {
    const BYTES: usize = 4;
    fn read(b: &[u8]) -> f32 {
        f32::from_ne_bytes(b.try_into().expect("4 bytes"))
    }
    fn write(self, b: &mut [u8]) {
        b.copy_from_slice(&self.to_ne_bytes());
    }
}

/// `shape.batch` real transforms of `inp` into interleaved complex `out`
/// (realfft standing in for cuFFT; `fft_exec` checked both sizes).
fn fft_rows<T: Real>(
    planner: &mut realfft::RealFftPlanner<T>,
    shape: FftShape,
    inp: &[u8],
    out: &mut [u8],
) -> Result<()> {
    let (n, w) = (shape.n, T::BYTES);
    let bins = n / 2 + 1;
    let r2c = planner.plan_fft_forward(n);
    let mut spec = r2c.make_output_vec();
    let mut frame = r2c.make_input_vec();
    for b in 0..shape.batch {
        for (k, x) in frame.iter_mut().enumerate() {
            *x = T::read(&inp[(b * n + k) * w..(b * n + k + 1) * w]);
        }
        r2c.process(&mut frame, &mut spec)
            .map_err(|e| DeviceError::new("cufftExec", e))?;
        for (k, c) in spec.iter().enumerate() {
            let at = (b * bins + k) * 2 * w;
            c.re.write(&mut out[at..at + w]);
            c.im.write(&mut out[at + w..at + 2 * w]);
        }
    }
    Ok(())
}

fn range_err(op: &'static str, what: &str) -> DeviceError {
    DeviceError::new(op, format!("{what} is out of bounds"))
}

impl HostDouble {
    pub fn new(log: Log, progress: Progress) -> HostDouble {
        let mut d = HostDouble::unlogged(progress);
        d.log = Some(log);
        d
    }

    /// A double that keeps no log (the stage in `host_stage.rs`, which may run
    /// for as long as a `serve`).
    pub fn unlogged(progress: Progress) -> HostDouble {
        let rng = match progress {
            Progress::Random { seed, .. } => seed | 1,
            Progress::Eager => 1,
        };
        HostDouble {
            log: None,
            progress,
            rng,
            bufs: Vec::new(),
            buf_lens: Vec::new(),
            pinned: Vec::new(),
            kernels: Vec::new(),
            plans: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            capture: None,
            graphs: Vec::new(),
            execs: Vec::new(),
            exec: None,
            fft: realfft::RealFftPlanner::new(),
            fft32: realfft::RealFftPlanner::new(),
            refuse: Vec::new(),
            fail_once: None,
            sink: None,
        }
    }

    /// Fault injection for a whole run: once the file `trigger` exists,
    /// every host-to-device copy fails with `CUDA_ERROR_LAUNCH_FAILED` (a GPU
    /// that dies mid-run, at a moment the test chooses; serve's tests start
    /// the stage this way through [`crate::compute::HOST_DOUBLE_FAIL_ENV`]).
    pub fn failing_once(mut self, trigger: std::path::PathBuf) -> HostDouble {
        self.fail_once = Some(trigger);
        self
    }

    /// Fault injection: every later call of the driver operation `op`
    /// ("cuMemHostRegister", "cuStreamBeginCapture", "cuMemcpyHtoDAsync",
    /// "cuGraphInstantiate", "cufftExecD2Z") fails with `code`.
    pub fn refusing(mut self, op: &'static str, code: &'static str) -> HostDouble {
        self.refuse.push((op, code));
        self
    }

    /// Stops refusing `op` (a transient fault has passed).
    pub fn stop_refusing(&mut self, op: &str) {
        self.refuse.retain(|(o, _)| *o != op);
    }

    fn refused(&self, op: &'static str) -> Result<()> {
        match self.refuse.iter().find(|(o, _)| *o == op) {
            Some((_, code)) => Err(DeviceError::new(op, code)),
            None => Ok(()),
        }
    }

    /// Attaches a host kernel executor: `launch` then computes.
    pub fn with_kernels(mut self, exec: Box<dyn HostKernels>) -> HostDouble {
        self.exec = Some(exec);
        self
    }

    /// The bytes of device buffer `b` (for tests).
    pub fn device_bytes(&self, b: DevBuf) -> &[u8] {
        as_bytes(&self.bufs[b.id], self.buf_lens[b.id])
    }

    /// Runs every runnable item; true when nothing is left queued.
    pub fn drain(&mut self) -> Result<bool> {
        while self.step_one(None)? {}
        Ok(self.streams.iter().all(VecDeque::is_empty))
    }

    fn call(&self, c: Call) {
        self.note(Entry::Call(c));
    }

    fn note(&self, e: Entry) {
        if let Some(log) = &self.log {
            note(log, e);
        }
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn runnable(&self, s: usize) -> bool {
        match self.streams[s].front() {
            None => false,
            Some(Work::Wait { event, generation }) => self.events[event.0].completed >= *generation,
            Some(_) => true,
        }
    }

    /// Executes the head of one runnable stream (`pick` or a random/first one).
    fn step_one(&mut self, pick: Option<usize>) -> Result<bool> {
        let ready: Vec<usize> = (0..self.streams.len())
            .filter(|&s| self.runnable(s))
            .collect();
        if ready.is_empty() {
            return Ok(false);
        }
        let s = match pick {
            Some(p) if ready.contains(&p) => p,
            _ if matches!(self.progress, Progress::Random { .. }) => {
                ready[(self.next_rand() % ready.len() as u64) as usize]
            }
            _ => ready[0],
        };
        let Some(work) = self.streams[s].pop_front() else {
            return Ok(false);
        };
        self.execute(&work)?;
        self.note(Entry::Exec {
            stream: Stream(s),
            work,
        });
        Ok(true)
    }

    /// The fake clock: runs some work after each call.
    fn tick(&mut self) -> Result<()> {
        if self.capture.is_some() {
            return Ok(());
        }
        match self.progress {
            Progress::Eager => {
                self.drain()?;
            }
            Progress::Random { max_steps, .. } => {
                let n = self.next_rand() % (u64::from(max_steps) + 1);
                for _ in 0..n {
                    if !self.step_one(None)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    fn check_buf(&self, op: &'static str, b: DevBuf, off: usize, len: usize) -> Result<()> {
        if b.id >= self.bufs.len() || off.checked_add(len).is_none_or(|e| e > self.buf_lens[b.id]) {
            return Err(range_err(op, "device range"));
        }
        Ok(())
    }

    fn check_pinned(&self, op: &'static str, p: Pinned, off: usize, len: usize) -> Result<()> {
        if p.id >= self.pinned.len() || off.checked_add(len).is_none_or(|e| e > p.len) {
            return Err(range_err(op, "pinned range"));
        }
        Ok(())
    }

    /// Runs one queued operation, its CPU time left out of the calling
    /// stage's serial clock: it is the device's work (`telemetry::stand_in`).
    fn execute(&mut self, w: &Work) -> Result<()> {
        crate::runtime::telemetry::stand_in(|| self.execute_now(w))
    }

    fn execute_now(&mut self, w: &Work) -> Result<()> {
        match w {
            Work::HtoD { dst, off, src, len } => {
                // SAFETY: the caller of `memcpy_htod_async` promised the source
                // stays valid until the copy's event completes; executing now is
                // within that window (that is exactly what tests check).
                let from = unsafe { std::slice::from_raw_parts(*src as *const u8, *len) };
                let l = self.buf_lens[dst.id];
                as_bytes_mut(&mut self.bufs[dst.id], l)[*off..off + len].copy_from_slice(from);
            }
            Work::PtoD {
                dst,
                off,
                src,
                src_off,
                len,
            } => {
                let from =
                    as_bytes(&self.pinned[src.id], src.len)[*src_off..src_off + len].to_vec();
                let l = self.buf_lens[dst.id];
                as_bytes_mut(&mut self.bufs[dst.id], l)[*off..off + len].copy_from_slice(&from);
            }
            Work::DtoH {
                dst,
                off,
                src,
                src_off,
                len,
            } => {
                let from = as_bytes(&self.bufs[src.id], self.buf_lens[src.id])
                    [*src_off..src_off + len]
                    .to_vec();
                as_bytes_mut(&mut self.pinned[dst.id], dst.len)[*off..off + len]
                    .copy_from_slice(&from);
            }
            Work::Launch { kernel, dims, args } => {
                if let Some(exec) = self.exec.as_mut() {
                    let host: Vec<HostArg> = args
                        .iter()
                        .map(|a| match *a {
                            Arg::Ptr(b, off) => HostArg::Ptr(
                                self.bufs[b.id].as_mut_ptr().cast::<u8>().wrapping_add(off),
                            ),
                            Arg::I32(v) => HostArg::I32(v),
                            Arg::I64(v) => HostArg::I64(v),
                            Arg::F32(v) => HostArg::F32(v),
                            Arg::F64(v) => HostArg::F64(v),
                        })
                        .collect();
                    // SAFETY: pointers are into live buffers of this double; the
                    // launch's sizes are the recipe's, checked by the host
                    // kernel tests against the same buffer sizes.
                    unsafe { exec.run(kernel, *dims, &host) }?;
                }
            }
            Work::Fft {
                plan,
                input,
                output,
            } => {
                let shape = self.plans[plan.0];
                let (ilen, olen) = (self.buf_lens[input.id], self.buf_lens[output.id]);
                // The input is read whole before the output is written (the
                // two may not alias: distinct buffers of the recipe).
                let need = shape.n * shape.batch * if shape.kind == FftKind::D2Z { 8 } else { 4 };
                let inp = as_bytes(&self.bufs[input.id], ilen.min(need)).to_vec();
                let out = as_bytes_mut(&mut self.bufs[output.id], olen);
                match shape.kind {
                    FftKind::D2Z => fft_rows(&mut self.fft, shape, &inp, out)?,
                    FftKind::R2C => fft_rows(&mut self.fft32, shape, &inp, out)?,
                }
            }
            Work::Record { event, generation } => {
                let st = &mut self.events[event.0];
                st.completed = st.completed.max(*generation);
            }
            Work::Wait { .. } => {}
        }
        Ok(())
    }

    fn forbid_in_capture(&self, op: &'static str) -> Result<()> {
        match self.capture {
            Some((s, _)) => Err(DeviceError::new(
                op,
                format!(
                    "not permitted while stream {} is capturing (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)",
                    s.0
                ),
            )),
            None => Ok(()),
        }
    }

    /// Queues `work` on `stream`, or into the graph under capture.
    fn issue(&mut self, stream: Stream, work: Work) -> Result<()> {
        if stream.0 >= self.streams.len() {
            return Err(DeviceError::new("issue", "unknown stream"));
        }
        let captured = matches!(self.capture, Some((s, _)) if s == stream);
        self.call(Call::Issue {
            stream,
            work: work.clone(),
            captured,
        });
        if captured {
            if let Some((_, body)) = self.capture.as_mut() {
                body.push(work);
            }
        } else {
            self.streams[stream.0].push_back(work);
        }
        self.tick()
    }
}

impl Drop for HostDouble {
    /// Releasing "device memory" fails when `cuMemFree` is refused; the
    /// failure goes to the attached sink, as `CudaDevice::drop` does.
    fn drop(&mut self) {
        if let (Err(e), Some(sink)) = (self.refused("cuMemFree"), &self.sink) {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.to_string());
        }
    }
}
