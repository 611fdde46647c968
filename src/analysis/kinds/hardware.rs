//! **hardware**: the device itself is failing.
//!
//! Evidence: the GPU stopped answering (NVML's GpuLost, or its calls past the deadline on its
//! last three ticks in a row or on half of the window's), new XID or uncorrected ECC errors in
//! the window, a row remap pending or failed. Facts the device reports: a failing device is
//! named the primary verdict before any cost, and it counts on an idle GPU too.
//!
//! Near misses: corrected ECC errors and errors counted before the window are not events; one
//! call past the deadline (a loaded node, a busy driver) is `gpu_up` 0 for that tick and a log
//! line, not a failing device.

use super::rule::Rule;
use super::{Advice, KindSpec, Phase};
use crate::analysis::{GpuVerdict, Kind, KindScore, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Signal;

pub(super) const SPEC: KindSpec = KindSpec {
    phase: Phase::Device,
    on_idle_gpu: true,
    wants_culprits: false,
    first: true,
    score,
    advice,
};

fn score(w: &WindowFigures, _: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let lost = if w.up { 0.0 } else { 1.0 };
    rule.fact(Signal::GpuNotAnswering, lost, lost, String::new());
    let errors = w
        .hardware_errors
        .map_or(0.0, |n| if n > 0 { 1.0 } else { 0.0 });
    if let Some(n) = w.hardware_errors {
        rule.fact(
            Signal::NewXidOrUncorrectedEcc,
            n as f64,
            errors,
            String::new(),
        );
    }
    let remap = if w.remap_trouble { 1.0 } else { 0.0 };
    rule.fact(Signal::RowRemapPendingOrFailed, remap, remap, String::new());
    rule.done(Kind::Hardware, lost.max(errors).max(remap))
}

fn advice(_: &GpuVerdict) -> Advice {
    Advice {
        explanation: "The device reports errors (XID, uncorrectable ECC, row remapping) or stopped answering.",
        next_steps: &[
            "Look up the XID codes in NVIDIA's XID catalogue and drain the node if they repeat.",
            "Reset the GPU when a row remap is pending; replace it when a remap failed.",
        ],
    }
}
