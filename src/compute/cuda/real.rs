//! `CudaDevice`: the [`Device`] trait on the CUDA driver API (cudarc `result`
//! layer), cuFFT and an NVRTC-compiled module.
//!
//! Layering: cudarc `sys` (raw) → cudarc `result` (thin `Result` wrappers),
//! and cuFFT through [`api::Cufft`] (resolved from the probed library) →
//! this type, which owns every handle it hands out and releases them all in
//! `Drop` (in reverse order of dependency). Drop never panics: a failed
//! release is recorded in the sink its owner attached
//! ([`Device::attach_error_sink`]) and surfaced at shutdown.
//!
//! Construct only after [`super::driver::probe`] succeeded: cudarc's dynamic
//! loading panics when a library or symbol is missing, and the probe is what
//! proves they are present. The primary context is made current on the
//! constructing thread; use the device from that thread only (it is `!Send`).

use std::ffi::CString;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};

use super::api;
use super::device::{
    Arg, DevBuf, Device, DeviceError, Event, FftKind, FftPlan, FftShape, Graph, GraphExec, HostReg,
    Kernel, LaunchDims, Pinned, Result, Stream,
};
use super::gpu::Gpu;
use super::nvrtc::Image;

/// Where a failed release is recorded: the owner's sink (see
/// [`Device::attach_error_sink`]) and the log.
fn record(sink: &Mutex<Vec<String>>, what: &str, e: impl std::fmt::Debug) {
    let msg = format!("{what}: {e:?}");
    tracing::error!(op = what, error = ?e, "CUDA teardown failed.");
    sink.lock().unwrap_or_else(|p| p.into_inner()).push(msg);
}

fn de(op: &'static str) -> impl Fn(result::DriverError) -> DeviceError {
    move |e| DeviceError::new(op, e)
}

/// A `cufftResult` as a device error (0 is success).
fn fft_result(op: &'static str, r: std::ffi::c_int) -> Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(DeviceError::new(op, format!("cufftResult {r}")))
    }
}

/// Flags of every event: no timing, and a host wait on it (cuEventSynchronize)
/// sleeps instead of spinning a core.
pub(crate) const EVENT_FLAGS: u32 = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
    | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;

/// Scheduling flags of the primary context, set before it is retained: host
/// waits block on a sync primitive (SCHED_AUTO spins when cores look idle).
pub(crate) const CTX_FLAGS: u32 = sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32;

/// See the module doc.
pub struct CudaDevice {
    gpu: Gpu,
    dev: sys::CUdevice,
    /// One module per kernel source (`nvrtc::SOURCES`), in that order.
    modules: Vec<sys::CUmodule>,
    streams: Vec<sys::CUstream>,
    events: Vec<sys::CUevent>,
    bufs: Vec<sys::CUdeviceptr>,
    pinned: Vec<(*mut u8, usize)>,
    regs: Vec<*mut u8>,
    kernels: Vec<sys::CUfunction>,
    fft: api::Cufft,
    plans: Vec<api::Plan>,
    /// The precision of each plan (same index).
    plan_kinds: Vec<FftKind>,
    graphs: Vec<sys::CUgraph>,
    execs: Vec<sys::CUgraphExec>,
    /// Teardown failures of this device only (never a process-wide list:
    /// that one leaked old errors into the next run).
    errors: Arc<Mutex<Vec<String>>>,
}

impl CudaDevice {
    /// Retains device 0's primary context, makes it current, loads every
    /// image (one module each).
    pub fn open(gpu: Gpu, images: &[Image]) -> Result<CudaDevice> {
        let fft = api::cufft().map_err(|e| DeviceError::new("cuFFT", e))?;
        let dev = result::device::get(0).map_err(de("cuDeviceGet"))?;
        // SAFETY: `dev` is valid; setting flags of a (possibly inactive)
        // primary context has no other precondition.
        if let Err(e) = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(dev, CTX_FLAGS) }.result() {
            // Another user of the primary context fixed other flags: waits
            // still block through the events' own flag.
            tracing::warn!(error = %e, "Could not set blocking-sync scheduling on the CUDA context.");
        }
        // SAFETY: `dev` came from cuDeviceGet; released in Drop.
        let ctx =
            unsafe { result::primary_ctx::retain(dev) }.map_err(de("cuDevicePrimaryCtxRetain"))?;
        let mut me = CudaDevice {
            gpu,
            dev,
            modules: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            bufs: Vec::new(),
            pinned: Vec::new(),
            regs: Vec::new(),
            kernels: Vec::new(),
            fft,
            plans: Vec::new(),
            plan_kinds: Vec::new(),
            graphs: Vec::new(),
            execs: Vec::new(),
            errors: Arc::default(),
        };
        // SAFETY: `ctx` is the retained primary context of `dev`.
        unsafe { result::ctx::set_current(ctx) }.map_err(de("cuCtxSetCurrent"))?;
        for image in images {
            let mut bytes = image.bytes.clone();
            if image.ptx && bytes.last() != Some(&0) {
                bytes.push(0);
            }
            // SAFETY: `bytes` is a complete CUBIN or NUL-terminated PTX image
            // and outlives the call (the driver copies it).
            let m = unsafe { result::module::load_data(bytes.as_ptr().cast()) }
                .map_err(de("cuModuleLoadData"))?;
            me.modules.push(m);
        }
        Ok(me)
    }

    fn ptr(&self, b: DevBuf, off: usize) -> Result<sys::CUdeviceptr> {
        let base = *self
            .bufs
            .get(b.id)
            .ok_or_else(|| DeviceError::new("device pointer", "unknown buffer"))?;
        if off > b.len {
            return Err(DeviceError::new("device pointer", "offset past the buffer"));
        }
        Ok(base + off as u64)
    }

    fn stream(&self, s: Stream) -> Result<sys::CUstream> {
        self.streams
            .get(s.0)
            .copied()
            .ok_or_else(|| DeviceError::new("stream", "unknown stream"))
    }

    fn event(&self, e: Event) -> Result<sys::CUevent> {
        self.events
            .get(e.0)
            .copied()
            .ok_or_else(|| DeviceError::new("event", "unknown event"))
    }
}

impl Device for CudaDevice {
    fn describe(&self) -> String {
        self.gpu.to_string()
    }

    unsafe fn register_host(&mut self, ptr: *mut u8, len: usize) -> Result<HostReg> {
        // SAFETY: the caller guarantees the range stays mapped until this
        // device is dropped (Drop unregisters first).
        unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, sys::CU_MEMHOSTREGISTER_PORTABLE) }
            .result()
            .map_err(de("cuMemHostRegister"))?;
        self.regs.push(ptr);
        Ok(HostReg(self.regs.len() - 1))
    }

    fn alloc(&mut self, bytes: usize) -> Result<DevBuf> {
        // SAFETY: plain allocation in the current context; freed in Drop.
        let p = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(de("cuMemAlloc"))?;
        self.bufs.push(p);
        Ok(DevBuf {
            id: self.bufs.len() - 1,
            len: bytes,
        })
    }

    fn alloc_pinned(&mut self, bytes: usize) -> Result<Pinned> {
        // SAFETY: plain allocation; freed in Drop.
        let p = unsafe { result::malloc_host(bytes.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(de("cuMemHostAlloc"))?;
        // Zeroed so views never expose uninitialised memory.
        // SAFETY: `p` points to at least `bytes.max(1)` writable bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes.max(1)) };
        self.pinned.push((p.cast(), bytes));
        Ok(Pinned {
            id: self.pinned.len() - 1,
            len: bytes,
        })
    }

    unsafe fn pinned(&self, p: Pinned) -> &[u8] {
        let (ptr, len) = self.pinned[p.id];
        // SAFETY: a live allocation of `len` initialised bytes; the caller
        // guarantees no DMA writes it meanwhile.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    unsafe fn pinned_mut(&mut self, p: Pinned) -> &mut [u8] {
        let (ptr, len) = self.pinned[p.id];
        // SAFETY: as above, and `&mut self` makes the view unique.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    fn create_stream(&mut self) -> Result<Stream> {
        let s = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(de("cuStreamCreate"))?;
        self.streams.push(s);
        Ok(Stream(self.streams.len() - 1))
    }

    fn create_event(&mut self) -> Result<Event> {
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the flags are a valid combination.
        unsafe { sys::cuEventCreate(&mut e, EVENT_FLAGS) }
            .result()
            .map_err(de("cuEventCreate"))?;
        self.events.push(e);
        Ok(Event(self.events.len() - 1))
    }

    fn kernel(&mut self, name: &str) -> Result<Kernel> {
        let c = CString::new(name).map_err(|_| DeviceError::new("cuModuleGetFunction", "NUL"))?;
        // The first module that has it (kernel names are unique across the
        // sources: each file's helpers carry its own prefix).
        let mut found = Err(DeviceError::new(
            "cuModuleGetFunction",
            "no module is loaded",
        ));
        for &m in &self.modules {
            // SAFETY: `m` is loaded and lives until Drop.
            found = unsafe { result::module::get_function(m, c.clone()) }
                .map_err(de("cuModuleGetFunction"));
            if found.is_ok() {
                break;
            }
        }
        self.kernels.push(found?);
        Ok(Kernel(self.kernels.len() - 1))
    }

    fn fft_plan(&mut self, shape: FftShape) -> Result<FftPlan> {
        let n = i32::try_from(shape.n).map_err(|_| DeviceError::new("cufftPlan1d", "n"))?;
        let b = i32::try_from(shape.batch).map_err(|_| DeviceError::new("cufftPlan1d", "batch"))?;
        let kind = match shape.kind {
            FftKind::D2Z => api::CUFFT_D2Z,
            FftKind::R2C => api::CUFFT_R2C,
        };
        let mut p: api::Plan = 0;
        // SAFETY: valid out-pointer; a plan in the current context.
        fft_result("cufftPlan1d", unsafe {
            (self.fft.plan_1d)(&mut p, n, kind, b)
        })?;
        self.plans.push(p);
        self.plan_kinds.push(shape.kind);
        Ok(FftPlan(self.plans.len() - 1))
    }

    unsafe fn memcpy_htod_async(
        &mut self,
        stream: Stream,
        dst: DevBuf,
        dst_off: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        if dst_off + len > dst.len {
            return Err(DeviceError::new("cuMemcpyHtoDAsync", "past the buffer"));
        }
        let (d, s) = (self.ptr(dst, dst_off)?, self.stream(stream)?);
        // SAFETY: `d..d+len` is inside an allocation of this device; the
        // caller keeps `src..src+len` valid until the copy completes.
        unsafe { sys::cuMemcpyHtoDAsync_v2(d, src.cast(), len, s) }
            .result()
            .map_err(de("cuMemcpyHtoDAsync"))
    }

    fn memcpy_ptod_async(
        &mut self,
        stream: Stream,
        dst: DevBuf,
        dst_off: usize,
        src: Pinned,
        src_off: usize,
        len: usize,
    ) -> Result<()> {
        let (p, plen) = self.pinned[src.id];
        if src_off + len > plen {
            return Err(DeviceError::new(
                "cuMemcpyHtoDAsync",
                "past the pinned buffer",
            ));
        }
        // SAFETY: the source lies in a pinned allocation owned by this device,
        // alive until Drop; the runner does not rewrite it while in flight.
        unsafe { self.memcpy_htod_async(stream, dst, dst_off, p.add(src_off), len) }
    }

    fn memcpy_dtoh_async(
        &mut self,
        stream: Stream,
        dst: Pinned,
        dst_off: usize,
        src: DevBuf,
        src_off: usize,
        len: usize,
    ) -> Result<()> {
        let (p, plen) = self.pinned[dst.id];
        if dst_off + len > plen || src_off + len > src.len {
            return Err(DeviceError::new("cuMemcpyDtoHAsync", "past a buffer"));
        }
        let (sp, s) = (self.ptr(src, src_off)?, self.stream(stream)?);
        // SAFETY: both ranges lie in allocations owned by this device.
        unsafe { sys::cuMemcpyDtoHAsync_v2(p.add(dst_off).cast(), sp, len, s) }
            .result()
            .map_err(de("cuMemcpyDtoHAsync"))
    }

    fn launch(&mut self, stream: Stream, k: Kernel, dims: LaunchDims, args: &[Arg]) -> Result<()> {
        let f = *self
            .kernels
            .get(k.0)
            .ok_or_else(|| DeviceError::new("cuLaunchKernel", "unknown kernel"))?;
        let mut vals: Vec<[u8; 8]> = Vec::with_capacity(args.len());
        for a in args {
            vals.push(match *a {
                Arg::Ptr(b, off) => self.ptr(b, off)?.to_ne_bytes(),
                Arg::I32(v) => {
                    let mut b = [0u8; 8];
                    b[..4].copy_from_slice(&v.to_ne_bytes());
                    b
                }
                Arg::I64(v) => v.to_ne_bytes(),
                Arg::F32(v) => {
                    let mut b = [0u8; 8];
                    b[..4].copy_from_slice(&v.to_ne_bytes());
                    b
                }
                Arg::F64(v) => v.to_ne_bytes(),
            });
        }
        let mut params: Vec<*mut std::ffi::c_void> =
            vals.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        let s = self.stream(stream)?;
        // SAFETY: `f` is a function of the loaded module; each parameter points
        // to a value laid out as the kernel's parameter type (8-byte slots, the
        // value in the leading bytes, little-endian); device pointers are
        // inside live allocations; the driver copies parameters at the call.
        unsafe {
            result::launch_kernel(f, (dims.grid, 1, 1), (dims.block, 1, 1), 0, s, &mut params)
        }
        .map_err(de("cuLaunchKernel"))
    }

    fn fft_exec(
        &mut self,
        stream: Stream,
        plan: FftPlan,
        input: DevBuf,
        output: DevBuf,
    ) -> Result<()> {
        let (p, kind) = self
            .plans
            .get(plan.0)
            .zip(self.plan_kinds.get(plan.0))
            .map(|(&p, &k)| (p, k))
            .ok_or_else(|| DeviceError::new("cufftExec", "unknown plan"))?;
        let (i, o, s) = (
            self.ptr(input, 0)?,
            self.ptr(output, 0)?,
            self.stream(stream)?,
        );
        // SAFETY: plan and stream are live handles of this device; the buffers
        // were sized by the recipe for this plan's batch.
        unsafe {
            fft_result("cufftSetStream", (self.fft.set_stream)(p, s.cast()))?;
            match kind {
                FftKind::D2Z => fft_result(
                    "cufftExecD2Z",
                    (self.fft.exec_d2z)(p, i as *mut f64, o as *mut f64),
                ),
                FftKind::R2C => fft_result(
                    "cufftExecR2C",
                    (self.fft.exec_r2c)(p, i as *mut f32, o as *mut f32),
                ),
            }
        }
    }

    fn record_event(&mut self, e: Event, stream: Stream) -> Result<()> {
        let (e, s) = (self.event(e)?, self.stream(stream)?);
        // SAFETY: live handles.
        unsafe { result::event::record(e, s) }.map_err(de("cuEventRecord"))
    }

    fn stream_wait_event(&mut self, stream: Stream, e: Event) -> Result<()> {
        let (e, s) = (self.event(e)?, self.stream(stream)?);
        // SAFETY: live handles.
        unsafe { result::stream::wait_event(s, e, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
            .map_err(de("cuStreamWaitEvent"))
    }

    fn event_query(&mut self, e: Event) -> Result<bool> {
        let e = self.event(e)?;
        // SAFETY: live handle.
        match unsafe { sys::cuEventQuery(e) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => Err(DeviceError::new("cuEventQuery", result::DriverError(r))),
        }
    }

    fn event_synchronize(&mut self, e: Event) -> Result<()> {
        let e = self.event(e)?;
        // SAFETY: live handle.
        unsafe { result::event::synchronize(e) }.map_err(de("cuEventSynchronize"))
    }

    fn begin_capture(&mut self, stream: Stream) -> Result<()> {
        let s = self.stream(stream)?;
        // SAFETY: live stream; thread-local mode so other threads' CUDA calls
        // (none in melforge) cannot invalidate the capture.
        unsafe {
            result::stream::begin_capture(
                s,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(de("cuStreamBeginCapture"))
    }

    fn end_capture(&mut self, stream: Stream) -> Result<Graph> {
        let s = self.stream(stream)?;
        // SAFETY: live stream in capture.
        let g = unsafe { result::stream::end_capture(s) }.map_err(de("cuStreamEndCapture"))?;
        self.graphs.push(g);
        Ok(Graph(self.graphs.len() - 1))
    }

    fn graph_instantiate(&mut self, g: Graph) -> Result<GraphExec> {
        let g = *self
            .graphs
            .get(g.0)
            .ok_or_else(|| DeviceError::new("cuGraphInstantiate", "unknown graph"))?;
        // SAFETY: live graph.
        let x = unsafe { result::graph::instantiate(g, sys::CUgraphInstantiate_flags(0)) }
            .map_err(de("cuGraphInstantiate"))?;
        self.execs.push(x);
        Ok(GraphExec(self.execs.len() - 1))
    }

    fn graph_launch(&mut self, g: GraphExec, stream: Stream) -> Result<()> {
        let x = *self
            .execs
            .get(g.0)
            .ok_or_else(|| DeviceError::new("cuGraphLaunch", "unknown graph exec"))?;
        let s = self.stream(stream)?;
        // SAFETY: live handles.
        unsafe { result::graph::launch(x, s) }.map_err(de("cuGraphLaunch"))
    }

    fn attach_error_sink(&mut self, sink: Arc<Mutex<Vec<String>>>) {
        self.errors = sink;
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let sink = Arc::clone(&self.errors);
        // Let queued work finish before anything it uses is released.
        for &s in &self.streams {
            // SAFETY: live stream.
            if let Err(e) = unsafe { result::stream::synchronize(s) } {
                record(&sink, "cuStreamSynchronize", e);
            }
        }
        // SAFETY (every call below): each handle was created by this device,
        // is released exactly once, and dependents go first (graph execs
        // before graphs, plans before the context, registrations before the
        // caller's memory goes away).
        unsafe {
            for x in self.execs.drain(..) {
                if let Err(e) = result::graph::exec_destroy(x) {
                    record(&sink, "cuGraphExecDestroy", e);
                }
            }
            for g in self.graphs.drain(..) {
                if let Err(e) = result::graph::destroy(g) {
                    record(&sink, "cuGraphDestroy", e);
                }
            }
            for p in self.plans.drain(..) {
                let r = (self.fft.destroy)(p);
                if r != 0 {
                    record(&sink, "cufftDestroy", format!("cufftResult {r}"));
                }
            }
            for e in self.events.drain(..) {
                if let Err(err) = result::event::destroy(e) {
                    record(&sink, "cuEventDestroy", err);
                }
            }
            for s in self.streams.drain(..) {
                if let Err(e) = result::stream::destroy(s) {
                    record(&sink, "cuStreamDestroy", e);
                }
            }
            for b in self.bufs.drain(..) {
                if let Err(e) = result::free_sync(b) {
                    record(&sink, "cuMemFree", e);
                }
            }
            for (p, _) in self.pinned.drain(..) {
                if let Err(e) = result::free_host(p.cast()) {
                    record(&sink, "cuMemFreeHost", e);
                }
            }
            for r in self.regs.drain(..) {
                if let Err(e) = sys::cuMemHostUnregister(r.cast()).result() {
                    record(&sink, "cuMemHostUnregister", e);
                }
            }
            for m in self.modules.drain(..) {
                if let Err(e) = result::module::unload(m) {
                    record(&sink, "cuModuleUnload", e);
                }
            }
            if let Err(e) = result::primary_ctx::release(self.dev) {
                record(&sink, "cuDevicePrimaryCtxRelease", e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: events lacked CU_EVENT_BLOCKING_SYNC and the primary
    /// context kept CU_CTX_SCHED_AUTO, so the stage thread spun a whole core
    /// in cuEventSynchronize — the core the reader and writer need.
    #[test]
    fn host_waits_block_instead_of_spinning_a_core() {
        let blocking = sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        assert_eq!(EVENT_FLAGS & blocking, blocking, "events spin");
        let timing = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        assert_eq!(EVENT_FLAGS & timing, timing, "events time (slower)");
        let sched = sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32;
        assert_eq!(
            CTX_FLAGS & sys::CUctx_flags::CU_CTX_SCHED_MASK as u32,
            sched,
            "the primary context spins (SCHED_AUTO)"
        );
    }
}
