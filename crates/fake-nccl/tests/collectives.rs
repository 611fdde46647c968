//! The stub NCCL over the stub driver, two ranks as two threads on two emulated GPUs: a
//! collective returns at once, its kernel spins on each GPU until the last rank's has started,
//! and a rank that never comes leaves the others spinning.

mod common;

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Barrier;
use std::time::Duration;

use common::*;
use fake_nccl::comm::{now_ns, Comm};
use fake_nccl::*;

#[test]
fn a_collective_returns_at_once_and_spins_on_the_gpu_until_the_last_rank_arrives() {
    cuda();
    let id = unique_id();
    let met = Barrier::new(2);
    let late = std::thread::scope(|scope| {
        let early = scope.spawn(|| {
            let comm = join(id, 0, 0);
            let mut out = 0;
            unsafe {
                assert_eq!(ncclCommCount(comm as *const Comm, &mut out), SUCCESS);
                assert_eq!(out, 2);
                assert_eq!(ncclCommUserRank(comm as *const Comm, &mut out), SUCCESS);
                assert_eq!(out, 0);
                assert_eq!(ncclCommCuDevice(comm as *const Comm, &mut out), SUCCESS);
                assert_eq!(out, 0);
            }
            met.wait();
            let issued = now_ns();
            assert_eq!(all_reduce(comm, 25 << 20), SUCCESS); // 100 MB of gradients
            let returned = now_ns();
            // The host goes on; the GPU does not.
            assert_eq!(unsafe { (cuda().query)(null_mut()) }, 600);
            assert_eq!(unsafe { (cuda().synchronize)() }, 0);
            (issued, returned, now_ns(), comm)
        });
        let late = scope.spawn(|| {
            let comm = join(id, 1, 1);
            met.wait();
            std::thread::sleep(Duration::from_millis(80));
            let issued = now_ns();
            assert_eq!(all_reduce(comm, 25 << 20), SUCCESS);
            assert_eq!(unsafe { (cuda().synchronize)() }, 0);
            (issued, comm)
        });
        let (issued, returned, synced, comm0) = early.join().unwrap();
        let (late_issued, comm1) = late.join().unwrap();
        assert!(
            returned - issued < 20_000_000,
            "the collective blocked its caller"
        );
        assert!(
            synced >= late_issued,
            "rank 0's sync returned before rank 1 came"
        );
        unsafe {
            assert_eq!(ncclCommDestroy(comm0 as *mut Comm), SUCCESS);
            assert_eq!(ncclCommDestroy(comm1 as *mut Comm), SUCCESS);
        }
        (issued, late_issued)
    });
    let (issued, late_issued) = late;
    let (early, late_kernels) = (collectives(0), collectives(1));
    assert_eq!(early.len(), 1, "{early:?}");
    assert_eq!(late_kernels.len(), 1, "{late_kernels:?}");
    let (spin, arrived) = (early[0], late_kernels[0]);
    // Rank 0's kernel ran from its launch through rank 1's arrival, a few SMs busy; both end
    // together, the transfer after the last arrival: 2 × (n-1)/n × 100 MB at 100 GB/s.
    assert!(spin.start_ns >= issued && spin.start_ns < late_issued);
    assert!((spin.sm - 0.06).abs() < 1e-3);
    assert!(arrived.start_ns >= late_issued);
    assert_eq!(spin.end_ns, arrived.end_ns);
    let transfer = arrived.end_ns - arrived.start_ns;
    assert!((1_040_000..1_070_000).contains(&transfer), "{transfer} ns");
}

/// A loop that never syncs runs far ahead of a slower peer: hundreds of collectives queued on
/// its GPU, more than the ring shared between the ranks holds. Every one completes on both
/// GPUs, the last ending together (a slot reused before every rank had read its end, and one
/// word per slot, each left a queued kernel waiting on a later collective's end: a hang).
#[test]
fn a_rank_hundreds_of_collectives_ahead_of_its_peer_still_completes_each() {
    cuda();
    const ISSUED: usize = 700;
    let id = unique_id();
    let (done, finished) = std::sync::mpsc::channel();
    for (rank, device) in [(0, 6), (1, 7)] {
        let done = done.clone();
        std::thread::spawn(move || {
            let comm = join(id, rank, device);
            for n in 0..ISSUED {
                if rank == 1 && n % 20 == 0 {
                    std::thread::sleep(Duration::from_millis(2)); // the slower rank's host
                }
                assert_eq!(all_reduce(comm, 256), SUCCESS);
            }
            assert_eq!(unsafe { (cuda().synchronize)() }, 0);
            done.send(rank).unwrap();
        });
    }
    for _ in 0..2 {
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("a rank's collectives never completed: hung");
    }
    // Back-to-back collectives of one process are one record on its timeline.
    let last = |device| collectives(device).last().map(|k| k.end_ns);
    assert!(last(6).is_some());
    assert_eq!(last(6), last(7));
}

#[test]
fn a_rank_that_never_arrives_leaves_the_other_spinning_until_it_aborts() {
    cuda();
    let id = unique_id();
    let absent = std::thread::spawn(move || join(id, 1, 3));
    let comm = join(id, 0, 2);
    let absent = absent.join().unwrap();
    assert_eq!(all_reduce(comm, 1024), SUCCESS);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(unsafe { (cuda().query)(null_mut()) }, 600, "still waiting");
    let spinning = collectives(2);
    assert_eq!(spinning.len(), 1);
    assert!(
        spinning[0].end_ns - spinning[0].start_ns >= 80_000_000,
        "{spinning:?}"
    );
    assert!(collectives(3).is_empty());
    unsafe {
        assert_eq!(ncclCommAbort(comm as *mut Comm), SUCCESS);
        assert_eq!((cuda().synchronize)(), 0);
        assert_eq!(ncclCommDestroy(absent as *mut Comm), SUCCESS);
    }
}

#[test]
fn bad_arguments_are_refused_as_nccl_refuses_them() {
    cuda();
    let mut version = 0;
    unsafe {
        assert_eq!(ncclGetVersion(&mut version), SUCCESS);
        assert_eq!(version, 22809); // 2.28.9, FAKE_NCCL_VERSION unset
        assert_eq!(ncclGetVersion(null_mut()), INVALID_ARGUMENT);
        let mut comm: *mut Comm = null_mut();
        assert_eq!(
            ncclCommInitRank(&mut comm, 2, unique_id(), 2),
            INVALID_ARGUMENT
        );
        let garbage = UniqueId { internal: [7; 128] };
        assert_eq!(ncclCommInitRank(&mut comm, 1, garbage, 0), INVALID_ARGUMENT);
    }
    on_device(4);
    let mut comm: *mut Comm = null_mut();
    unsafe {
        assert_eq!(ncclCommInitRank(&mut comm, 1, unique_id(), 0), SUCCESS);
        let c = comm as usize;
        let buffer = 0x7e00_0000_0000usize as *mut c_void;
        assert_eq!(
            ncclAllReduce(buffer, buffer, 4, 12, 0, comm, null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            ncclAllReduce(buffer, buffer, 4, 7, 9, comm, null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            ncclAllReduce(null_mut(), buffer, 4, 7, 0, comm, null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            ncclBroadcast(buffer, buffer, 4, 7, 1, comm, null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            ncclAllReduce(buffer, buffer, 4, 7, 0, null_mut(), null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(ncclGroupEnd(), INVALID_USAGE);
        assert_eq!(ncclGroupStart(), SUCCESS);
        assert_eq!(ncclGroupEnd(), SUCCESS);
        // A communicator of one: nothing to wait for, the transfer alone.
        assert_eq!(all_reduce(c, 1024), SUCCESS);
        assert_eq!((cuda().synchronize)(), 0);
        assert_eq!(collectives(4).len(), 1);
        let text = std::ffi::CStr::from_ptr(ncclGetErrorString(INVALID_USAGE));
        assert!(text.to_str().unwrap().starts_with("invalid usage"));
        assert_eq!(ncclCommDestroy(comm), SUCCESS);
    }
}
