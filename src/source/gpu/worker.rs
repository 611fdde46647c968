//! One thread per GPU. NVML calls block, and a GPU in trouble can hold a call for seconds;
//! with each GPU read on its own thread, the source waits for all of them up to one
//! deadline, reports a GPU that missed it as down (`timeout`), and the other GPUs and
//! sources carry on. A late reading is discarded and the thread is asked again once free.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread;
use std::time::Instant;

use nvml_wrapper::Nvml;

use super::device::DeviceReader;
use crate::snapshot::GpuDevice;

/// The sampler's handle on one GPU's thread.
pub struct GpuWorker {
    index: u32,
    requests: Sender<()>,
    readings: Receiver<GpuDevice>,
    /// A request was sent and its reading has not come back yet.
    in_flight: bool,
    /// The last reading that came back in time: identity for a GPU that times out.
    last: Option<GpuDevice>,
}

impl GpuWorker {
    /// Starts the thread for the GPU at `index`.
    pub fn start(
        nvml: &'static Nvml,
        index: u32,
        procfs: PathBuf,
        max_processes: usize,
    ) -> GpuWorker {
        let (requests, requested) = mpsc::channel::<()>();
        let (reply, readings) = mpsc::channel();
        let mut reader = DeviceReader::new(nvml, index, procfs, max_processes);
        let spawned = thread::Builder::new()
            .name(format!("gpu-{index}"))
            .spawn(move || {
                // Ends when the worker is dropped (the request channel closes).
                while requested.recv().is_ok() {
                    if reply.send(reader.read()).is_err() {
                        return;
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::error!(gpu = index, %error, "cannot start a GPU thread; the GPU is reported down");
        }
        GpuWorker {
            index,
            requests,
            readings,
            in_flight: false,
            last: None,
        }
    }

    /// Asks for a new reading unless the previous one is still being taken.
    pub fn request(&mut self) {
        if self.in_flight {
            match self.readings.try_recv() {
                // A reading that missed its deadline: too old to report.
                Ok(_) => self.in_flight = false,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
        self.in_flight = self.requests.send(()).is_ok();
    }

    /// The reading, if it arrives by `deadline`; otherwise the GPU reported down.
    pub fn collect(&mut self, deadline: Instant) -> GpuDevice {
        if self.in_flight {
            match self
                .readings
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(reading) => {
                    self.in_flight = false;
                    self.last = Some(reading.clone());
                    return reading;
                }
                Err(RecvTimeoutError::Timeout) => return self.down("timeout"),
                Err(RecvTimeoutError::Disconnected) => self.in_flight = false,
            }
        }
        self.down("thread_failed")
    }

    /// The GPU as last seen, marked down with `reason`: identity only.
    fn down(&self, reason: &str) -> GpuDevice {
        let last = self.last.clone().unwrap_or_default();
        GpuDevice {
            index: self.index,
            uuid: last.uuid,
            model: last.model,
            pci_bus_id: last.pci_bus_id,
            numa_node: last.numa_node,
            cpu_affinity: last.cpu_affinity,
            unsupported: last.unsupported,
            up: false,
            error: reason.to_string(),
            ..GpuDevice::default()
        }
    }
}
