"""Two pipeline stages of equal time whose kernels differ: stage 0's (embeddings, gathers)
keep a third of the SMs busy, stage 1's (dense layers) nearly all. Neither waits for the other
beyond the pipeline's fill and drain; stage 0's empty SMs are its kernels', not a spin in the
receive kernels: kernel_efficiency, not communication. A near miss for the rule that reads a
data-parallel rank's excess of empty SMs over its peers' as spin: a stage's peers run other
layers. It read communication 0.39 (truth kernel_efficiency 0.53) while the rule took stages
too. Its mirror image, which no counter tells from it: communication_pipeline_imbalance.
Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import communication_pipeline_imbalance
import torch_loop

GPUS = 2
EXPECT = {0: "kernel_efficiency"}
SKIP = torch_loop.probes_unavailable
# The imbalanced pipeline's stages made equal in time, stage 0's kernels emptier.
SPEC = {
    **communication_pipeline_imbalance.SPEC,
    "step_seconds": 0.08,
    "rank_specs": {"0": {"sm": 0.3}},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
