//! The fake NVML library as an old driver: the same source as `fake-nvml`, compiled with
//! `cfg(old_driver)` so every function marked as newer is not exported at all.
#[path = "../../fake-nvml/src/lib.rs"]
mod fake;
