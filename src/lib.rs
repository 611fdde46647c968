//! gpu-bottleneck-exporter: samples a GPU node and tells, per GPU, why it waits.
//!
//! Data flows one way: [`config`] → [`source`]s → [`snapshot::Snapshot`] → [`analysis`] →
//! [`exposition`] → [`web`]; the snapshot and the verdicts it carries
//! ([`snapshot::GpuVerdict`]) are plain data with one home, `snapshot`, that depends on no
//! stage. The [`sampler`] is the only loop and owns the mutable state; a few helper
//! threads (one per GPU, the XID watcher, the kubelet refresher) only hand it results.

pub mod analysis;
pub mod config;
pub mod daemon;
pub mod diagnose;
pub mod exposition;
pub mod report;
pub mod sampler;
pub mod snapshot;
pub mod source;
pub mod top;
pub mod web;
