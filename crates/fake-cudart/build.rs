//! The library's SONAME is the real one (libcudart.so.12): `dlopen("libcudart.so.12")` then finds it once
//! it is loaded under its cargo file name, as the tests load it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.12");
}
