//! Which ranks each GPU process's NCCL sends went to lately, from the sends' marks (each
//! carries its peer). A pipeline stage sends to the stages beside it, two at most; an
//! all-to-all (expert parallelism's token dispatch and combine, which PyTorch issues as one
//! group of a send and a receive for every rank of the group, itself included) sends to every
//! rank: how many peers tells the two apart where both are sends and receives to NCCL.

use std::collections::{HashMap, HashSet};

/// Per process, each peer its sends went to and when the last one went.
#[derive(Debug, Default)]
pub struct SendPeers {
    last_sent: HashMap<u32, HashMap<u32, u64>>,
}

impl SendPeers {
    /// Notes a send of process `pid` to `peer` at `ns`.
    pub fn note(&mut self, pid: u32, peer: u32, ns: u64) {
        let last = self
            .last_sent
            .entry(pid)
            .or_default()
            .entry(peer)
            .or_insert(ns);
        *last = (*last).max(ns);
    }

    /// How many peers `pid` sent to since `since_ns`; `None` where it sent to none. Peers
    /// not sent to since are forgotten.
    pub fn since(&mut self, pid: u32, since_ns: u64) -> Option<u32> {
        let peers = self.last_sent.get_mut(&pid)?;
        peers.retain(|_, last| *last >= since_ns);
        let count = peers.len() as u32;
        if count == 0 {
            self.last_sent.remove(&pid);
        }
        (count > 0).then_some(count)
    }

    /// Forgets the processes not in `keep`.
    pub fn retain(&mut self, keep: &HashSet<u32>) {
        self.last_sent.retain(|pid, _| keep.contains(pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peers_sent_to_lately_are_counted_per_process() {
        let mut peers = SendPeers::default();
        // A middle stage: the next stage (activations) and the one before (gradients).
        for (ns, peer) in [(10, 2), (20, 0), (30, 2), (40, 0)] {
            peers.note(7, peer, ns);
        }
        // A rank of a four-rank all-to-all: every rank, itself included.
        for peer in [0, 1, 2, 3] {
            peers.note(8, peer, 35);
        }
        assert_eq!(peers.since(7, 0), Some(2));
        assert_eq!(peers.since(8, 0), Some(4));
        assert_eq!(peers.since(9, 0), None);
        // Peer 2 last at 30: gone from a window that starts later, and forgotten.
        assert_eq!(peers.since(7, 35), Some(1));
        assert_eq!(peers.since(7, 0), Some(1));
        assert_eq!(peers.since(8, 36), None);
        assert_eq!(peers.since(8, 0), None);
        peers.retain(&HashSet::from([8]));
        assert_eq!(peers.since(7, 0), None);
    }
}
