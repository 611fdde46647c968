//! When each GPU process last issued an NCCL collective, from its counts read by read: a hang
//! is collectives issued and none completing, so how long ago the last one went out matters.

use std::collections::HashMap;

use crate::snapshot::{Collective, ProcessCuda};

/// The last collective `process` issued and how long ago, from its counts: `seen` keeps per
/// process the counts and time of the last read, and the last collective that grew with the
/// time of the read before it grew (it was issued after that read: "how long ago" is at most
/// one read too long, so that a wait begun just after it, in the same interval, is tied to
/// it).
pub fn last_collective(
    seen: &mut HashMap<u32, CollectivesSeen>,
    process: &ProcessCuda,
    now: f64,
) -> Option<(Collective, f64)> {
    let counts = process.totals.collectives;
    let (before, read_at, last) = seen.entry(process.pid).or_insert((counts, now, None));
    // The operation that grew the most since the last read (issued last, as far as a read a
    // second tells); on the first read, the most issued.
    let grown = Collective::ALL
        .into_iter()
        .map(|op| (op, counts[op as usize].saturating_sub(before[op as usize])))
        .filter(|(_, n)| *n > 0)
        .max_by_key(|(_, n)| *n);
    if let Some((op, _)) = grown {
        *last = Some((op, *read_at));
    } else if last.is_none() {
        let most = Collective::ALL
            .into_iter()
            .max_by_key(|op| counts[*op as usize]);
        *last = most
            .filter(|op| counts[*op as usize] > 0)
            .map(|op| (op, now));
    }
    *before = counts;
    *read_at = now;
    last.map(|(op, at)| (op, now - at))
}

/// A process's collective counts and the time of the last read, and the last collective it
/// issued with the time of the read before it.
pub type CollectivesSeen = ([u64; Collective::ALL.len()], f64, Option<(Collective, f64)>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_collective_is_the_one_that_grew_and_it_ages_while_none_does() {
        let mut seen = HashMap::new();
        let mut process = ProcessCuda {
            pid: 7,
            ..ProcessCuda::default()
        };
        // Nothing issued yet: none.
        assert_eq!(last_collective(&mut seen, &process, 10.0), None);
        // Four all-reduces and one all-gather since: the all-reduce, issued after the read
        // before (at most a read ago).
        process.totals.collectives = [4, 0, 1, 0, 0, 0, 0];
        assert_eq!(
            last_collective(&mut seen, &process, 11.0),
            Some((Collective::AllReduce, 1.0))
        );
        // Then only an all-gather; then nothing for 30 s (a hang): it ages.
        process.totals.collectives = [4, 0, 2, 0, 0, 0, 0];
        assert_eq!(
            last_collective(&mut seen, &process, 12.0),
            Some((Collective::AllGather, 1.0))
        );
        assert_eq!(
            last_collective(&mut seen, &process, 42.0),
            Some((Collective::AllGather, 31.0))
        );
        // First seen with collectives already counted: the most issued, as of that read.
        let mut fresh = HashMap::new();
        process.totals.collectives = [9, 0, 2, 0, 0, 0, 0];
        assert_eq!(
            last_collective(&mut fresh, &process, 5.0),
            Some((Collective::AllReduce, 0.0))
        );
    }
}
