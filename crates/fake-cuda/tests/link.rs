//! A device whose PCIe link trained below its maximum (`EMUGPU_PCIE_LINK`): copies to and
//! from the host crawl at the link's speed, the time the link added is noted on the timeline
//! for the ground truth, and NVML still sees no kernel (a copy is none).

use std::ptr::null_mut;

use fake_cuda::api::*;
use fake_cuda::driver::pcie_bytes_per_s;
use fake_cuda::wait::now_ns;
use fake_cuda::CuResult;

mod common;
use common::*;

#[test]
fn the_link_reads_as_nvml_reports_it_and_copies_reach_most_of_its_line_rate() {
    // Gen 5 x16: 63 GB/s on the line, 50 GB/s in copies; gen 2 x4: 2 GB/s, 1.6 GB/s.
    let (now, max) = pcie_bytes_per_s("2,4,5,16").unwrap();
    assert!(
        (now - 1.6e9).abs() < 1e6 && (max - 50.4128e9).abs() < 1e6,
        "{now} {max}"
    );
    for bad in ["", "5,16", "5,16,5", "9,16,5,16", "5,0,5,16", "a,16,5,16"] {
        assert_eq!(pcie_bytes_per_s(bad), None, "{bad:?}");
    }
}

#[test]
fn a_copy_across_a_degraded_link_takes_the_links_time_and_the_excess_is_noted() {
    std::env::set_var("EMUGPU_PCIE_LINK", "2,4,5,16");
    on_device(6, 0);
    let bytes = 8 << 20;
    let mut device = 0u64;
    let mut pinned: Ptr = null_mut();
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut device, bytes), CuResult::Success);
        assert_eq!(cuMemAllocHost_v2(&mut pinned, bytes), CuResult::Success);
    }
    // 8 MiB at 25 GB/s (a pinned copy's rate) takes 0.34 ms; across gen 2 x4 of a gen 5 x16
    // slot (1.6 GB/s), 5.2 ms.
    let before = now_ns();
    unsafe { assert_eq!(cuMemcpyHtoD_v2(device, pinned, bytes), CuResult::Success) };
    assert_eq!(cuCtxSynchronize(), CuResult::Success);
    let took = now_ns() - before;
    assert!(took >= 5_000_000, "{took} ns");
    // No kernel for NVML; the link's part in the raw ring, for the runner's truth.
    assert!(kernels(6).is_empty());
    let raw = std::fs::read(directory().join("gpu6.timeline")).unwrap();
    let head = u64::from_le_bytes(raw[16..24].try_into().unwrap());
    assert_eq!(head, 1);
    let ring = 64 + 16 * u32::from_le_bytes(raw[12..16].try_into().unwrap()) as usize;
    let record = &raw[ring..ring + 32];
    let start = u64::from_le_bytes(record[0..8].try_into().unwrap());
    let end = u64::from_le_bytes(record[8..16].try_into().unwrap());
    let flags = u32::from_le_bytes(record[28..32].try_into().unwrap());
    assert_eq!(flags, emu_timeline::LINK_WAIT);
    let excess = end - start;
    assert!(
        (4_800_000..=5_000_000).contains(&excess),
        "{excess} ns beyond a healthy link's"
    );
}
