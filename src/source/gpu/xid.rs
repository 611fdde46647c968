//! XID errors arrive as NVML events; waiting for them blocks, so a thread of its own waits
//! and counts them per GPU while the sampler copies the counts on each tick.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

/// XID code NVML uses when it cannot name the error.
const UNKNOWN_XID: u64 = 999;

/// XID counts per GPU UUID, then per XID code.
pub type XidCounts = Arc<Mutex<HashMap<String, BTreeMap<u64, u64>>>>;

/// A running watcher over a fixed set of GPUs; dropping it asks the thread to stop.
pub struct XidWatcher {
    /// The (index, UUID) pairs it registered.
    pub gpus: Vec<(u32, String)>,
    stop: Arc<AtomicBool>,
}

impl Drop for XidWatcher {
    fn drop(&mut self) {
        // The thread notices within one wait timeout; nobody waits for it.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How long one NVML wait lasts before the thread checks whether it should stop.
const WAIT_MS: u32 = 500;

/// Starts a thread that registers `gpus` for critical XID events and counts them in `counts`.
pub fn watch(nvml: &'static Nvml, gpus: Vec<(u32, String)>, counts: XidCounts) -> XidWatcher {
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = XidWatcher {
        gpus: gpus.clone(),
        stop: stop.clone(),
    };
    let spawned = thread::Builder::new()
        .name("xid-events".into())
        .spawn(move || run(nvml, &gpus, &counts, &stop));
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the XID event thread; XID errors are not counted");
    }
    watcher
}

fn run(
    nvml: &'static Nvml,
    gpus: &[(u32, String)],
    counts: &Mutex<HashMap<String, BTreeMap<u64, u64>>>,
    stop: &AtomicBool,
) {
    let mut set = match nvml.create_event_set() {
        Ok(set) => set,
        Err(error) => {
            tracing::debug!(%error, "NVML event sets not available; XID errors are not counted");
            return;
        }
    };
    let mut registered = 0;
    for (index, uuid) in gpus {
        let Ok(device) = nvml.device_by_index(*index) else {
            continue;
        };
        let supported = device
            .supported_event_types()
            .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
        if !supported {
            tracing::debug!(gpu = uuid, "GPU does not report XID events");
            continue;
        }
        set = match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(set) => set,
            Err(error) => {
                // NVML released the set with the failure: XID counting is off until the
                // GPUs change and a new watcher starts.
                tracing::warn!(gpu = uuid, error = %error.error, "cannot register for XID events");
                return;
            }
        };
        registered += 1;
    }
    if registered == 0 {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        match set.wait(WAIT_MS) {
            Ok(event) => {
                let code = match event.event_data {
                    Some(XidError::Value(code)) => code,
                    Some(XidError::Unknown) | None => UNKNOWN_XID,
                };
                let uuid = event.device.uuid().unwrap_or_default();
                tracing::warn!(gpu = %uuid, xid = code, "XID error reported by the driver");
                let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
                *counts.entry(uuid).or_default().entry(code).or_default() += 1;
            }
            Err(NvmlError::Timeout) => {}
            Err(error) => {
                tracing::warn!(%error, "waiting for XID events failed; retrying");
                thread::sleep(std::time::Duration::from_millis(u64::from(WAIT_MS)));
            }
        }
    }
}
