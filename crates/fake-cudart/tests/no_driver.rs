//! The runtime on a machine without a driver: every call is cudaErrorInsufficientDriver.

use fake_cudart::*;

#[test]
fn without_libcuda_every_call_reports_an_insufficient_driver() {
    // A machine with a real driver installed has nothing to show here.
    if !unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY) }.is_null() {
        eprintln!("skipped: this machine has a libcuda.so.1");
        return;
    }
    let mut count = 7;
    unsafe {
        assert_eq!(cudaGetDeviceCount(&mut count), ERROR_INSUFFICIENT_DRIVER);
        assert_eq!(cudaDeviceSynchronize(), ERROR_INSUFFICIENT_DRIVER);
        let mut version = 1;
        assert_eq!(cudaDriverGetVersion(&mut version), SUCCESS);
        assert_eq!(version, 0);
    }
    assert_eq!(cudaGetLastError(), ERROR_INSUFFICIENT_DRIVER);
}
