//! A process whose driver was never initialised, and one on a machine without the emulated GPUs.

use fake_cuda::api::*;
use fake_cuda::CuResult;

#[test]
fn calls_before_cu_init_fail_and_cu_init_without_gpus_finds_no_device() {
    let mut count = 0;
    unsafe { assert_eq!(cuDeviceGetCount(&mut count), CuResult::NotInitialized) };
    assert_eq!(cuCtxSynchronize(), CuResult::NotInitialized);
    std::env::remove_var("EMUGPU_DIR");
    assert_eq!(cuInit(0), CuResult::NoDevice);
    unsafe { assert_eq!(cuDeviceGetCount(&mut count), CuResult::NotInitialized) };
    // The version answers without a device, as the real library's does.
    let mut version = 0;
    unsafe { assert_eq!(cuDriverGetVersion(&mut version), CuResult::Success) };
    assert_eq!(version, 12080);
}
