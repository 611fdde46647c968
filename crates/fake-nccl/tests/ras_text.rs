//! The stub's RAS service as NCCL 2.26 has it: no JSON (`SET FORMAT` is an unknown command),
//! the text answer naming the rank whose collective count stands apart.

mod common;

use common::ras::{join_two, listen_on_a_free_port, RasClient};
use common::*;
use fake_nccl::*;

#[test]
fn before_2_28_7_ras_speaks_only_text() {
    std::env::set_var("FAKE_NCCL_VERSION", "2.26.2");
    let address = listen_on_a_free_port();
    cuda();
    let comms = join_two(unique_id(), [0, 1]);
    let mut version = 0;
    assert_eq!(unsafe { ncclGetVersion(&mut version) }, SUCCESS);
    assert_eq!(version, 22602);
    assert_eq!(all_reduce(comms[0], 256), SUCCESS);
    std::thread::sleep(std::time::Duration::from_millis(700));
    let mut client = RasClient::connect(&address);
    assert_eq!(client.ask("client protocol 2"), "SERVER PROTOCOL 2\n");
    assert_eq!(
        client.ask("SET FORMAT json"),
        "ERROR: Unknown command SET FORMAT json\n"
    );
    assert_eq!(client.ask("MONITOR"), "ERROR: Unknown command MONITOR\n");
    let answer = client.status();
    assert!(
        answer.starts_with("NCCL version 2.26.2 compiled with CUDA"),
        "{answer}"
    );
    assert!(
        answer.contains(
            ") MISMATCH\n  Communicator ranks have different AllReduce operation counts\n"
        ),
        "{answer}"
    );
    let pid = std::process::id();
    assert!(
        answer.contains(&format!("  Rank 0 has launched up to operation 1 -- GPU 0 managed by process {pid} on node 127.0.0.1\n")),
        "{answer}"
    );
    assert!(
        answer.contains(&format!("  Rank 1 has not launched any operations -- GPU 1 managed by process {pid} on node 127.0.0.1\n")),
        "{answer}"
    );
    unsafe {
        for comm in comms {
            ncclCommAbort(comm as *mut fake_nccl::comm::Comm);
        }
    }
}
