//! CUDA does not survive fork: a child of an initialised process gets an initialisation error
//! from every call, as a real driver's child does (DataLoader workers never touch the GPU).

use fake_cuda::api::*;
use fake_cuda::CuResult;

#[test]
fn a_forked_child_cannot_use_its_parents_driver() {
    let directory = std::env::temp_dir().join(format!("fake-cuda-fork-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    std::env::set_var("EMUGPU_DIR", &directory);
    assert_eq!(cuInit(0), CuResult::Success);
    let mut context = std::ptr::null_mut();
    unsafe { assert_eq!(cuDevicePrimaryCtxRetain(&mut context, 0), CuResult::Success) };
    assert_eq!(cuCtxSetCurrent(context), CuResult::Success);
    assert_eq!(cuCtxSynchronize(), CuResult::Success);
    match unsafe { libc::fork() } {
        0 => {
            let code = cuCtxSynchronize() as i32;
            unsafe {
                libc::_exit(if code == CuResult::NotInitialized as i32 {
                    0
                } else {
                    1
                })
            };
        }
        child => {
            let mut status = 0;
            unsafe { libc::waitpid(child, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child's sync did not fail"
            );
        }
    }
}
