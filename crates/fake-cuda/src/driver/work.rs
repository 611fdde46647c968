//! Streams, events, captured graphs, modules and launches.

use super::held::Later;
use super::*;

impl Driver {
    // -- streams and events -------------------------------------------------------------

    pub fn create_stream(&mut self, context: Handle) -> Result<Handle, CuResult> {
        self.context(context)?;
        Ok(insert(
            &mut self.streams,
            Stream {
                context,
                last_end_ns: 0,
                capture: None,
            },
        ))
    }

    pub fn destroy_stream(&mut self, stream: Handle) -> Result<(), CuResult> {
        let slot = self
            .streams
            .get_mut(stream)
            .ok_or(CuResult::InvalidHandle)?;
        slot.take().map(|_| ()).ok_or(CuResult::InvalidHandle)
    }

    pub(super) fn stream(&self, stream: Handle) -> Result<&Stream, CuResult> {
        self.streams
            .get(stream)
            .and_then(Option::as_ref)
            .ok_or(CuResult::InvalidHandle)
    }

    pub(super) fn stream_mut(&mut self, stream: Handle) -> Result<&mut Stream, CuResult> {
        self.streams
            .get_mut(stream)
            .and_then(Option::as_mut)
            .ok_or(CuResult::InvalidHandle)
    }

    /// When the work queued on `stream` (None: the legacy default stream of `context`) ends.
    /// Syncing a capturing stream is refused and ends its capture (CUDA's rule).
    /// [`HELD`] while the context waits behind a held kernel.
    pub fn sync_point(&mut self, context: Handle, stream: Option<Handle>) -> Result<u64, CuResult> {
        if self.is_held(context)? && !self.is_capturing(stream)? {
            return Ok(HELD);
        }
        match stream {
            None => {
                if self.capturing(context) {
                    self.invalidate_captures(context);
                    return Err(CuResult::StreamCaptureUnsupported);
                }
                Ok(self.context(context)?.last_end_ns)
            }
            Some(handle) => {
                let stream = self.stream_mut(handle)?;
                if let Some(capture) = stream.capture.as_mut() {
                    capture.invalidated = true;
                    return Err(CuResult::StreamCaptureUnsupported);
                }
                Ok(stream.last_end_ns)
            }
        }
    }

    fn capturing(&self, context: Handle) -> bool {
        self.streams
            .iter()
            .flatten()
            .any(|s| s.context == context && s.capture.is_some())
    }

    fn invalidate_captures(&mut self, context: Handle) {
        for stream in self.streams.iter_mut().flatten() {
            if let (true, Some(capture)) = (stream.context == context, stream.capture.as_mut()) {
                capture.invalidated = true;
            }
        }
    }

    pub fn create_event(&mut self) -> Handle {
        insert(&mut self.events, Event { at_ns: None })
    }

    pub fn destroy_event(&mut self, event: Handle) -> Result<(), CuResult> {
        let slot = self.events.get_mut(event).ok_or(CuResult::InvalidHandle)?;
        slot.take().map(|_| ()).ok_or(CuResult::InvalidHandle)
    }

    pub fn record_event(
        &mut self,
        context: Handle,
        event: Handle,
        stream: Option<Handle>,
    ) -> Result<(), CuResult> {
        self.record_event_at(wait::now_ns(), context, event, stream)
    }

    /// [`Driver::record_event`] of a record queued at `now`.
    pub(super) fn record_event_at(
        &mut self,
        now: u64,
        context: Handle,
        event: Handle,
        stream: Option<Handle>,
    ) -> Result<(), CuResult> {
        let ctx = self.context_mut(context)?;
        let at = if let Some(held) = ctx.held.as_mut() {
            held.keep(now, Later::Record(event, stream));
            HELD
        } else {
            match stream {
                None => ctx.last_end_ns,
                Some(s) => self.stream(s)?.last_end_ns,
            }
        };
        let event = self.events.get_mut(event).and_then(Option::as_mut);
        event.ok_or(CuResult::InvalidHandle)?.at_ns = Some(at.max(now));
        Ok(())
    }

    /// When an event's work ends (0: never recorded, which CUDA treats as complete).
    pub fn event_point(&self, event: Handle) -> Result<u64, CuResult> {
        let event = self.events.get(event).and_then(Option::as_ref);
        Ok(event.ok_or(CuResult::InvalidHandle)?.at_ns.unwrap_or(0))
    }

    /// cuStreamWaitEvent: `stream`'s later work starts after the event's. An event still
    /// behind a hold of another context is taken as complete (the stub holds whole contexts).
    pub fn stream_wait_event(
        &mut self,
        context: Handle,
        stream: Option<Handle>,
        event: Handle,
    ) -> Result<(), CuResult> {
        let at = self.event_point(event)?;
        if let Some(held) = self.context_mut(context)?.held.as_mut() {
            held.keep(wait::now_ns(), Later::WaitEvent(stream, event));
            return Ok(());
        }
        if let (Some(s), false) = (stream, at == HELD) {
            let stream = self.stream_mut(s)?;
            stream.last_end_ns = stream.last_end_ns.max(at);
        }
        Ok(())
    }

    // -- graphs ---------------------------------------------------------------------------

    pub fn begin_capture(&mut self, stream: Option<Handle>) -> Result<(), CuResult> {
        // The legacy default stream cannot be captured.
        let stream = self.stream_mut(stream.ok_or(CuResult::StreamCaptureUnsupported)?)?;
        if stream.capture.is_some() {
            return Err(CuResult::IllegalState);
        }
        stream.capture = Some(Capture {
            kernels: Vec::new(),
            invalidated: false,
        });
        Ok(())
    }

    /// Ends a capture, returning the graph (refused if a sync invalidated it).
    pub fn end_capture(&mut self, stream: Option<Handle>) -> Result<Handle, CuResult> {
        let stream = self.stream_mut(stream.ok_or(CuResult::IllegalState)?)?;
        let capture = stream.capture.take().ok_or(CuResult::IllegalState)?;
        if capture.invalidated {
            return Err(CuResult::StreamCaptureInvalidated);
        }
        Ok(insert(&mut self.graphs, capture.kernels))
    }

    pub fn is_capturing(&self, stream: Option<Handle>) -> Result<bool, CuResult> {
        match stream {
            None => Ok(false),
            Some(s) => Ok(self.stream(s)?.capture.is_some()),
        }
    }

    pub fn instantiate(&mut self, graph: Handle) -> Result<Handle, CuResult> {
        let kernels = self.graphs.get(graph).and_then(Option::as_ref);
        let kernels = kernels.ok_or(CuResult::InvalidHandle)?.clone();
        Ok(insert(&mut self.execs, kernels))
    }

    pub fn destroy_graph(&mut self, graph: Handle) -> Result<(), CuResult> {
        let slot = self.graphs.get_mut(graph).ok_or(CuResult::InvalidHandle)?;
        slot.take().map(|_| ()).ok_or(CuResult::InvalidHandle)
    }

    pub fn destroy_exec(&mut self, exec: Handle) -> Result<(), CuResult> {
        let slot = self.execs.get_mut(exec).ok_or(CuResult::InvalidHandle)?;
        slot.take().map(|_| ()).ok_or(CuResult::InvalidHandle)
    }

    pub fn exec_kernels(&self, exec: Handle) -> Result<Vec<KernelCost>, CuResult> {
        let kernels = self.execs.get(exec).and_then(Option::as_ref);
        Ok(kernels.ok_or(CuResult::InvalidHandle)?.clone())
    }

    // -- modules and launches -------------------------------------------------------------

    pub fn load_module(&mut self) -> Handle {
        self.modules.push(true);
        self.modules.len() - 1
    }

    pub fn unload_module(&mut self, module: Handle) -> Result<(), CuResult> {
        match self.modules.get_mut(module) {
            Some(live) if *live => {
                *live = false;
                Ok(())
            }
            _ => Err(CuResult::InvalidHandle),
        }
    }

    pub fn function(&mut self, module: Handle) -> Result<Handle, CuResult> {
        if !self.modules.get(module).copied().unwrap_or(false) {
            return Err(CuResult::InvalidHandle);
        }
        self.functions.push(module);
        Ok(self.functions.len() - 1)
    }

    pub fn check_function(&self, function: Handle) -> Result<(), CuResult> {
        let module = self
            .functions
            .get(function)
            .ok_or(CuResult::InvalidHandle)?;
        match self.modules.get(*module) {
            Some(true) => Ok(()),
            _ => Err(CuResult::InvalidHandle),
        }
    }

    /// Either records the kernels into `stream`'s capture (returning None), or, when the
    /// launch queue has room, books them on the device as one launch (returning their end, or
    /// [`HELD`] when the context now waits behind a held kernel);
    /// a full queue returns `Err(Ok(oldest end))` for the caller to wait on without the lock.
    pub fn launch(
        &mut self,
        context: Handle,
        stream: Option<Handle>,
        kernels: &[KernelCost],
    ) -> Result<Option<u64>, Result<u64, CuResult>> {
        if let Some(s) = stream {
            let stream = self.stream_mut(s).map_err(Err)?;
            if let Some(capture) = stream.capture.as_mut() {
                capture.kernels.extend_from_slice(kernels);
                return Ok(None);
            }
        } else if self.capturing(context) {
            // A launch on the legacy stream while a stream of the context captures.
            self.invalidate_captures(context);
            return Err(Err(CuResult::StreamCaptureImplicit));
        }
        let now = wait::now_ns();
        let ctx = self.context_mut(context).map_err(Err)?;
        while ctx.pending.front().is_some_and(|&end| end <= now) {
            ctx.pending.pop_front();
        }
        let kept = ctx.held.as_ref().map_or(0, |h| h.kept_kernels());
        if ctx.pending.len() + kept >= QUEUE_DEPTH {
            // Behind a hold the oldest end is not known yet: look again shortly.
            let retry = if kept > 0 {
                now + POLL_NS
            } else {
                ctx.pending[0]
            };
            return Err(Ok(retry));
        }
        if !kernels.iter().all(held::valid_word) {
            return Err(Err(CuResult::InvalidValue));
        }
        let end = self.enqueue(now, context, stream, kernels).map_err(Err)?;
        Ok(Some(end))
    }
}
