"""The reward side's speed paths, kept apart from the plain code they replace.

Each module here does what a plain path does, faster, and gives the same numbers to float tolerance; its
docstring names that plain path and the test that compares the two. The run-wide setting `fast_paths: false`
(RewardModel.set_fast_paths) sends every one of them to its plain path:

- selected_last_layer: the last decoder layer at the read positions only (plain: the whole last layer).
- lean_encode: a fused Llama scoring forward (plain: transformers' forward).
- shared_prompt: chosen and rejected behind one copy of their prompt in training (plain: two padded rows).
- token_ids: batched tokenisation through the fast tokenizer's backend (plain: the tokenizer call per row).
- step_metrics: the training metrics stay on the device between host reads every train.metrics_every steps
  (plain: metrics_every 1, a read per step; its own key, not fast_paths: tests/test_reward_step_metrics.py).

Beside them, RewardModel.encode_dataset scores each distinct row once in length-bucketed batches, mask-free
when a batch's rows have one length (plain: consecutive rows, padded, with the mask).
"""
