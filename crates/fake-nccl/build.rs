//! The library's SONAME is the real one (libnccl.so.2), as PyTorch's `libtorch_cuda.so` links it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
}
