//! A kernel spinning on a word in memory, as NCCL's spin for their peers: the GPU runs it until
//! the word says when the wait ends, the work launched after it waits on the device (not on
//! the host), and syncs behind it return only once it has ended.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use emu_timeline::COLLECTIVE_KERNEL;
use fake_cuda::api::*;
use fake_cuda::driver::UNTIL_WORD;
use fake_cuda::wait::now_ns;
use fake_cuda::{CuResult, KernelCost};

mod common;
use common::*;

/// A collective's kernel: spins on `word`, then moves its data for `transfer` seconds.
fn spinning_on(word: &AtomicU64, transfer: f64) -> KernelCost {
    let mut spin = cost(transfer, 0.02);
    spin.flags = COLLECTIVE_KERNEL | UNTIL_WORD;
    spin.until_ns = word as *const AtomicU64 as u64;
    spin
}

fn started(word: &AtomicU64) -> Result<u64, CuResult> {
    let mut start = 0;
    match unsafe { emuKernelStarted(word.as_ptr(), &mut start) } {
        CuResult::Success => Ok(start),
        e => Err(e),
    }
}

#[test]
fn a_held_kernel_spins_until_its_word_is_written_and_the_work_behind_it_waits_on_the_device() {
    on_device(0, 0);
    let f = function();
    let word = AtomicU64::new(0);
    let before = now_ns();
    assert_eq!(
        launch(f, null_mut(), spinning_on(&word, 0.005)),
        CuResult::Success
    );
    // The host goes on: later launches and an event record return at once.
    assert_eq!(launch(f, null_mut(), cost(0.01, 0.9)), CuResult::Success);
    let mut event = null_mut();
    unsafe { assert_eq!(cuEventCreate(&mut event, 0), CuResult::Success) };
    assert_eq!(cuEventRecord(event, null_mut()), CuResult::Success);
    assert_eq!(cuEventQuery(event), CuResult::NotReady);
    assert_eq!(cuStreamQuery(null_mut()), CuResult::NotReady);
    // The kernel started once the queue reached it, and says so once.
    let start = started(&word).expect("the held kernel is booked");
    assert!(start >= before && start <= now_ns());
    assert_eq!(started(&word), Err(CuResult::NotReady));

    // While nobody writes the word, the GPU keeps spinning in it, ahead of the clock, and
    // nothing queued behind it runs.
    std::thread::sleep(Duration::from_millis(40));
    let booked = kernels(0);
    assert_eq!(booked.len(), 1, "{booked:?}");
    assert_eq!(booked[0].flags, COLLECTIVE_KERNEL);
    assert!((booked[0].sm - 0.02).abs() < 1e-9);
    assert_eq!(booked[0].start_ns, start);
    assert!(booked[0].end_ns >= start + 20_000_000, "{booked:?}");

    // The last peer arrives: the spin ends then, plus its transfer, and the kept work follows.
    let arrived = now_ns() + 20_000_000;
    word.store(arrived, Ordering::Release);
    assert_eq!(cuEventSynchronize(event), CuResult::Success);
    let booked = kernels(0);
    assert_eq!(booked.len(), 2, "{booked:?}");
    assert_eq!(booked[0].end_ns, arrived + 5_000_000);
    assert_eq!(booked[1].start_ns, booked[0].end_ns);
    assert_eq!(booked[1].end_ns - booked[1].start_ns, 10_000_000);
    assert!(now_ns() >= booked[1].end_ns);
    assert_eq!(cuEventQuery(event), CuResult::Success);
    assert_eq!(cuCtxSynchronize(), CuResult::Success);
}

#[test]
fn a_sync_behind_a_held_kernel_waits_until_it_ends_and_a_written_word_holds_nothing() {
    on_device(1, 0);
    let f = function();
    // The peers arrived already: booked at once, to the word's moment plus the transfer.
    let early = AtomicU64::new(now_ns() + 2_000_000);
    assert_eq!(
        launch(f, null_mut(), spinning_on(&early, 0.001)),
        CuResult::Success
    );
    let booked = kernels(1);
    assert_eq!(booked[0].end_ns, early.load(Ordering::Relaxed) + 1_000_000);
    assert!(started(&early).is_ok());
    assert_eq!(cuCtxSynchronize(), CuResult::Success);

    // A peer that is late: a sync on another thread waits for it, whatever its wait mode.
    let late = Box::leak(Box::new(AtomicU64::new(0)));
    assert_eq!(
        launch(f, null_mut(), spinning_on(late, 0.0)),
        CuResult::Success
    );
    let context = {
        let mut c = null_mut();
        unsafe { assert_eq!(cuCtxGetCurrent(&mut c), CuResult::Success) };
        c as usize
    };
    let waiter = std::thread::spawn(move || {
        assert_eq!(cuCtxSetCurrent(context as _), CuResult::Success);
        let result = cuCtxSynchronize();
        (result, now_ns())
    });
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        !waiter.is_finished(),
        "the sync returned before the peer arrived"
    );
    let arrived = now_ns();
    late.store(arrived, Ordering::Release);
    let (result, returned) = waiter.join().unwrap();
    assert_eq!(result, CuResult::Success);
    assert!(returned >= arrived);
}

#[test]
fn a_word_that_cannot_be_read_is_refused() {
    on_device(2, 0);
    let f = function();
    let mut bad = cost(0.0, 0.02);
    bad.flags = UNTIL_WORD;
    bad.until_ns = 0;
    assert_eq!(launch(f, null_mut(), bad), CuResult::InvalidValue);
    bad.until_ns = 3; // unaligned
    assert_eq!(launch(f, null_mut(), bad), CuResult::InvalidValue);
    assert!(kernels(2).is_empty());
    let never = AtomicU64::new(0);
    assert_eq!(started(&never), Err(CuResult::NotReady));
}

#[test]
fn a_spin_booked_past_its_end_is_cut_back_and_the_work_behind_it_follows_at_once() {
    on_device(3, 0);
    let f = function();
    let word = AtomicU64::new(0);
    assert_eq!(
        launch(f, null_mut(), spinning_on(&word, 0.001)),
        CuResult::Success
    );
    assert_eq!(launch(f, null_mut(), cost(0.005, 0.9)), CuResult::Success);
    // The last peer came a moment after the launch: the spin, booked about 10 ms ahead, ends
    // a millisecond after it, and the compute kernel starts right there, not at the booking.
    let arrived = now_ns() + 1_000_000;
    word.store(arrived, Ordering::Release);
    assert_eq!(cuCtxSynchronize(), CuResult::Success);
    let booked = kernels(3);
    assert_eq!(booked.len(), 2, "{booked:?}");
    assert_eq!(booked[0].end_ns, arrived + 1_000_000);
    assert_eq!(booked[1].start_ns, booked[0].end_ns);
}
