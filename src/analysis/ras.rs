//! What NCCL's RAS answer says of a hang (pure): the ranks that do not answer, and the ranks
//! that never reached the collective the others wait in (fewer launched of its operation).
//! RAS's pids are the job's (a container's pid namespace), so every communicator of the
//! answer counts: RAS reports the job's, not one process's.

use crate::snapshot::{ProcessRas, RasCommunicator, RasEvidence, RasFormat, RasRank};

/// Ranks named per communicator and kind before the rest are counted.
const NAMED_MAX: usize = 4;

/// The hang's evidence from the process's last RAS answer; `point_to_point`: the operation
/// the rank waits in is a send or receive, which RAS does not count.
pub fn evidence(ras: &ProcessRas, point_to_point: bool) -> RasEvidence {
    let report = match &ras.answer {
        Ok(report) => report,
        Err(why) => {
            return RasEvidence {
                summary: format!("NCCL's RAS service not read: {why}"),
                ..RasEvidence::default()
            }
        }
    };
    let version = match report.nccl_version.as_str() {
        "" => "NCCL".to_string(),
        v => format!("NCCL {v}"),
    };
    let (mut missing_ranks, mut ranks_behind) = (0, 0);
    let mut said = Vec::new();
    for comm in &report.communicators {
        let behind = behind(comm, report.format);
        missing_ranks += comm.missing.len() as u32;
        ranks_behind += behind.len() as u32;
        let mut parts: Vec<String> = named(comm.missing.iter().map(|m| {
            let state = if m.dead { "dead" } else { "does not answer" };
            format!(
                "rank {} ({}) {state}",
                m.rank,
                whose(m.pid, &m.host, m.nvml_dev)
            )
        }));
        parts.extend(named(comm.ranks.iter().filter_map(failed)));
        parts.extend(named(behind.into_iter()));
        if !parts.is_empty() {
            said.push(format!(
                "communicator {} of {} ranks: {}",
                comm.hash,
                comm.size,
                parts.join("; ")
            ));
        }
    }
    let summary = if said.is_empty() && point_to_point {
        format!(
            "{version} RAS: every rank of the job's {} communicator(s) answers and launched as many collectives; RAS counts no point-to-point transfers, so the peer of the send or receive this rank waits in is not named (in a pipeline, the next or previous stage's rank)",
            report.communicators.len()
        )
    } else if said.is_empty() {
        format!(
            "{version} RAS: every rank of the job's {} communicator(s) answers and launched as many collectives; the collective itself does not complete (its transfer: the network or a GPU)",
            report.communicators.len()
        )
    } else {
        format!("{version} RAS, {}", said.join(" / "))
    };
    RasEvidence {
        missing_ranks,
        ranks_behind,
        summary,
        answered: true,
    }
}

/// Each rank that launched fewer of some operation than the most any rank of the
/// communicator launched, described. A text answer lists only the ranks that stand apart
/// from the rest (nearly always the ones behind), with their own counts.
fn behind(comm: &RasCommunicator, format: RasFormat) -> Vec<String> {
    let mut ops: Vec<&str> = comm
        .ranks
        .iter()
        .flat_map(|r| r.collective_counts.iter().map(|(op, _)| op.as_str()))
        .collect();
    ops.sort_unstable();
    ops.dedup();
    let mut found: Vec<(u32, String)> = Vec::new();
    for op in ops {
        let most = comm
            .ranks
            .iter()
            .filter_map(|r| r.count(op))
            .max()
            .unwrap_or(0);
        for rank in &comm.ranks {
            let Some(count) = rank.count(op) else {
                continue;
            };
            let text = match format {
                RasFormat::Json if count < most => format!(
                    "rank {} ({}) launched {op} up to {count}, others up to {most}",
                    rank.rank,
                    whose(rank.pid, &rank.host, rank.nvml_dev)
                ),
                RasFormat::Text => format!(
                    "rank {} ({}) stands apart, {op} launched up to {count}",
                    rank.rank,
                    whose(rank.pid, &rank.host, rank.nvml_dev)
                ),
                RasFormat::Json => continue,
            };
            // A rank behind on several operations is one rank behind.
            if !found.iter().any(|(r, _)| *r == rank.rank) {
                found.push((rank.rank, text));
            }
        }
    }
    found.into_iter().map(|(_, text)| text).collect()
}

/// A rank that aborted its communicator (its watchdog's timeout, an error it tore itself down
/// for) or holds an asynchronous error, described: often the first to fail, whom the others
/// then wait for.
fn failed(rank: &RasRank) -> Option<String> {
    let who = whose(rank.pid, &rank.host, rank.nvml_dev);
    let error = match rank.async_error {
        0 => None,
        1 => Some("unhandled CUDA error"),
        2 => Some("system error"),
        3 => Some("internal error"),
        4 => Some("invalid argument"),
        5 => Some("invalid usage"),
        6 => Some("remote error: a peer exited or the network failed"),
        7 => Some("operation in progress"),
        _ => Some("unknown error"),
    };
    match (rank.aborted, error) {
        (false, None) => None,
        (true, None) => Some(format!(
            "rank {} ({who}) aborted its communicator",
            rank.rank
        )),
        (aborted, Some(error)) => Some(format!(
            "rank {} ({who}) {}NCCL error {} ({error})",
            rank.rank,
            if aborted { "aborted on " } else { "holds " },
            rank.async_error
        )),
    }
}

fn whose(pid: Option<u32>, host: &str, device: Option<i32>) -> String {
    let mut parts = Vec::new();
    if let Some(pid) = pid {
        parts.push(format!("pid {pid}"));
    }
    if !host.is_empty() {
        parts.push(format!("on {host}"));
    }
    if let Some(device) = device {
        parts.push(format!("GPU {device}"));
    }
    match parts.is_empty() {
        true => "unknown process".into(),
        false => parts.join(" "),
    }
}

/// The first few, and how many more.
fn named(all: impl Iterator<Item = String>) -> Vec<String> {
    let all: Vec<String> = all.collect();
    let mut shown: Vec<String> = all.iter().take(NAMED_MAX).cloned().collect();
    if all.len() > NAMED_MAX {
        shown.push(format!("{} more", all.len() - NAMED_MAX));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{RasMissingRank, RasReport};

    fn rank(rank: u32, all_reduce: u64) -> RasRank {
        RasRank {
            rank,
            host: "10.0.0.7".into(),
            pid: Some(4000 + rank),
            nvml_dev: Some(rank as i32),
            collective_counts: vec![("AllReduce".into(), all_reduce), ("Broadcast".into(), 1)],
            ..RasRank::default()
        }
    }

    fn answer(communicators: Vec<RasCommunicator>) -> ProcessRas {
        ProcessRas {
            pid: 77,
            answer: Ok(RasReport {
                nccl_version: "2.29.3".into(),
                format: RasFormat::Json,
                communicators,
                collection_seconds: 0.0,
                timeouts: 0,
            }),
        }
    }

    #[test]
    fn a_rank_that_never_reached_the_collective_is_named() {
        let comm = RasCommunicator {
            hash: "0xabc".into(),
            size: 4,
            ranks: vec![rank(0, 49), rank(1, 48), rank(2, 49), rank(3, 49)],
            missing: vec![],
        };
        let evidence = evidence(&answer(vec![comm]), false);
        assert_eq!((evidence.missing_ranks, evidence.ranks_behind), (0, 1));
        assert!(
            evidence.summary.contains(
                "rank 1 (pid 4001 on 10.0.0.7 GPU 1) launched AllReduce up to 48, others up to 49"
            ),
            "{}",
            evidence.summary
        );
        assert!(evidence.answered);
    }

    #[test]
    fn a_rank_that_does_not_answer_is_named_and_dead_after_a_minute() {
        let comm = RasCommunicator {
            hash: "0xabc".into(),
            size: 2,
            ranks: vec![rank(0, 12)],
            missing: vec![RasMissingRank {
                rank: 1,
                pid: Some(4001),
                unresponsive: true,
                dead: true,
                ..RasMissingRank::default()
            }],
        };
        let evidence = evidence(&answer(vec![comm]), false);
        assert_eq!((evidence.missing_ranks, evidence.ranks_behind), (1, 0));
        assert!(
            evidence.summary.contains("rank 1 (pid 4001) dead"),
            "{}",
            evidence.summary
        );
    }

    #[test]
    fn a_rank_that_aborted_or_holds_an_error_is_named() {
        let aborted = RasRank {
            aborted: true,
            ..rank(1, 12)
        };
        let erred = RasRank {
            async_error: 6,
            ..rank(2, 12)
        };
        let comm = RasCommunicator {
            hash: "0xabc".into(),
            size: 3,
            ranks: vec![rank(0, 12), aborted, erred],
            missing: vec![],
        };
        let summary = evidence(&answer(vec![comm]), false).summary;
        assert!(
            summary.contains("rank 1 (pid 4001 on 10.0.0.7 GPU 1) aborted its communicator")
                && summary.contains(
                    "rank 2 (pid 4002 on 10.0.0.7 GPU 2) holds NCCL error 6 (remote error"
                ),
            "{summary}"
        );
        assert!(!summary.contains("rank 0"), "{summary}");
    }

    #[test]
    fn a_job_whose_ranks_all_arrived_hangs_in_the_collective_itself() {
        let comm = RasCommunicator {
            hash: "0xabc".into(),
            size: 2,
            ranks: vec![rank(0, 12), rank(1, 12)],
            missing: vec![],
        };
        let evidence = evidence(&answer(vec![comm.clone()]), false);
        assert_eq!((evidence.missing_ranks, evidence.ranks_behind), (0, 0));
        assert!(evidence
            .summary
            .contains("the collective itself does not complete"));
        // A pipeline stage waiting in a send or receive: RAS's equal collective counts say
        // nothing of its peer, and the summary does not blame the collective.
        let p2p = super::evidence(&answer(vec![comm]), true).summary;
        assert!(
            p2p.contains("RAS counts no point-to-point transfers"),
            "{p2p}"
        );
        assert!(!p2p.contains("the collective itself"), "{p2p}");
        let refused =
            evidence_of_error("entering process 77's network namespace needs CAP_SYS_ADMIN");
        assert!(!refused.answered);
        assert!(refused.summary.contains("CAP_SYS_ADMIN"));
    }

    fn evidence_of_error(why: &str) -> RasEvidence {
        evidence(
            &ProcessRas {
                pid: 77,
                answer: Err(why.into()),
            },
            false,
        )
    }

    #[test]
    fn many_ranks_behind_are_counted_not_all_named() {
        let mut ranks: Vec<RasRank> = (0..10).map(|r| rank(r, 5)).collect();
        ranks.push(rank(10, 6));
        let comm = RasCommunicator {
            hash: "0xabc".into(),
            size: 11,
            ranks,
            missing: vec![],
        };
        let evidence = evidence(&answer(vec![comm]), false);
        assert_eq!(evidence.ranks_behind, 10);
        assert!(evidence.summary.contains("6 more"), "{}", evidence.summary);
    }
}
