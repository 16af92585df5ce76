"""Metric names of a reward training run's metrics.jsonl and summary (final_metrics).

No torch here: the report reads these names without importing the trainer.
"""

from __future__ import annotations

# Per-step means over the step's pairs (summed over micro-batches and processes, then divided).
PREFERENCE_LOSS, KL_LOSS, LOSS, PROB, ACCURACY = "preference_loss", "kl_loss", "loss", "prob", "accuracy"
SUMMED = (PREFERENCE_LOSS, KL_LOSS, LOSS, PROB, ACCURACY)
# The other logged values.
STEP, KL_BETA, GRAD_NORM = "step", "kl_beta", "grad_norm"
# The head's share of the gradient norm before clipping: when the head's gradient dominates the clipped global
# norm (a small tau amplifies it 1/tau times), the backbone's update shrinks with it.
HEAD_GRAD_NORM = "head_grad_norm"
