//! NCCL RAS answers to a `STATUS` query, parsed: the JSON of NCCL ≥ 2.28.7
//! (`rasDumpCommsToJSON` in src/ras/client_support.cc) and the text of 2.24 – 2.28.6, of
//! which only the lines naming ranks are read (the rest is laid out for people and changes
//! between releases).

use serde_json::Value;

use crate::snapshot::{RasCommunicator, RasFormat, RasMissingRank, RasRank};

/// What an answer holds, before the exporter stamps it with a pid and a time.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub nccl_version: String,
    pub format: RasFormat,
    pub communicators: Vec<RasCommunicator>,
    pub collection_seconds: f64,
    pub timeouts: u32,
}

/// The JSON document of a `STATUS` query after `SET FORMAT json`.
pub fn json(text: &str) -> Result<Parsed, String> {
    let document: Value = serde_json::from_str(text)
        .map_err(|e| format!("RAS answered JSON that does not parse: {e}"))?;
    let communicators = document
        .get("communicators")
        .and_then(Value::as_array)
        .ok_or("RAS's JSON has no \"communicators\" array")?;
    let ras = document.get("ras");
    Ok(Parsed {
        nccl_version: text_of(&document, "nccl_version"),
        format: RasFormat::Json,
        communicators: communicators.iter().map(communicator).collect(),
        collection_seconds: ras
            .and_then(|r| r.get("collection_time_sec"))
            .and_then(Value::as_f64)
            .unwrap_or(0.0),
        timeouts: ras.map_or(0, |r| number(r, "timeouts_count").unwrap_or(0) as u32),
    })
}

fn text_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn number(value: &Value, key: &str) -> Option<i64> {
    value.get(key).and_then(Value::as_i64)
}

/// RAS writes -1 for a pid it could not find, and a device index always.
fn pid(value: &Value) -> Option<u32> {
    number(value, "pid").and_then(|p| u32::try_from(p).ok())
}

fn device(value: &Value) -> Option<i32> {
    number(value, "nvml_dev").and_then(|d| i32::try_from(d).ok())
}

fn flag(value: Option<&Value>, key: &str) -> bool {
    value
        .and_then(|v| v.get(key))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn communicator(value: &Value) -> RasCommunicator {
    let list = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    RasCommunicator {
        hash: text_of(value, "hash"),
        size: number(value, "size").unwrap_or(0).max(0) as u32,
        ranks: list("ranks")
            .iter()
            .map(|r| {
                let status = r.get("status");
                RasRank {
                    rank: number(r, "rank").unwrap_or(0).max(0) as u32,
                    host: text_of(r, "host"),
                    pid: pid(r),
                    nvml_dev: device(r),
                    collective_counts: r
                        .get("collective_counts")
                        .and_then(Value::as_object)
                        .map(|counts| {
                            counts
                                .iter()
                                .filter_map(|(op, n)| Some((op.clone(), n.as_u64()?)))
                                .collect()
                        })
                        .unwrap_or_default(),
                    async_error: status.and_then(|s| number(s, "async_error")).unwrap_or(0) as i32,
                    aborted: flag(status, "abort_flag"),
                }
            })
            .collect(),
        missing: list("missing_ranks")
            .iter()
            .map(|r| RasMissingRank {
                rank: number(r, "rank").unwrap_or(0).max(0) as u32,
                host: text_of(r, "host"),
                pid: pid(r),
                nvml_dev: device(r),
                unresponsive: flag(r.get("status"), "unresponsive"),
                dead: flag(r.get("status"), "considered_dead"),
            })
            .collect(),
    }
}

/// The text answer: the version line, each `#g-c (hash) INCOMPLETE` block's missing ranks,
/// and each `MISMATCH` block's ranks by the operation count they launched up to.
pub fn text(text: &str) -> Parsed {
    let mut parsed = Parsed {
        nccl_version: String::new(),
        format: RasFormat::Text,
        communicators: Vec::new(),
        collection_seconds: 0.0,
        timeouts: 0,
    };
    // The block being read: its communicator's index, what it reports, and for a mismatch
    // the operation and the count of the group of ranks being listed.
    let mut block: Option<(usize, &str)> = None;
    let mut op = String::new();
    let mut group_count: Option<u64> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(rest) = line.strip_prefix("NCCL version ") {
            parsed.nccl_version = rest.split_whitespace().next().unwrap_or("").to_string();
        } else if let Some((hash, what)) = block_header(line) {
            let index = match parsed.communicators.iter().position(|c| c.hash == hash) {
                Some(i) => i,
                None => {
                    parsed.communicators.push(RasCommunicator {
                        hash,
                        ..RasCommunicator::default()
                    });
                    parsed.communicators.len() - 1
                }
            };
            block = Some((index, what));
            group_count = None;
        } else if trimmed.is_empty() || !line.starts_with("  ") {
            // The warnings' TIMEOUT heading: RAS gave up on some peer while gathering.
            if line == "TIMEOUT" {
                parsed.timeouts = parsed.timeouts.max(1);
            }
            block = None;
        } else if let Some((index, what)) = block {
            let communicator = &mut parsed.communicators[index];
            if let Some(name) = trimmed
                .strip_prefix("Communicator ranks have different ")
                .and_then(|r| r.strip_suffix(" operation counts"))
            {
                // Before NCCL 2.26 the counts were not split by operation.
                op = if name == "collective" {
                    "Collective"
                } else {
                    name
                }
                .to_string();
            } else if let Some(count) = group_header(trimmed) {
                group_count = Some(count);
            } else if let Some(line) = rank_line(trimmed) {
                if what == "INCOMPLETE" {
                    communicator.missing.push(RasMissingRank {
                        rank: line.rank,
                        host: line.host,
                        pid: line.pid,
                        nvml_dev: line.device,
                        unresponsive: true,
                        dead: false,
                    });
                } else if let Some(count) =
                    line.count.or(group_count).filter(|_| what == "MISMATCH")
                {
                    let rank = match communicator.ranks.iter().position(|r| r.rank == line.rank) {
                        Some(i) => &mut communicator.ranks[i],
                        None => {
                            communicator.ranks.push(RasRank {
                                rank: line.rank,
                                host: line.host,
                                pid: line.pid,
                                nvml_dev: line.device,
                                ..RasRank::default()
                            });
                            communicator.ranks.last_mut().expect("just pushed")
                        }
                    };
                    rank.collective_counts.push((op.clone(), count));
                }
            }
        }
    }
    parsed
}

/// `#0-0 (27a079b828ff1a75) MISMATCH` -> ("0x27a079b828ff1a75", "MISMATCH").
fn block_header(line: &str) -> Option<(String, &str)> {
    let rest = line.strip_prefix('#')?;
    let (_, rest) = rest.split_once(" (")?;
    let (hash, what) = rest.split_once(") ")?;
    u64::from_str_radix(hash, 16).ok()?;
    // JSON prints the hash as 0x%lx, text as %016lx.
    let digits = hash.trim_start_matches('0');
    Some((
        format!("0x{}", if digits.is_empty() { "0" } else { digits }),
        what.trim(),
    ))
}

/// `26 ranks have launched up to operation 6650` -> 6650; `… not launched any operations` -> 0.
fn group_header(line: &str) -> Option<u64> {
    let (_, rest) = line.split_once(" ranks have ")?;
    if rest.starts_with("not launched") {
        return Some(0);
    }
    rest.strip_prefix("launched up to operation ")?.parse().ok()
}

/// A rank line of a block.
struct RankLine {
    rank: u32,
    count: Option<u64>,
    device: Option<i32>,
    pid: Option<u32>,
    host: String,
}

/// `Rank 3 -- GPU 3 managed by process 483075 on node 172.16.64.210`, or with the rank's own
/// count: `Rank 1 has launched up to operation 6649 -- GPU 1 managed by process …`.
fn rank_line(line: &str) -> Option<RankLine> {
    let rest = line.strip_prefix("Rank ")?;
    let (head, tail) = rest.split_once(" -- ").unwrap_or((rest, ""));
    let (rank, own) = head.split_once(' ').unwrap_or((head, ""));
    let count = if own.contains("not launched any operations") {
        Some(0)
    } else {
        own.strip_prefix("has launched up to operation ")
            .and_then(|n| n.trim().parse().ok())
    };
    let device = tail
        .strip_prefix("GPU ")
        .and_then(|g| g.split_whitespace().next())
        .and_then(|g| g.parse().ok());
    let pid = tail
        .split_once("managed by process ")
        .and_then(|(_, p)| p.split_whitespace().next())
        .and_then(|p| p.parse().ok());
    let host = tail
        .rsplit_once(" on node ")
        .map(|(_, h)| h.trim().to_string())
        .unwrap_or_default();
    Some(RankLine {
        rank: rank.parse().ok()?,
        count,
        device,
        pid,
        host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample of NCCL's own documentation (docs/userguide/source/troubleshooting/ras.rst,
    /// NCCL 2.29.1): a two-rank communicator, rank 1 unresponsive.
    const DOCUMENTED_JSON: &str = r#"{
  "nccl_version": "2.29.1",
  "cuda_runtime_version": 13000,
  "cuda_driver_version": 13000,
  "timestamp": "2025-12-19 13:06:53",
  "communicators_count": 1,
  "communicators": [
    {
      "hash": "0xae94423cfbb2ef4a",
      "secondary_hash": "0xb7e7187447156001:0xb8242ed28a71381e",
      "size": 2,
      "ranks_count": 1,
      "missing_ranks_count": 1,
      "ranks": [
        {
          "rank": 0,
          "host": "172.16.64.245",
          "pid": 1524344,
          "cuda_dev": 0,
          "nvml_dev": 0,
          "status": {
            "init_state": 0,
            "async_error": 0,
            "finalize_called": false,
            "destroy_flag": false,
            "abort_flag": false
          },
          "collective_counts": {
            "Broadcast": 0,
            "Reduce": 0,
            "AllGather": 0,
            "ReduceScatter": 0,
            "AllReduce": 0
          }
        }
      ],
      "missing_ranks": [
        {
          "rank": 1,
          "host": "172.16.64.245",
          "pid": 1524345,
          "cuda_dev": 1,
          "nvml_dev": 1,
          "status": {
            "unresponsive": true,
            "considered_dead": false
          }
        }
      ]
    }
  ],
  "ras": {
    "collection_time_sec": 0.000,
    "timeouts_count": 0
  }
}"#;

    #[test]
    fn the_documented_json_names_the_missing_rank() {
        let parsed = json(DOCUMENTED_JSON).unwrap();
        assert_eq!(parsed.nccl_version, "2.29.1");
        let comm = &parsed.communicators[0];
        assert_eq!((comm.hash.as_str(), comm.size), ("0xae94423cfbb2ef4a", 2));
        assert_eq!(comm.ranks[0].pid, Some(1524344));
        assert_eq!(comm.ranks[0].count("AllReduce"), Some(0));
        assert_eq!(
            comm.missing,
            vec![RasMissingRank {
                rank: 1,
                host: "172.16.64.245".into(),
                pid: Some(1524345),
                nvml_dev: Some(1),
                unresponsive: true,
                dead: false,
            }]
        );
    }

    #[test]
    fn json_that_is_not_a_ras_answer_is_an_error() {
        assert!(json("{\"nccl_version\": \"2.29.1\"}").is_err());
        assert!(json("Job summary\n").is_err());
        // A pid RAS could not find is -1: no pid.
        let unknown = DOCUMENTED_JSON.replace("1524345", "-1");
        assert_eq!(
            json(&unknown).unwrap().communicators[0].missing[0].pid,
            None
        );
    }

    /// The text of NCCL 2.26 – 2.28 (the blocks of client_support.cc, as the documentation's
    /// samples show them): one rank missing, one behind by an operation.
    const TEXT: &str = "NCCL version 2.27.5 compiled with CUDA 12.9
CUDA runtime version 12090, driver version 12090

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      4          8            1         32       32

Communicators... (2.05s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       7-8        32        32   RUNNING  INCOMPLETE,MISMATCH

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 3487984 on node 172.16.64.213 managing GPU 5

#0-0 (0cf264af53edbe98) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 21 -- GPU 5 managed by process 3487984 on node 172.16.64.213

Warnings
========

TIMEOUT
  Encountered 2 communication timeouts while gathering communicator data

#0-0 (0cf264af53edbe98) MISMATCH
  Communicator ranks have different AllReduce operation counts
  30 ranks have launched up to operation 6650
  Rank 7 has launched up to operation 6649 -- GPU 7 managed by process 483079 on node 172.16.64.210

";

    #[test]
    fn the_text_names_the_missing_rank_and_the_one_behind() {
        let parsed = text(TEXT);
        assert_eq!(parsed.nccl_version, "2.27.5");
        assert_eq!(parsed.format, RasFormat::Text);
        assert_eq!(parsed.timeouts, 1);
        assert_eq!(parsed.communicators.len(), 1);
        let comm = &parsed.communicators[0];
        assert_eq!(comm.hash, "0xcf264af53edbe98");
        assert_eq!(comm.missing.len(), 1);
        assert_eq!(
            (
                comm.missing[0].rank,
                comm.missing[0].pid,
                comm.missing[0].nvml_dev
            ),
            (21, Some(3487984), Some(5))
        );
        assert_eq!(comm.ranks.len(), 1);
        assert_eq!(comm.ranks[0].rank, 7);
        assert_eq!(comm.ranks[0].count("AllReduce"), Some(6649));
        assert_eq!(comm.ranks[0].host, "172.16.64.210");
    }

    #[test]
    fn a_listed_group_gives_its_ranks_the_group_count() {
        let answer = "#0-0 (27a079b828ff1a75) MISMATCH
  Communicator ranks have different collective operation counts
  26 ranks have launched up to operation 6650
  6 ranks have launched up to operation 6649
  Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210
  Rank 2 -- GPU 2 managed by process 483074 on node 172.16.64.210
";
        let comm = &text(answer).communicators[0];
        assert_eq!(comm.ranks.len(), 2);
        assert!(comm
            .ranks
            .iter()
            .all(|r| r.count("Collective") == Some(6649)));
        // A healthy job's answer names no rank.
        assert!(
            text("NCCL version 2.24.3 compiled with CUDA 12.6\n\nJob summary\n")
                .communicators
                .is_empty()
        );
    }
}
