//! The analysis in process: timelines of observations in, verdicts out (one test binary, so
//! the crate is linked once for all of them). Where a new test goes:
//!
//! | file | what it holds |
//! |---|---|
//! | `kinds.rs` | per kind, a timeline that must fire and a near miss that must not; mixtures, flapping input, missing inputs reported as unknown, the exposition of verdicts |
//! | `attribution.rs` | the lost-time split on the loops that fooled the counter rules: observed against inferred, busy time taken or wasted, ranks compared |
//! | `network.rs` | verdicts with the network in view: remote input named by its mount or link, collectives over a saturated or slow link |
//! | `hang.rs` | a hung collective told from a busy or communication-bound rank |
//!
//! The timeline helpers (`run`, `healthy`, `stacks`, ...) are in `tests/common/scenario.rs`.

#[path = "../common/mod.rs"]
mod common;

mod attribution;
mod hang;
mod kinds;
mod network;
