//! Hysteresis: a kind turns active when its score stays at or above `enter_score` for
//! `min_duration`, and inactive when it stays below `leave_score` as long, so bursty
//! workloads do not flap.

use crate::config::Thresholds;

/// Hysteresis state of one kind on one GPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latch {
    active: bool,
    /// Since when the score has been past the threshold that would flip `active`.
    pending_since: Option<f64>,
}

impl Latch {
    /// Moves the latch with a new score at time `at`; returns whether the kind is active.
    pub fn update(&mut self, score: Option<f64>, at: f64, t: &Thresholds) -> bool {
        let flips = match (self.active, score) {
            (false, Some(s)) => s >= t.enter_score,
            (true, Some(s)) => s < t.leave_score,
            // Unknown input: hold the current state.
            (_, None) => false,
        };
        if !flips {
            self.pending_since = None;
            return self.active;
        }
        let since = *self.pending_since.get_or_insert(at);
        if at - since >= t.min_duration.0.as_secs_f64() {
            self.active = !self.active;
            self.pending_since = None;
        }
        self.active
    }
}
