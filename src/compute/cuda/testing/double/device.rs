//! [`Device`] for [`HostDouble`]: every operation of a batch on host memory,
//! logged in issue order and queued to execute later (the rules are in
//! `double.rs`'s module doc).

use super::*;

impl Device for HostDouble {
    fn describe(&self) -> String {
        "host double (no GPU)".into()
    }

    fn attach_error_sink(&mut self, sink: Arc<Mutex<Vec<String>>>) {
        self.sink = Some(sink);
    }

    unsafe fn register_host(&mut self, _ptr: *mut u8, len: usize) -> Result<HostReg> {
        self.forbid_in_capture("cuMemHostRegister")?;
        self.refused("cuMemHostRegister")?;
        self.call(Call::RegisterHost { len });
        Ok(HostReg(0))
    }

    fn alloc(&mut self, bytes: usize) -> Result<DevBuf> {
        self.forbid_in_capture("cuMemAlloc")?;
        let b = DevBuf {
            id: self.bufs.len(),
            len: bytes,
        };
        self.bufs.push(words(bytes));
        self.buf_lens.push(bytes);
        self.call(Call::Alloc(b));
        Ok(b)
    }

    fn alloc_pinned(&mut self, bytes: usize) -> Result<Pinned> {
        self.forbid_in_capture("cuMemHostAlloc")?;
        let p = Pinned {
            id: self.pinned.len(),
            len: bytes,
        };
        self.pinned.push(words(bytes));
        self.call(Call::AllocPinned(p));
        Ok(p)
    }

    unsafe fn pinned(&self, p: Pinned) -> &[u8] {
        as_bytes(&self.pinned[p.id], p.len)
    }

    unsafe fn pinned_mut(&mut self, p: Pinned) -> &mut [u8] {
        as_bytes_mut(&mut self.pinned[p.id], p.len)
    }

    fn create_stream(&mut self) -> Result<Stream> {
        let s = Stream(self.streams.len());
        self.streams.push(VecDeque::new());
        self.call(Call::CreateStream(s));
        Ok(s)
    }

    fn create_event(&mut self) -> Result<Event> {
        let e = Event(self.events.len());
        self.events.push(EventState::default());
        self.call(Call::CreateEvent(e));
        Ok(e)
    }

    fn kernel(&mut self, name: &str) -> Result<Kernel> {
        self.call(Call::Kernel(name.into()));
        let k = Kernel(self.kernels.len());
        self.kernels.push(name.into());
        Ok(k)
    }

    fn fft_plan(&mut self, shape: FftShape) -> Result<FftPlan> {
        self.forbid_in_capture("cufftPlanMany")?;
        self.call(Call::FftPlan(shape));
        self.plans.push(shape);
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
        self.check_buf("cuMemcpyHtoDAsync", dst, dst_off, len)?;
        self.refused("cuMemcpyHtoDAsync")?;
        if self.fail_once.as_ref().is_some_and(|t| t.exists()) {
            return Err(DeviceError::new(
                "cuMemcpyHtoDAsync",
                "CUDA_ERROR_LAUNCH_FAILED",
            ));
        }
        let work = Work::HtoD {
            dst,
            off: dst_off,
            src: src as usize,
            len,
        };
        self.issue(stream, work)
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
        self.check_buf("cuMemcpyHtoDAsync", dst, dst_off, len)?;
        self.check_pinned("cuMemcpyHtoDAsync", src, src_off, len)?;
        let work = Work::PtoD {
            dst,
            off: dst_off,
            src,
            src_off,
            len,
        };
        self.issue(stream, work)
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
        self.check_buf("cuMemcpyDtoHAsync", src, src_off, len)?;
        self.check_pinned("cuMemcpyDtoHAsync", dst, dst_off, len)?;
        let work = Work::DtoH {
            dst,
            off: dst_off,
            src,
            src_off,
            len,
        };
        self.issue(stream, work)
    }

    fn launch(&mut self, stream: Stream, k: Kernel, dims: LaunchDims, args: &[Arg]) -> Result<()> {
        let kernel = self
            .kernels
            .get(k.0)
            .cloned()
            .ok_or_else(|| DeviceError::new("cuLaunchKernel", "unknown kernel"))?;
        if dims.grid == 0 || dims.block == 0 || dims.grid > 65535 * 32768 || dims.block > 1024 {
            return Err(DeviceError::new(
                "cuLaunchKernel",
                format!("bad dims {dims:?}"),
            ));
        }
        for a in args {
            if let Arg::Ptr(b, off) = a {
                self.check_buf("cuLaunchKernel", *b, *off, 0)?;
            }
        }
        let work = Work::Launch {
            kernel,
            dims,
            args: args.to_vec(),
        };
        self.issue(stream, work)
    }

    fn fft_exec(
        &mut self,
        stream: Stream,
        plan: FftPlan,
        input: DevBuf,
        output: DevBuf,
    ) -> Result<()> {
        let FftShape { n, batch, kind } = *self
            .plans
            .get(plan.0)
            .ok_or_else(|| DeviceError::new("cufftExec", "unknown plan"))?;
        let (op, real) = match kind {
            FftKind::D2Z => ("cufftExecD2Z", 8),
            FftKind::R2C => ("cufftExecR2C", 4),
        };
        self.check_buf(op, input, 0, n * batch * real)?;
        self.check_buf(op, output, 0, (n / 2 + 1) * batch * 2 * real)?;
        self.refused(op)?;
        self.issue(
            stream,
            Work::Fft {
                plan,
                input,
                output,
            },
        )
    }

    fn record_event(&mut self, e: Event, stream: Stream) -> Result<()> {
        if matches!(self.capture, Some((s, _)) if s == stream) {
            return Err(DeviceError::new(
                "cuEventRecord",
                "the double forbids recording an event inside a capture",
            ));
        }
        let st = self
            .events
            .get_mut(e.0)
            .ok_or_else(|| DeviceError::new("cuEventRecord", "unknown event"))?;
        st.recorded += 1;
        let generation = st.recorded;
        self.issue(
            stream,
            Work::Record {
                event: e,
                generation,
            },
        )
    }

    fn stream_wait_event(&mut self, stream: Stream, e: Event) -> Result<()> {
        if matches!(self.capture, Some((s, _)) if s == stream) {
            return Err(DeviceError::new(
                "cuStreamWaitEvent",
                "waiting on an event recorded outside the capture \
                 (CUDA_ERROR_STREAM_CAPTURE_ISOLATION)",
            ));
        }
        let generation = self
            .events
            .get(e.0)
            .ok_or_else(|| DeviceError::new("cuStreamWaitEvent", "unknown event"))?
            .recorded;
        self.issue(
            stream,
            Work::Wait {
                event: e,
                generation,
            },
        )
    }

    fn event_query(&mut self, e: Event) -> Result<bool> {
        self.tick()?;
        let st = self.events[e.0];
        let done = st.completed >= st.recorded;
        self.call(Call::Query { event: e, done });
        Ok(done)
    }

    fn event_synchronize(&mut self, e: Event) -> Result<()> {
        self.forbid_in_capture("cuEventSynchronize")?;
        self.call(Call::Sync(e));
        loop {
            let st = self.events[e.0];
            if st.completed >= st.recorded {
                return Ok(());
            }
            if !self.step_one(None)? {
                return Err(DeviceError::new(
                    "cuEventSynchronize",
                    "deadlock: the event's work can never run",
                ));
            }
        }
    }

    fn begin_capture(&mut self, stream: Stream) -> Result<()> {
        self.forbid_in_capture("cuStreamBeginCapture")?;
        self.refused("cuStreamBeginCapture")?;
        self.call(Call::BeginCapture(stream));
        self.capture = Some((stream, Vec::new()));
        Ok(())
    }

    fn end_capture(&mut self, stream: Stream) -> Result<Graph> {
        match self.capture.take() {
            Some((s, body)) if s == stream => {
                let g = Graph(self.graphs.len());
                self.graphs.push(body);
                self.call(Call::EndCapture { stream, graph: g });
                Ok(g)
            }
            other => {
                self.capture = other;
                Err(DeviceError::new(
                    "cuStreamEndCapture",
                    "stream is not capturing",
                ))
            }
        }
    }

    fn graph_instantiate(&mut self, g: Graph) -> Result<GraphExec> {
        self.forbid_in_capture("cuGraphInstantiate")?;
        self.refused("cuGraphInstantiate")?;
        if g.0 >= self.graphs.len() {
            return Err(DeviceError::new("cuGraphInstantiate", "unknown graph"));
        }
        let x = GraphExec(self.execs.len());
        self.execs.push(g.0);
        self.call(Call::Instantiate { graph: g, exec: x });
        Ok(x)
    }

    fn graph_launch(&mut self, x: GraphExec, stream: Stream) -> Result<()> {
        self.forbid_in_capture("cuGraphLaunch")?;
        let g = *self
            .execs
            .get(x.0)
            .ok_or_else(|| DeviceError::new("cuGraphLaunch", "unknown graph exec"))?;
        self.call(Call::GraphLaunch { stream, exec: x });
        let body = self.graphs[g].clone();
        self.streams[stream.0].extend(body);
        self.tick()
    }
}
