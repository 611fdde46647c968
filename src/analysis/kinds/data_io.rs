//! **data_io**: storage cannot feed the input pipeline. The GPU starves while the loop waits
//! for input that is being read, not computed.
//!
//! Evidence: the GPU below `gpu_starved_below`, with any of the busiest disk's utilization,
//! host iowait, PSI io, workers blocked on block I/O or in D state; or, seen in the stacks,
//! the main thread waiting for workers that are not computing (network storage, one slow
//! file: no disk figure shows it); or input over the network (a slow NFS mount, the job's
//! ingress on a saturated receive side). The processes outside the job that read or write
//! the most are named beside it. Observed, its cost is the idle time the loop spent waiting
//! for its loader while the workers read, were blocked or slept; the input's source is local
//! storage when the workers are blocked at least as long as they sleep and the node's disks
//! show the load, else remote.
//!
//! Near misses: workers that compute while the loop waits are data_cpu; a loop without
//! workers that computes its own samples is host_bound; a loader waiting for CPUs others
//! hold is contention; a busy disk while the GPU is busy is nothing.

use super::rule::{loader_wait, name_culprits, remote_input, starved, Rule};
use super::{waits_for_loader, Advice, KindSpec, Phase};
use crate::analysis::score::{high, high_ratio};
use crate::analysis::text::per_second;
use crate::analysis::{GpuVerdict, InputSource, Kind, KindScore, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Signal;

pub(super) const SPEC: KindSpec = KindSpec {
    phase: Phase::Idle {
        premise: waits_for_loader,
    },
    on_idle_gpu: false,
    wants_culprits: true,
    first: false,
    score,
    advice,
};

fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gate = starved(&mut rule, w, t);
    let alternatives = [
        rule.alternative(Signal::DiskUtil, w.disk_util, t.disk_util_high, high_ratio),
        rule.alternative(Signal::Iowait, w.iowait, t.iowait_high, high_ratio),
        rule.alternative(Signal::PsiIo, w.psi_io, t.psi_io_high, high_ratio),
        rule.alternative(
            Signal::WorkersBlkio,
            w.workers_blkio,
            t.workers_blkio_high,
            high,
        ),
        // A worker in D state on average, against one worker: a plain count.
        rule.alternative(Signal::WorkersInIoWait, w.workers_disk_wait, 1.0, high),
        // Seen in its stacks, a loop waiting for workers that are not computing waits for
        // their data, even when no disk figure shows it (network storage, one slow file).
        loader_wait(&mut rule, w, t, false),
        // Input over the network: a slow NFS mount, the receive side of a link saturated.
        remote_input(&mut rule, w, t),
    ];
    // Who else reads or writes: named with the strength of the storage figures it explains.
    let storage = alternatives[..3]
        .iter()
        .flatten()
        .fold(0.0, |a: f64, b| a.max(*b));
    name_culprits(
        &mut rule,
        Signal::BusiestDiskProcesses,
        w,
        storage,
        |c| &c.by_disk,
        |p| {
            format!(
                "read {}, wrote {}",
                per_second(p.read_bytes_per_second.unwrap_or(0.0)),
                per_second(p.write_bytes_per_second.unwrap_or(0.0))
            )
        },
    );
    rule.any(Kind::DataIo, gate, &alternatives)
}

fn advice(verdict: &GpuVerdict) -> Advice {
    let remote = verdict
        .lost
        .as_ref()
        .is_some_and(|l| l.input == Some(InputSource::Remote));
    if remote {
        return Advice {
            explanation: "The GPU waits for input data that the loader workers fetch from a remote source (object store, network or FUSE filesystem, a feature service): they sleep waiting for it while the local disks are quiet.",
            next_steps: &[
                "Cache the data set on local NVMe or in memory (a node-local cache in front of the object store or NFS).",
                "Pack small samples into large shards (WebDataset, TFRecord, Parquet) so each request carries many samples.",
                "Hide the latency: more DataLoader workers and a larger prefetch_factor, or asynchronous/concurrent fetches inside each worker.",
            ],
        };
    }
    Advice {
        explanation: "The GPU waits for input data: storage cannot deliver it fast enough (disk saturated, I/O stalls, loader workers blocked on reads).",
        next_steps: &[
            "Move the data set to faster local storage (NVMe) or cache it in memory.",
            "Use larger, sequentially read shards (WebDataset, TFRecord) instead of many small files.",
            "Increase DataLoader num_workers and prefetch_factor so reads overlap with compute.",
        ],
    }
}
