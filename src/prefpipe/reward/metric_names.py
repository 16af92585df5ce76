"""Names of the reward-training metrics in metrics.jsonl, in a module without torch so the CPU-only report can
name them without loading the trainer. Per-step means first, then the other logged values.
"""

from __future__ import annotations

PREFERENCE_LOSS, KL_LOSS, LOSS, PROB, ACCURACY = "preference_loss", "kl_loss", "loss", "prob", "accuracy"
STEP, KL_BETA, GRAD_NORM = "step", "kl_beta", "grad_norm"
# The head's share of the gradient norm before clipping: when the head's gradient dominates the clipped global
# norm (a small tau amplifies it 1/tau times), the backbone's update shrinks with it.
HEAD_GRAD_NORM = "head_grad_norm"
