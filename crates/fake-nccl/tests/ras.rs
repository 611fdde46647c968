//! The stub's RAS service (NCCL 2.28.9 by default: JSON), as NCCL's own answers: the protocol's
//! replies and errors, every rank's collectives by function, and a rank whose process never
//! answers listed missing after one leg timeout, then at once.

mod common;

use std::time::Instant;

use common::ras::{join_two, listen_on_a_free_port, RasClient};
use common::*;
use fake_nccl::shared::Shared;
use fake_nccl::*;
use serde_json::Value;

fn communicators(answer: &str) -> Vec<Value> {
    let document: Value = serde_json::from_str(answer).expect(answer);
    assert_eq!(document["nccl_version"], "2.28.9");
    document["communicators"].as_array().unwrap().clone()
}

#[test]
fn ras_answers_each_ranks_collectives_and_names_a_rank_that_does_not_answer() {
    let address = listen_on_a_free_port();
    cuda();
    let comms = join_two(unique_id(), [2, 3]);
    // Rank 0 issues three all-reduces, rank 1 two: rank 0's third spins for rank 1.
    for _ in 0..3 {
        assert_eq!(all_reduce(comms[0], 256), SUCCESS);
    }
    for _ in 0..2 {
        assert_eq!(all_reduce(comms[1], 256), SUCCESS);
    }
    std::thread::sleep(std::time::Duration::from_millis(700));

    let mut client = RasClient::connect(&address);
    assert_eq!(client.ask("CLIENT PROTOCOL 2"), "SERVER PROTOCOL 2\n");
    assert_eq!(
        client.ask("TIMEOUT soon"),
        "ERROR: Invalid timeout value soon\n"
    );
    assert_eq!(client.ask("timeout 1"), "OK\n");
    assert_eq!(
        client.ask("SET FORMAT yaml"),
        "ERROR: Invalid format yaml\n"
    );
    assert_eq!(client.ask("HELLO"), "ERROR: Unknown command HELLO\n");
    assert_eq!(client.ask("SET FORMAT json"), "OK\n");
    let comms_seen = communicators(&client.status());
    assert_eq!(comms_seen.len(), 1);
    let comm = &comms_seen[0];
    assert_eq!(
        (comm["size"].as_u64(), comm["missing_ranks_count"].as_u64()),
        (Some(2), Some(0))
    );
    assert!(comm["hash"].as_str().unwrap().starts_with("0x"));
    let all_reduces: Vec<u64> = comm["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["collective_counts"]["AllReduce"].as_u64().unwrap())
        .collect();
    assert_eq!(all_reduces, [3, 2]);
    let ranks = comm["ranks"].as_array().unwrap();
    assert_eq!(ranks[1]["nvml_dev"], 3);
    assert_eq!(ranks[1]["pid"], std::process::id());

    // A second communicator whose rank 1 joined from a process that never answers RAS.
    let id = unique_id();
    let text: Vec<u8> = id
        .internal
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    let path = std::str::from_utf8(&text)
        .unwrap()
        .strip_prefix("fake-nccl:")
        .unwrap()
        .to_string();
    let silent = Shared::open(std::path::Path::new(&path)).unwrap();
    assert!(silent.agree_ranks(2));
    silent.join(1, 0x3fff_fff0, 5, 100_000_000_000);
    let lone = join(id, 0, 4);
    let ask = || {
        let mut client = RasClient::connect(&address);
        client.ask("CLIENT PROTOCOL 2");
        client.ask("TIMEOUT 1");
        client.ask("SET FORMAT json");
        let started = Instant::now();
        let answer = client.status();
        (answer, started.elapsed().as_secs_f64())
    };
    // RAS waits out its leg timeout on the silent peer once, then routes around it.
    let (first, waited) = ask();
    let (second, quick) = ask();
    assert!(waited >= 1.0 && quick < 0.5, "{waited} s, then {quick} s");
    let document: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(document["ras"]["timeouts_count"], 1);
    for answer in [first, second] {
        let seen = communicators(&answer);
        let with_missing = seen
            .iter()
            .find(|c| c["missing_ranks_count"] == 1)
            .expect("the communicator with a silent rank");
        let missing = &with_missing["missing_ranks"][0];
        assert_eq!(
            (missing["rank"].as_u64(), missing["nvml_dev"].as_u64()),
            (Some(1), Some(5))
        );
        assert_eq!(missing["pid"], 0x3fff_fff0);
        assert_eq!(missing["status"]["unresponsive"], true);
        // It never answered at all: not known for a minute, so not dead.
        assert_eq!(missing["status"]["considered_dead"], false);
    }
    unsafe {
        ncclCommAbort(lone as *mut fake_nccl::comm::Comm);
        for comm in comms {
            ncclCommAbort(comm as *mut fake_nccl::comm::Comm);
        }
    }
}
