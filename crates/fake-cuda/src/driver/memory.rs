//! Device memory, pinned host memory and copies.

use super::held::Later;
use super::*;

impl Driver {
    // -- memory ---------------------------------------------------------------------------

    pub fn alloc(&mut self, context: Handle, bytes: u64) -> Result<u64, CuResult> {
        if bytes == 0 {
            return Err(CuResult::InvalidValue);
        }
        let total = self.memory_total;
        let ctx = self.context(context)?;
        let slot = ctx.slot;
        let fits = ctx
            .timeline
            .locked(|t| {
                let fits = t.used_by_all(alive) + bytes <= total;
                if fits {
                    t.set_held(slot, t.held(slot) + bytes);
                }
                fits
            })
            .map_err(|_| CuResult::Unknown)?;
        if !fits {
            return Err(CuResult::OutOfMemory);
        }
        let ptr = self.next_device_ptr;
        // 512-byte aligned, as cuMemAlloc's allocations are.
        self.next_device_ptr += bytes.div_ceil(512) * 512;
        self.allocations.insert(ptr, (context, bytes));
        Ok(ptr)
    }

    pub fn free(&mut self, ptr: u64) -> Result<(), CuResult> {
        let (context, bytes) = self
            .allocations
            .remove(&ptr)
            .ok_or(CuResult::InvalidValue)?;
        let ctx = self.context(context)?;
        let slot = ctx.slot;
        ctx.timeline
            .locked(|t| t.set_held(slot, t.held(slot).saturating_sub(bytes)))
            .map_err(|_| CuResult::Unknown)
    }

    /// (free, total) device memory.
    pub fn memory_info(&self, context: Handle) -> Result<(u64, u64), CuResult> {
        let used = self
            .context(context)?
            .timeline
            .locked(|t| t.used_by_all(alive))
            .map_err(|_| CuResult::Unknown)?;
        Ok((self.memory_total.saturating_sub(used), self.memory_total))
    }

    /// Whether `[ptr, ptr + bytes)` lies in one device allocation.
    pub fn on_device(&self, ptr: u64, bytes: u64) -> bool {
        self.allocations
            .iter()
            .any(|(&start, &(_, len))| ptr >= start && ptr + bytes <= start + len)
    }

    pub fn add_pinned(&mut self, start: usize, len: usize) {
        self.pinned.push((start, len));
    }

    pub fn remove_pinned(&mut self, start: usize) -> Result<(), CuResult> {
        let at = self.pinned.iter().position(|&(s, _)| s == start);
        self.pinned.remove(at.ok_or(CuResult::InvalidValue)?);
        Ok(())
    }

    pub fn is_pinned(&self, ptr: usize, bytes: usize) -> bool {
        self.pinned
            .iter()
            .any(|&(start, len)| ptr >= start && ptr + bytes <= start + len)
    }

    /// Queues a copy's DMA on `stream` after its work (the legacy stream: after the
    /// context's), returning when it ends. Copies run on the copy engines: they order the
    /// stream but book no kernel (NVML's utilization counts kernels only).
    pub fn queue_copy(
        &mut self,
        context: Handle,
        stream: Option<Handle>,
        copy: Copy,
        bytes: u64,
        pinned: bool,
    ) -> Result<u64, CuResult> {
        self.queue_copy_at(wait::now_ns(), context, stream, copy, bytes, pinned)
    }

    /// [`Driver::queue_copy`] of a copy queued at `now`.
    pub(super) fn queue_copy_at(
        &mut self,
        now: u64,
        context: Handle,
        stream: Option<Handle>,
        copy: Copy,
        bytes: u64,
        pinned: bool,
    ) -> Result<u64, CuResult> {
        let rate = match (copy, pinned) {
            (Copy::DeviceToDevice, _) => DEVICE_BYTES_PER_S,
            (_, true) => PINNED_BYTES_PER_S,
            (_, false) => PAGEABLE_BYTES_PER_S,
        };
        // A copy across the PCIe link moves no faster than the link as it trained; the time
        // beyond what the link at its maximum would take is the link's.
        let (trained, full) = match (copy, self.pcie_bytes_per_s) {
            (Copy::DeviceToDevice, _) | (_, None) => (rate, rate),
            (_, Some((now, max))) => (rate.min(now), rate.min(max)),
        };
        let nanos = |rate: f64| COPY_LATENCY_NS + (bytes as f64 / rate * 1e9) as u64;
        let link_ns = nanos(trained) - nanos(full);
        let nanos = nanos(trained);
        if self.is_capturing(stream)? {
            return Err(CuResult::StreamCaptureUnsupported);
        }
        let ctx = self.context_mut(context)?;
        if let Some(held) = ctx.held.as_mut() {
            held.keep(now, Later::Copy(stream, copy, bytes, pinned));
            return Ok(HELD);
        }
        let after = match stream {
            None => ctx.last_end_ns,
            Some(_) => 0,
        };
        let end = match stream {
            None => {
                let end = after.max(now) + nanos;
                ctx.last_end_ns = end;
                end
            }
            Some(s) => {
                let stream = self.stream_mut(s)?;
                let end = stream.last_end_ns.max(now) + nanos;
                stream.last_end_ns = end;
                end
            }
        };
        if link_ns > 0 {
            let pid = self.pid;
            let ctx = self.context(context)?;
            let _ = ctx
                .timeline
                .locked(|t| t.note_link_wait(pid, end - link_ns, end));
        }
        Ok(end)
    }

    /// Host time a pageable host-to-device copy spends staging its buffer.
    pub fn staging_ns(bytes: u64) -> u64 {
        (bytes as f64 / PAGEABLE_BYTES_PER_S * 1e9) as u64
    }
}
