//! Node-wide host sources: CPU, disks, pressure stall information, memory.

pub mod cpu;
pub mod disk;
pub mod memory;
pub mod pressure;
