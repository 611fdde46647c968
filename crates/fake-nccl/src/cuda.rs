//! The CUDA driver entry points NCCL calls, found in the `libcuda.so.1` the process loads (as
//! NCCL finds them through the runtime's driver entry point lookup).

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

pub type Ptr = *mut c_void;

/// `CUDA_SUCCESS`, `CUDA_ERROR_NOT_READY`.
pub const SUCCESS: c_int = 0;
pub const NOT_READY: c_int = 600;

pub struct Driver {
    pub cu_ctx_get_current: unsafe extern "C" fn(*mut Ptr) -> c_int,
    pub cu_ctx_set_current: unsafe extern "C" fn(Ptr) -> c_int,
    pub cu_ctx_get_device: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub cu_module_load_data: unsafe extern "C" fn(*mut Ptr, *const c_void) -> c_int,
    pub cu_module_get_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> c_int,
    #[allow(clippy::type_complexity)]
    pub cu_launch_kernel: unsafe extern "C" fn(
        Ptr,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Ptr,
        *mut Ptr,
        *mut Ptr,
    ) -> c_int,
    pub emu_kernel_started: unsafe extern "C" fn(*const u64, *mut u64) -> c_int,
}

unsafe fn symbol<T: Copy>(library: Ptr, name: &std::ffi::CStr) -> Option<T> {
    let found = libc::dlsym(library, name.as_ptr());
    (!found.is_null()).then(|| std::mem::transmute_copy(&found))
}

/// The driver, loaded at the first call; None without a loadable stub driver.
pub fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| unsafe {
            let library = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if library.is_null() {
                return None;
            }
            Some(Driver {
                cu_ctx_get_current: symbol(library, c"cuCtxGetCurrent")?,
                cu_ctx_set_current: symbol(library, c"cuCtxSetCurrent")?,
                cu_ctx_get_device: symbol(library, c"cuCtxGetDevice")?,
                cu_module_load_data: symbol(library, c"cuModuleLoadData")?,
                cu_module_get_function: symbol(library, c"cuModuleGetFunction")?,
                cu_launch_kernel: symbol(library, c"cuLaunchKernel")?,
                emu_kernel_started: symbol(library, c"emuKernelStarted")?,
            })
        })
        .as_ref()
}
