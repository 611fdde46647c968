//! Builds the shared fake with the symbols of newer drivers left out.
fn main() {
    println!("cargo:rustc-cfg=old_driver");
}
