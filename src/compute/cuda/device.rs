//! The device seam: every GPU operation the CUDA backend issues, as a trait.
//!
//! [`Device`] is deliberately small — the operations of the batch pipeline and
//! nothing else — so it has two faithful implementations:
//! * [`super::real::CudaDevice`]: the CUDA driver API through cudarc (context,
//!   streams, events, graphs, NVRTC module, cuFFT), only constructed after
//!   [`super::driver::probe`] proved a driver and a device exist;
//! * `super::testing::double::HostDouble` (feature `host-kernels`): host memory, a log of
//!   every call in order, and per-stream queues whose work executes *later*
//!   (seeded), so the orchestration's ordering claims can be tested on a
//!   machine without a GPU.
//!
//! Handles are small `Copy` ids owned by the device that issued them; every
//! resource lives until the device is dropped (the batch pipeline allocates
//! once at start-up), so no handle ever dangles while the device lives.
//!
//! Stream semantics are CUDA's: work on one stream executes in issue order;
//! `record_event` marks a point in a stream, `stream_wait_event` makes a stream
//! wait for the latest record of an event; during capture, work issued on the
//! capturing stream is recorded into the graph instead of executing.

/// A failed device operation: which call, and the driver's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op} failed: {msg}")]
pub struct DeviceError {
    pub op: &'static str,
    pub msg: String,
}

impl DeviceError {
    pub fn new(op: &'static str, msg: impl std::fmt::Display) -> DeviceError {
        DeviceError {
            op,
            msg: msg.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, DeviceError>;

macro_rules! handle {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub usize);
    )*};
}

handle!(
    /// An ordered queue of device work.
    Stream,
    /// A marker recorded into a stream.
    Event,
    /// A compiled kernel entry point.
    Kernel,
    /// A batched FFT plan.
    FftPlan,
    /// A captured (not yet instantiated) graph.
    Graph,
    /// An instantiated, launchable graph.
    GraphExec,
    /// A registration of host memory for DMA (cuMemHostRegister).
    HostReg,
);

/// Device memory: `id` and size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevBuf {
    pub id: usize,
    pub len: usize,
}

/// Page-locked host memory owned by the device (D2H targets, descriptor tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pinned {
    pub id: usize,
    pub len: usize,
}

/// One kernel argument, passed by value as CUDA does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// A device pointer: `buf` + `offset` bytes.
    Ptr(DevBuf, usize),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
}

impl Arg {
    pub fn buf(b: DevBuf) -> Arg {
        Arg::Ptr(b, 0)
    }
}

/// The precision of a real-to-complex FFT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FftKind {
    /// f64 reals → f64 complex (`CUFFT_D2Z`): the librosa and Whisper recipes.
    #[default]
    D2Z,
    /// f32 reals → f32 complex (`CUFFT_R2C`): the Kaldi recipes, whose
    /// references compute in float32.
    R2C,
}

/// A batched 1-D real-to-complex FFT: `batch` transforms of `n` reals
/// (contiguous) into `n/2 + 1` complex each, interleaved (re, im).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FftShape {
    pub n: usize,
    pub batch: usize,
    pub kind: FftKind,
}

/// A 1-D launch configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchDims {
    pub grid: u32,
    pub block: u32,
}

/// The operations of the batch pipeline. See the module doc for semantics.
pub trait Device {
    /// One line naming the device ("NVIDIA H100 (sm_90)", "host double").
    fn describe(&self) -> String;

    /// Registers `len` bytes at `ptr` for DMA (portable, read-only use).
    ///
    /// # Safety
    /// The range must be valid, mapped host memory that stays mapped until
    /// the registration is dropped with the device.
    unsafe fn register_host(&mut self, ptr: *mut u8, len: usize) -> Result<HostReg>;

    fn alloc(&mut self, bytes: usize) -> Result<DevBuf>;
    fn alloc_pinned(&mut self, bytes: usize) -> Result<Pinned>;

    /// The bytes of a pinned buffer.
    ///
    /// # Safety
    /// No device copy into `p` may be in flight (wait for the event recorded
    /// after it), or the view races with DMA.
    unsafe fn pinned(&self, p: Pinned) -> &[u8];
    /// Mutable view of a pinned buffer.
    ///
    /// # Safety
    /// No device copy from or into `p` may be in flight.
    unsafe fn pinned_mut(&mut self, p: Pinned) -> &mut [u8];

    fn create_stream(&mut self) -> Result<Stream>;
    fn create_event(&mut self) -> Result<Event>;
    fn kernel(&mut self, name: &str) -> Result<Kernel>;
    fn fft_plan(&mut self, shape: FftShape) -> Result<FftPlan>;

    /// Copies `len` bytes from host `src` to `dst + dst_off`, asynchronously.
    ///
    /// # Safety
    /// `src..src+len` must stay valid and unmodified until an event recorded
    /// on `stream` after this call has completed.
    unsafe fn memcpy_htod_async(
        &mut self,
        stream: Stream,
        dst: DevBuf,
        dst_off: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()>;

    /// Copies `len` bytes from pinned `src + src_off` to device `dst + dst_off`.
    /// The pinned bytes must not be changed until the copy completed.
    fn memcpy_ptod_async(
        &mut self,
        stream: Stream,
        dst: DevBuf,
        dst_off: usize,
        src: Pinned,
        src_off: usize,
        len: usize,
    ) -> Result<()>;

    /// Copies `len` bytes from device `src + src_off` into pinned `dst + dst_off`.
    fn memcpy_dtoh_async(
        &mut self,
        stream: Stream,
        dst: Pinned,
        dst_off: usize,
        src: DevBuf,
        src_off: usize,
        len: usize,
    ) -> Result<()>;

    fn launch(&mut self, stream: Stream, k: Kernel, dims: LaunchDims, args: &[Arg]) -> Result<()>;
    /// Runs `plan` from `input` (reals) into `output` (complex pairs), in
    /// the precision of the plan's [`FftKind`].
    fn fft_exec(
        &mut self,
        stream: Stream,
        plan: FftPlan,
        input: DevBuf,
        output: DevBuf,
    ) -> Result<()>;

    fn record_event(&mut self, e: Event, stream: Stream) -> Result<()>;
    fn stream_wait_event(&mut self, stream: Stream, e: Event) -> Result<()>;
    /// Whether all work before the latest record of `e` has executed.
    fn event_query(&mut self, e: Event) -> Result<bool>;
    fn event_synchronize(&mut self, e: Event) -> Result<()>;

    fn begin_capture(&mut self, stream: Stream) -> Result<()>;
    fn end_capture(&mut self, stream: Stream) -> Result<Graph>;
    fn graph_instantiate(&mut self, g: Graph) -> Result<GraphExec>;
    fn graph_launch(&mut self, g: GraphExec, stream: Stream) -> Result<()>;

    /// Where this device records what failed while it is dropped (Drop
    /// never panics: docs/CONVENTIONS.md). The owner attaches its own sink and
    /// reads it after the device is gone, so the errors are this device's
    /// only — never an earlier device's, never lost to a read before Drop.
    fn attach_error_sink(&mut self, sink: std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let _unused = sink;
    }
}
