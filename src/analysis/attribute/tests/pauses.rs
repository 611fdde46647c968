//! The host's own pauses after a sync (a checkpoint written): its time, not the sync's.

use super::*;

#[test]
fn a_pause_after_the_sync_longer_than_its_hold_is_the_hosts() {
    // A sync every step held 76 % of the time, a checkpoint written on the host after every
    // twentieth (22 % of the samples in Python): from the samples alone, all of that Python
    // came after a sync drained the queue and is the sync's.
    let checkpointing = WindowFigures {
        busy: Some(0.77),
        stacks: stacks([0.0, 0.76, 0.0, 0.22, 0.02]),
        busiest_thread: Some(1.0),
        ..WindowFigures::default()
    };
    let lost = split(checkpointing.clone());
    assert!(lost.share(Cause::Kind(Kind::SyncStall)) > 0.2, "{lost:?}");
    // The probes timed each sync's hold and the host's time after it: 5 % of the time lay
    // within the holds (a loop without the syncs would have been that far ahead), the
    // checkpoints beyond them. The rest of the Python is the host's own.
    let lost = split(WindowFigures {
        after_sync_within_hold: Some(0.05),
        host_paused: Some(0.17),
        ..checkpointing
    });
    assert!(
        close(lost.share(Cause::Kind(Kind::SyncStall)), 0.05),
        "{lost:?}"
    );
    assert!(lost.share(Cause::Kind(Kind::HostBound)) > 0.15, "{lost:?}");
}
