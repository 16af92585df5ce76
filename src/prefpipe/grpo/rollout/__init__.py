"""Rollout: who samples a GRPO step's completions. Token choice and the plain decode loop (sampling), the
rollout and its masks (completions), the engines chosen by `grpo.<run>.rollout.engine` (engines/: plain, vLLM,
and the sampler/trainer correction) and the fast decode annex (fast/). May import the shared grpo/ modules
(logprobs, data_parallel, metric_names) and the packages below grpo (common, settings, generation, reward's
backbone helpers); never the algorithm, the training loop or any other grpo room.
"""
