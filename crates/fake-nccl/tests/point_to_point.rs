//! Point-to-point transfers and groups in the stub NCCL, two ranks as two threads on two
//! emulated GPUs: a send and its receive meet as NCCL's do, a pipeline's exchange completes
//! inside a group and hangs outside one, and a group's collectives complete as one kernel.

mod common;

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::Barrier;
use std::time::Duration;

use common::*;
use fake_nccl::comm::{now_ns, Comm};
use fake_nccl::*;

const BUFFER: usize = 0x7e00_0000_0000; // a device address: never read

fn send(comm: usize, floats: usize, peer: c_int) -> c_int {
    let buffer = BUFFER as *const c_void;
    unsafe { ncclSend(buffer, floats, 7, peer, comm as *const Comm, null_mut()) }
}

fn receive(comm: usize, floats: usize, peer: c_int) -> c_int {
    let buffer = BUFFER as *mut c_void;
    unsafe { ncclRecv(buffer, floats, 7, peer, comm as *const Comm, null_mut()) }
}

fn destroy(comm: usize) {
    assert_eq!(unsafe { ncclCommDestroy(comm as *mut Comm) }, SUCCESS);
}

/// A pipeline's stage 1 receives activations late: stage 0's send returned at once and its
/// kernel spun until the receive's started; both end together, after the bytes' time.
#[test]
fn a_send_spins_on_the_gpu_until_its_receive_starts_then_moves_the_bytes() {
    cuda();
    let id = unique_id();
    let met = Barrier::new(2);
    let (sender, receiver) = std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            let comm = join(id, 0, 0);
            met.wait();
            let issued = now_ns();
            assert_eq!(send(comm, 25 << 20, 1), SUCCESS); // 100 MB of activations
            assert!(
                now_ns() - issued < 20_000_000,
                "the send blocked its caller"
            );
            assert_eq!(unsafe { (cuda().query)(null_mut()) }, 600);
            assert_eq!(unsafe { (cuda().synchronize)() }, 0);
            destroy(comm);
            issued
        });
        let receiver = scope.spawn(|| {
            let comm = join(id, 1, 1);
            met.wait();
            std::thread::sleep(Duration::from_millis(80));
            let issued = now_ns();
            assert_eq!(receive(comm, 25 << 20, 0), SUCCESS);
            assert_eq!(unsafe { (cuda().synchronize)() }, 0);
            destroy(comm);
            issued
        });
        (sender.join().unwrap(), receiver.join().unwrap())
    });
    let (spin, arrived) = (collectives(0), collectives(1));
    assert_eq!((spin.len(), arrived.len()), (1, 1), "{spin:?} {arrived:?}");
    assert!(spin[0].start_ns >= sender && spin[0].start_ns < receiver);
    assert!(arrived[0].start_ns >= receiver);
    assert_eq!(spin[0].end_ns, arrived[0].end_ns);
    // 100 MB at 100 GB/s, once: a point-to-point transfer has no ring factor.
    let transfer = arrived[0].end_ns - arrived[0].start_ns;
    assert!((1_040_000..1_070_000).contains(&transfer), "{transfer} ns");
}

/// Two stages exchanging in both directions (a 1F1B pipeline's steady state): each rank sends
/// first, then receives. Inside a group it is one kernel per rank and completes; outside a
/// group each rank's send waits for a receive queued behind the other's send, as NCCL's do.
#[test]
fn an_exchange_completes_in_a_group_and_hangs_outside_one() {
    cuda();
    let id = unique_id();
    let (done, finished) = std::sync::mpsc::channel();
    for (rank, device) in [(0, 2), (1, 3)] {
        let done = done.clone();
        std::thread::spawn(move || {
            let comm = join(id, rank, device);
            let peer = 1 - rank;
            unsafe {
                assert_eq!(ncclGroupStart(), SUCCESS);
                assert_eq!(send(comm, 1 << 20, peer), SUCCESS);
                assert_eq!(receive(comm, 1 << 20, peer), SUCCESS);
                assert_eq!(ncclGroupEnd(), SUCCESS);
                assert_eq!((cuda().synchronize)(), 0);
            }
            done.send((rank, comm)).unwrap();
        });
    }
    let mut exchanged = [0; 2];
    for _ in 0..2 {
        let (rank, comm) = finished
            .recv_timeout(Duration::from_secs(30))
            .expect("the grouped exchange hung");
        exchanged[rank as usize] = comm;
    }
    assert_eq!(
        collectives(2).last().map(|k| k.end_ns),
        collectives(3).last().map(|k| k.end_ns)
    );
    let before = collectives(2).len();
    // The same exchange without the group: both ranks spin in their sends.
    std::thread::scope(|scope| {
        for (rank, device, &comm) in [(0, 2), (1, 3)]
            .iter()
            .zip(&exchanged)
            .map(|((r, d), c)| (*r, *d, c))
        {
            scope.spawn(move || {
                on_device(device);
                assert_eq!(send(comm, 1 << 20, 1 - rank), SUCCESS);
                assert_eq!(receive(comm, 1 << 20, 1 - rank), SUCCESS);
            });
        }
    });
    std::thread::sleep(Duration::from_millis(150));
    for device in [2, 3] {
        on_device(device);
        assert_eq!(
            unsafe { (cuda().query)(null_mut()) },
            600,
            "GPU {device} is not spinning"
        );
    }
    let spinning = collectives(2);
    assert!(spinning.len() > before);
    let spin = spinning.last().unwrap();
    assert!(spin.end_ns - spin.start_ns >= 100_000_000, "{spin:?}");
    for (device, comm) in [2, 3].into_iter().zip(exchanged) {
        on_device(device);
        unsafe {
            assert_eq!(ncclCommAbort(comm as *mut Comm), SUCCESS);
            assert_eq!((cuda().synchronize)(), 0);
        }
    }
}

/// A group's two all-reduces on one rank meet the same two issued one by one on the other
/// (NCCL numbers collectives in issue order, grouped or not); bad peers are refused.
#[test]
fn grouped_collectives_meet_ungrouped_ones_and_bad_peers_are_refused() {
    cuda();
    let id = unique_id();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let comm = join(id, 0, 4);
            unsafe {
                assert_eq!(ncclGroupStart(), SUCCESS);
                assert_eq!(all_reduce(comm, 1024), SUCCESS);
                assert_eq!(ncclGroupStart(), SUCCESS); // nested: still one group
                assert_eq!(all_reduce(comm, 1024), SUCCESS);
                assert_eq!(ncclGroupEnd(), SUCCESS);
                // Kept, not launched, until the outermost end.
                assert_eq!((cuda().query)(null_mut()), 0);
                assert_eq!(ncclGroupEnd(), SUCCESS);
                assert_eq!((cuda().synchronize)(), 0);
                assert_eq!(send(comm, 4, 2), INVALID_ARGUMENT);
                assert_eq!(send(comm, 4, -1), INVALID_ARGUMENT);
                let null = null_mut::<c_void>();
                assert_eq!(
                    ncclRecv(null, 4, 7, 1, comm as *const Comm, null),
                    INVALID_ARGUMENT
                );
                assert_eq!(ncclSend(null, 4, 7, 1, null_mut(), null), INVALID_ARGUMENT);
                assert_eq!(send(comm, 4, 1), SUCCESS);
                assert_eq!((cuda().synchronize)(), 0);
            }
            destroy(comm);
        });
        scope.spawn(|| {
            let comm = join(id, 1, 5);
            std::thread::sleep(Duration::from_millis(30));
            assert_eq!(all_reduce(comm, 1024), SUCCESS);
            std::thread::sleep(Duration::from_millis(30));
            assert_eq!(all_reduce(comm, 1024), SUCCESS);
            assert_eq!(receive(comm, 4, 0), SUCCESS);
            assert_eq!(unsafe { (cuda().synchronize)() }, 0);
            destroy(comm);
        });
    });
    assert_eq!(
        collectives(4).last().map(|k| k.end_ns),
        collectives(5).last().map(|k| k.end_ns)
    );
}
