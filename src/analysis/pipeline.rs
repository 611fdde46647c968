//! A pipeline's schedule: how long its stages wait for each other by its shape alone (the
//! stages' windows in, the bubble's share out). Pure.

use super::WindowFigures;

/// The share of a pipeline stage's busy time its schedule leaves it waiting for the other
/// stages, where each stage's step is known in microbatches: GPipe's and 1F1B's bubble,
/// `(S - 1) / (M + S - 1)` of the step for `S` stages of `M` microbatches (interleaved 1F1B's
/// `v` chunks a stage send and receive `v` times as often: the same formula over `v * M`).
/// A stage at either end of the pipeline sends one tensor and receives one a microbatch,
/// one in the middle twice that; the fewest transfers of the group's stages count. The
/// stages may not all be on this node, so `S` is taken as two: the least bubble any pipeline
/// of `M` microbatches has. `None` where a stage's transfers a step are unknown.
pub fn bubble_share(members: &[usize], windows: &[WindowFigures]) -> Option<f64> {
    let fewest = members
        .iter()
        .map(|&i| windows[i].transfers_per_step)
        .collect::<Option<Vec<f64>>>()?
        .into_iter()
        .fold(f64::MAX, f64::min);
    let microbatches = fewest / 2.0;
    (microbatches >= 1.0).then(|| 1.0 / (microbatches + 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages(transfers: [Option<f64>; 2]) -> Option<f64> {
        let windows: Vec<WindowFigures> = transfers
            .iter()
            .map(|&t| WindowFigures {
                transfers_per_step: t,
                ..WindowFigures::default()
            })
            .collect();
        bubble_share(&[0, 1], &windows)
    }

    #[test]
    fn the_bubble_shrinks_with_the_microbatches_of_the_stage_with_fewest_transfers() {
        // Four microbatches: a fifth of the step; a middle stage's doubled transfers do not
        // halve it.
        assert_eq!(stages([Some(8.0), Some(16.0)]), Some(0.2));
        assert_eq!(stages([Some(64.0), Some(64.0)]), Some(1.0 / 33.0));
        // One transfer a step is no schedule of microbatches; unknown is unknown.
        assert_eq!(stages([Some(1.0), Some(8.0)]), None);
        assert_eq!(stages([None, Some(8.0)]), None);
    }
}
