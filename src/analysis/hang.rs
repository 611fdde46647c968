//! A hung collective: a rank whose main thread sits in one collective, tick after tick, while
//! its GPU spins in it and moves no data — or, as real PyTorch shows it (NCCL enqueues and
//! returns at once), whose thread has sat in one CUDA driver wait ever since it issued a
//! collective, the GPU spinning the same way; or whose thread has sat in NCCL's creation of
//! a communicator, waiting for a rank that never calls it, the GPU idle. A rank whose peer on this node works meanwhile
//! (a barrier while rank 0 writes a checkpoint) waits for it: that is no hang, and the hang's
//! record says whom it waits for. Where NCCL's RAS service answered for the process (asked
//! while a hang is tracked), the record carries what it says of the job's ranks (`ras.rs`).

use super::peers::SPIN_SM_ACTIVITY_MAX;
use super::ras;
use super::score::IDLE_BUSY;
use super::{GpuObservation, Hang};
use crate::config::Thresholds;
use crate::snapshot::Activity;

/// Recent stack samples from which a tick is judged by them (else by the whole window's).
pub const RECENT_SAMPLES_MIN: u32 = 4;

/// PCIe traffic below which a GPU in a collective moves no data: a hung NCCL kernel spins
/// without traffic (a few MB/s of driver housekeeping), while even a 10 GbE all-reduce moves
/// about a GB/s through the GPU's link.
const HANG_PCIE_BYTES_MAX: f64 = 50e6;

/// Since when a GPU's main thread has sat in one collective with the GPU busy, and the
/// collective's frame.
pub type Stuck = Option<(f64, String)>;

/// Whether the GPU's main thread still sits in the collective it sat in on the previous
/// tick (`stuck`, updated): every recent stack sample there (a rank that makes progress
/// leaves it between steps), the same frame, the GPU busy (NCCL's kernels spin while they
/// wait) and, where the driver reports it, no data crossing its PCIe link (a slow collective
/// that moves gradients to the NIC is progress, however long it takes).
pub fn track(stuck: &mut Stuck, now: &GpuObservation, at: f64, t: &Thresholds) -> Option<Hang> {
    let observed = in_driver(now, t)
        .or_else(|| creating_communicator(now))
        .or_else(|| in_unseen_call(now, t));
    let hang = match observed {
        Some(hang) => {
            *stuck = None;
            hang
        }
        None => in_frame(stuck, now, at, t)?,
    };
    Some(Hang {
        waiting_for: now.working_peer.clone(),
        pid: now.main_pid,
        peers: now.ras.as_ref().map(|answer| {
            let point_to_point = now
                .driver_wait
                .and_then(|w| w.after)
                .is_some_and(|op| op.is_point_to_point());
            ras::evidence(answer, point_to_point)
        }),
        ..hang
    })
}

/// The main thread in one collective's frame, tick after tick: its GPU busy (NCCL's kernel
/// spinning for a peer) with no data crossing its PCIe link, or its GPU idle with the thread
/// in no CUDA driver wait (the call itself has not returned and nothing reached the GPU: NCCL
/// creating its communicator at the first collective, or a host-side collective, waits for a
/// rank; the probes name the former where they saw the call begin).
fn in_frame(stuck: &mut Stuck, now: &GpuObservation, at: f64, t: &Thresholds) -> Option<Hang> {
    // The SMs are not asked: the stacks already place the thread in the collective.
    let spinning = busy_without_transfers(now, t);
    let host_side = now.busy.is_some_and(|b| b < IDLE_BUSY) && now.driver_wait.is_none();
    let held = now.stacks.as_ref().filter(|s| {
        s.recent_samples >= RECENT_SAMPLES_MIN
            && s.recent_shares[Activity::Collective] >= 1.0 - 1e-9
            && (spinning || host_side)
    });
    let Some(stacks) = held else {
        *stuck = None;
        return None;
    };
    let frame = stacks
        .top_frames
        .iter()
        .find(|f| f.activity == Activity::Collective)
        .map(|f| format!("{} at {}", f.function, f.location))
        .unwrap_or_default();
    let entry = stuck.get_or_insert((at, frame.clone()));
    if entry.1 != frame {
        *entry = (at, frame.clone());
    }
    Some(Hang {
        seconds: at - entry.0,
        frame,
        host_side: !spinning,
        ..Hang::default()
    })
}

/// A thread of the main GPU process inside NCCL's creation of a communicator
/// (`ncclCommInitRank*`, `ncclCommSplit`): it returns once every rank of the communicator has
/// called it (NCCL's bootstrap), so a rank that never comes (crashed or stuck before its first
/// collective, a pod still pending, ranks that disagree on the world size) holds the others
/// there, their hosts asleep and their GPUs idle: nothing is issued yet to spin. PyTorch
/// creates the communicator at the first collective (a DDP model's broadcast of its
/// parameters) unless `init_process_group` was given a `device_id`. Observed without the
/// stacks; a call entered before the probes were attached is not seen.
fn creating_communicator(now: &GpuObservation) -> Option<Hang> {
    Some(Hang {
        seconds: now.creating_communicator?,
        frame: "ncclCommInitRank (NCCL creates the communicator: the call returns once every \
                rank has made it; the host waits inside NCCL)"
            .to_string(),
        host_side: true,
        ..Hang::default()
    })
}

/// The main GPU process has made not one call the probes saw since they were attached to its
/// driver, while its GPU is busy with its SMs nearly empty where GPM reads them, no data
/// crossing its PCIe link, and no other process works on it: it is stuck inside a call it
/// began before (a rank's first collectives and the sync after them, within a second of its
/// first allocation), waiting for a GPU that spins. A training process makes a probed call
/// every step (a sync, a copy, a collective, a launch the launch windows count).
fn in_unseen_call(now: &GpuObservation, t: &Thresholds) -> Option<Hang> {
    let seconds = now.probes_silent?;
    let spinning = gpu_spins(now, t) && now.working_others.is_empty();
    spinning.then(|| Hang {
        seconds,
        frame: "a CUDA or NCCL call begun before the probes were attached (none of the \
                process's calls seen since; the GPU spinning: a collective waiting for a peer)"
            .to_string(),
        ..Hang::default()
    })
}

/// A thread of the main GPU process inside one CUDA driver wait since after it issued an NCCL
/// collective (the probes time the wait from its entry), while the GPU is busy with its SMs
/// nearly empty where GPM reads them, and no data crosses its PCIe link: the wait is for the
/// collective's kernel, spinning for a peer. Observed without the stacks. A wait after no
/// collective the probes saw is not tied to one (a long kernel of few blocks looks the same).
fn in_driver(now: &GpuObservation, t: &Thresholds) -> Option<Hang> {
    let wait = now.driver_wait?;
    let op = wait.after?;
    let spinning = gpu_spins(now, t);
    let what = if op.is_point_to_point() {
        "NCCL point-to-point: a send waits for its peer's receive, a receive for its send"
    } else {
        "NCCL"
    };
    spinning.then(|| Hang {
        seconds: wait.seconds,
        frame: format!(
            "{} ({what}; the host waits inside the CUDA driver)",
            op.name()
        ),
        ..Hang::default()
    })
}

/// The GPU as an NCCL kernel waiting for a peer keeps it: busy, its SMs nearly empty where
/// GPM reads them, no data crossing its PCIe link.
fn gpu_spins(now: &GpuObservation, t: &Thresholds) -> bool {
    busy_without_transfers(now, t) && now.sm_activity.is_none_or(|s| s < SPIN_SM_ACTIVITY_MAX)
}

/// The GPU busy with no data crossing its PCIe link (where the link's counters answer).
fn busy_without_transfers(now: &GpuObservation, t: &Thresholds) -> bool {
    now.busy.is_some_and(|b| b >= t.gpu_busy_above)
        && now
            .pcie_bytes_per_second
            .is_none_or(|bytes| bytes < HANG_PCIE_BYTES_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Collective, DriverWait};

    fn observed(busy: f64, sm: f64) -> GpuObservation {
        GpuObservation {
            busy: Some(busy),
            sm_activity: Some(sm),
            ..GpuObservation::default()
        }
    }

    #[test]
    fn a_thread_creating_a_communicator_is_a_hang_with_the_gpu_idle_and_no_stacks() {
        let t = Thresholds::default();
        let mut stuck = None;
        let waiting = GpuObservation {
            creating_communicator: Some(150.0),
            ..observed(0.0, 0.0)
        };
        let hang = track(&mut stuck, &waiting, 200.0, &t).unwrap();
        assert!(hang.host_side);
        assert_eq!(hang.seconds, 150.0);
        assert!(hang.frame.starts_with("ncclCommInitRank"));
        // Not creating one, idle, no collective outstanding: nothing is tracked.
        assert_eq!(track(&mut stuck, &observed(0.0, 0.0), 201.0, &t), None);
    }

    #[test]
    fn a_collective_spinning_on_the_gpu_is_named_before_a_communicator_being_created() {
        let t = Thresholds::default();
        // A second communicator created (a subgroup's split) while the first one's
        // collective spins: the spinning collective is what the host waits for.
        let both = GpuObservation {
            creating_communicator: Some(5.0),
            driver_wait: Some(DriverWait {
                seconds: 130.0,
                after: Some(Collective::AllReduce),
            }),
            ..observed(1.0, 0.05)
        };
        let hang = track(&mut None, &both, 200.0, &t).unwrap();
        assert!(!hang.host_side);
        assert_eq!(hang.seconds, 130.0);
    }

    #[test]
    fn a_main_thread_held_in_a_collective_frame_with_the_gpu_idle_is_a_host_side_hang() {
        use crate::snapshot::{FrameShare, PerActivity, ProcessStacks};
        let t = Thresholds::default();
        let mut stacks = ProcessStacks::sampled(
            40,
            PerActivity::default().with_share(Activity::Collective, 1.0),
        );
        stacks.top_frames.push(FrameShare {
            function: "broadcast".into(),
            location: "torch/distributed/distributed_c10d.py:2601".into(),
            activity: Activity::Collective,
            share: 1.0,
        });
        // The probes missed the call's entry (it began before they were attached).
        let waiting = GpuObservation {
            stacks: Some(stacks),
            ..observed(0.0, 0.0)
        };
        let mut stuck = None;
        track(&mut stuck, &waiting, 100.0, &t).unwrap();
        let hang = track(&mut stuck, &waiting, 250.0, &t).unwrap();
        assert!(hang.host_side);
        assert_eq!(hang.seconds, 150.0);
        assert!(hang.frame.starts_with("broadcast at"), "{}", hang.frame);
        // Inside a CUDA driver wait instead (a sync the GPU has not answered, no collective
        // before it): not the collective's call, and not a spin either.
        let syncing = GpuObservation {
            driver_wait: Some(DriverWait {
                seconds: 3.0,
                after: None,
            }),
            ..waiting.clone()
        };
        assert_eq!(track(&mut stuck, &syncing, 251.0, &t), None);
        // Some work on the GPU between idle and busy: neither a spin nor a host-side wait.
        let working = GpuObservation {
            busy: Some(0.5),
            ..waiting
        };
        assert_eq!(track(&mut stuck, &working, 252.0, &t), None);
    }

    #[test]
    fn a_process_silent_since_its_probes_came_while_its_gpu_spins_is_hung() {
        let t = Thresholds::default();
        let silent = GpuObservation {
            probes_silent: Some(130.0),
            ..observed(1.0, 0.05)
        };
        let hang = track(&mut None, &silent, 200.0, &t).unwrap();
        assert_eq!(hang.seconds, 130.0);
        assert!(hang.frame.contains("before the probes were attached"));
        // Silent beside another process's work (a job holding memory, another one working),
        // or on an idle GPU (a process holding the device): no hang of its own.
        let beside = GpuObservation {
            working_others: vec!["pid 7 (python3)".into()],
            ..silent.clone()
        };
        assert_eq!(track(&mut None, &beside, 200.0, &t), None);
        let idle = GpuObservation {
            probes_silent: Some(130.0),
            ..observed(0.0, 0.0)
        };
        assert_eq!(track(&mut None, &idle, 200.0, &t), None);
    }
}
