//! What the stub NCCL's tests share: the stub driver loaded by its SONAME, ranks joined on
//! emulated GPUs, and the collective kernels a GPU's timeline holds.
#![allow(dead_code)]

use std::ffi::{c_int, c_uint, c_void};
use std::ptr::null_mut;
use std::sync::Once;

use emu_timeline::COLLECTIVE_KERNEL;
use fake_nccl::comm::Comm;
use fake_nccl::*;

pub type Ptr = *mut c_void;

/// The stub driver's entry points the ranks call, loaded by its SONAME as NCCL loads it.
pub struct Cuda {
    pub init: unsafe extern "C" fn(c_uint) -> c_int,
    pub retain: unsafe extern "C" fn(*mut Ptr, c_int) -> c_int,
    pub set_current: unsafe extern "C" fn(Ptr) -> c_int,
    pub synchronize: unsafe extern "C" fn() -> c_int,
    pub query: unsafe extern "C" fn(Ptr) -> c_int,
}

pub fn cuda() -> &'static Cuda {
    static LOADED: std::sync::OnceLock<Cuda> = std::sync::OnceLock::new();
    static DIRECTORY: Once = Once::new();
    DIRECTORY.call_once(|| {
        let directory = std::env::temp_dir().join(format!("fake-nccl-test-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        std::env::set_var("EMUGPU_DIR", &directory);
    });
    LOADED.get_or_init(|| unsafe {
        let exe = std::env::current_exe().unwrap();
        let library = exe
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("libfake_cuda.so");
        assert!(
            library.exists(),
            "{} missing: cargo build --workspace first",
            library.display()
        );
        let path = std::ffi::CString::new(library.to_str().unwrap()).unwrap();
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
        assert!(!handle.is_null());
        Cuda {
            init: symbol(handle, c"cuInit"),
            retain: symbol(handle, c"cuDevicePrimaryCtxRetain"),
            set_current: symbol(handle, c"cuCtxSetCurrent"),
            synchronize: symbol(handle, c"cuCtxSynchronize"),
            query: symbol(handle, c"cuStreamQuery"),
        }
    })
}

/// A function of the loaded library, as the type it is used as.
unsafe fn symbol<T: Copy>(library: Ptr, name: &std::ffi::CStr) -> T {
    let found = libc::dlsym(library, name.as_ptr());
    assert!(!found.is_null(), "{name:?}");
    std::mem::transmute_copy(&found)
}

/// Makes `device`'s primary context current on the calling thread.
pub fn on_device(device: c_int) {
    let cuda = cuda();
    let mut context = null_mut();
    unsafe {
        assert_eq!((cuda.init)(0), 0);
        assert_eq!((cuda.retain)(&mut context, device), 0);
        assert_eq!((cuda.set_current)(context), 0);
    }
}

pub fn collectives(device: c_int) -> Vec<emu_timeline::Kernel> {
    let directory = std::env::var("EMUGPU_DIR").unwrap();
    let path = std::path::Path::new(&directory).join(format!("gpu{device}.timeline"));
    let kernels = emu_timeline::read(&path, 0).unwrap().kernels;
    kernels
        .into_iter()
        .filter(|k| k.flags == COLLECTIVE_KERNEL)
        .collect()
}

pub fn unique_id() -> UniqueId {
    let mut id = UniqueId { internal: [0; 128] };
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, SUCCESS);
    id
}

/// Joins rank `rank` of two on `device` (blocks until the other rank joins).
pub fn join(id: UniqueId, rank: c_int, device: c_int) -> usize {
    on_device(device);
    let mut comm: *mut Comm = null_mut();
    assert_eq!(unsafe { ncclCommInitRank(&mut comm, 2, id, rank) }, SUCCESS);
    comm as usize
}

pub fn all_reduce(comm: usize, floats: usize) -> c_int {
    let buffer = 0x7e00_0000_0000usize as *mut c_void; // a device address: never read
    unsafe {
        ncclAllReduce(
            buffer,
            buffer,
            floats,
            7,
            0,
            comm as *const Comm,
            null_mut(),
        )
    }
}

pub mod ras;
