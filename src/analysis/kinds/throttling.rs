//! **throttling**: the GPU's clocks are held down by its power cap or by temperature.
//!
//! Evidence: the share of ticks with a limiting throttle reason (software power cap, hardware
//! slowdown, thermal slowdown, power brake; not idle, sync boost or application clocks), or
//! the temperature closer than `thermal_margin_celsius` to its slowdown threshold. Its cost is
//! the useful busy time left, slowed by the SM clock's shortfall on the throttled ticks
//! (measured where the clocks are known). It counts on an idle GPU too.
//!
//! Near misses: clocks lowered while idle, by sync boost or by the application-clock setting
//! are not throttling; nor is the software power cap at the board's default power limit: a
//! GPU running heavy kernels draws its rated power at the clocks that power allows (a real
//! H200 in a bf16 matmul loop: 695 of 700 W at 1,500 of 1,980 MHz, the cap set throughout),
//! which no setting of the node's raises. A cap below the default is throttling.

use super::rule::Rule;
use super::{Advice, KindSpec, Phase};
use crate::analysis::score::high_ratio;
use crate::analysis::{Evidence, GpuVerdict, Kind, KindScore, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Signal;

pub(super) const SPEC: KindSpec = KindSpec {
    phase: Phase::Busy {
        measured: |w| w.throttled_clock_ratio.is_some(),
        yields: None,
    },
    on_idle_gpu: true,
    wants_culprits: false,
    first: false,
    score,
    advice,
};

fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let reasons = rule.alternative(
        Signal::ThrottledShare,
        w.throttled,
        t.throttled_share_high,
        high_ratio,
    );
    let heat = w.thermal_margin.map(|margin| {
        // Closer than the margin to the slowdown temperature scores past 0.5.
        let s = if margin <= 0.0 {
            1.0
        } else {
            (0.5 * t.thermal_margin_celsius / margin).clamp(0.0, 1.0)
        };
        rule.evidence.push(Evidence {
            signal: Signal::ThermalMarginCelsius,
            value: margin,
            threshold: t.thermal_margin_celsius,
            strength: s,
            detail: String::new(),
        });
        s
    });
    rule.any(Kind::Throttling, 1.0, &[reasons, heat])
}

fn advice(_: &GpuVerdict) -> Advice {
    Advice {
        explanation: "The GPU's clocks are held down by its power cap or by temperature.",
        next_steps: &[
            "Check cooling and airflow; compare the temperature with its slowdown threshold.",
            "Check the power cap against the board's default; ask the operator before changing it.",
        ],
    }
}
