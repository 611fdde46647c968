//! How strongly a value makes its case, in 0..1: the scales every rule and the attribution
//! share. A leaf: it imports nothing from the analysis.
//!
//! Every measured condition scores 0.5 exactly at its threshold and 0.3 at 60 % of the way
//! from "nothing", so one enter/leave pair of scores gives every rule the same hysteresis.
//! Past the threshold it rises to 1.0 at the decisive end: twice the threshold for an
//! unbounded quantity ([`high`]), saturation for a ratio that cannot exceed 1 ([`high_ratio`]:
//! host CPU, disk utilization, a pegged thread), so a saturated resource decides the case
//! instead of hovering at the entry score. Categorical facts (two independent jobs on one GPU,
//! a PCIe link trained far below its maximum) score by how certain they make the cause, not as
//! "at threshold".

use crate::snapshot::Evidence;

/// How strongly `value` exceeds `threshold` ("high is bad").
pub fn high(value: f64, threshold: f64) -> f64 {
    if threshold <= 0.0 {
        return if value > 0.0 { 1.0 } else { 0.0 };
    }
    (0.5 * value / threshold).clamp(0.0, 1.0)
}

/// How strongly a ratio bounded by 1 exceeds `threshold`: as [`high`] up to the threshold,
/// then rising at least linearly to 1.0 at saturation (a ratio of 1), which [`high`] alone
/// could never reach for a threshold above 0.5.
pub fn high_ratio(value: f64, threshold: f64) -> f64 {
    if value < threshold || threshold >= 1.0 {
        return high(value, threshold);
    }
    let to_saturation = 0.5 + 0.5 * (value - threshold) / (1.0 - threshold);
    to_saturation.max(high(value, threshold)).clamp(0.0, 1.0)
}

/// How strongly a ratio in 0..1 falls below `threshold` ("low is bad").
pub fn low(value: f64, threshold: f64) -> f64 {
    if threshold >= 1.0 {
        return 1.0;
    }
    (0.5 * (1.0 - value) / (1.0 - threshold)).clamp(0.0, 1.0)
}

/// Score of a categorical fact that makes its cause certain.
pub const CERTAIN: f64 = 0.9;

/// Below this busy fraction over the window a GPU runs no work at all: whatever holds it is
/// idle, not waiting on a pipeline.
pub const IDLE_BUSY: f64 = 0.02;

/// The strongest of a list of evidence (0 when empty).
pub fn strongest(evidence: &[Evidence]) -> f64 {
    evidence.iter().fold(0.0, |a, e| a.max(e.strength))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strengths_are_half_at_the_threshold_and_point_three_at_sixty_percent() {
        assert_eq!(high(0.8, 0.8), 0.5);
        assert_eq!(high(1.6, 0.8), 1.0);
        assert!((high(0.48, 0.8) - 0.3).abs() < 1e-12);
        assert_eq!(low(0.7, 0.7), 0.5);
        assert_eq!(low(0.0, 0.7), 1.0);
        assert!((low(0.82, 0.7) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn bounded_ratios_reach_a_decisive_score_at_saturation() {
        // Below the threshold: exactly as `high` (same hysteresis).
        assert_eq!(high_ratio(0.45, 0.9), high(0.45, 0.9));
        assert_eq!(high_ratio(0.9, 0.9), 0.5);
        assert!((high_ratio(0.95, 0.9) - 0.75).abs() < 1e-12);
        assert_eq!(high_ratio(1.0, 0.9), 1.0);
        // `high` alone could never pass 0.56 for a ratio with a 0.9 threshold.
        assert!(high(1.0, 0.9) < 0.56);
        // Small thresholds keep `high`'s doubling where it comes first.
        assert_eq!(high_ratio(0.2, 0.1), 1.0);
    }
}
