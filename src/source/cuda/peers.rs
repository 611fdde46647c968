//! Which ranks a GPU process's NCCL sends went to lately, from the sends' marks (each carries
//! its peer). A pipeline stage sends to the stages beside it, two at most; an all-to-all
//! (expert parallelism's token dispatch and combine, which PyTorch issues as one group of a
//! send and a receive for every rank of the group, itself included) sends to every rank: how
//! many peers tells the two apart where both are sends and receives to NCCL.

use std::collections::HashSet;

use super::cadence::Call;

/// How many ranks the sends among `calls` went to; `None` where there is no send. Pure.
pub fn send_peers(calls: &[Call]) -> Option<u32> {
    let peers: HashSet<u32> = calls.iter().filter_map(|c| c.peer).collect();
    (!peers.is_empty()).then_some(peers.len() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::cuda::cadence::Role;

    fn sends(peers: &[u32]) -> Vec<Call> {
        let call = |ns: u64, peer: Option<u32>| Call {
            ns,
            tid: 1,
            kind: 0,
            once_a_step: false,
            role: Role::Work,
            peer,
        };
        let mut calls: Vec<Call> = peers.iter().map(|&p| call(10, Some(p))).collect();
        // A receive or a sync carries no peer.
        calls.push(call(20, None));
        calls
    }

    #[test]
    fn the_ranks_sent_to_are_counted_once_each() {
        // A middle stage: the next stage and the one before, many times each.
        assert_eq!(send_peers(&sends(&[2, 0, 2, 0, 2])), Some(2));
        // A rank of a four-rank all-to-all: every rank, itself included.
        assert_eq!(send_peers(&sends(&[0, 1, 2, 3])), Some(4));
        // No send.
        assert_eq!(send_peers(&sends(&[])), None);
    }
}
