"""Optimizer machinery shared by the reward and GRPO trainers: fp32 master weights for half-precision models
(master_weights)."""
