//! The library's SONAME is the real one (libcuda.so.1): `dlopen("libcuda.so.1")` then finds it once
//! it is loaded under its cargo file name, as the tests load it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
