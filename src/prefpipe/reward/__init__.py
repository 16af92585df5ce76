"""Reward models (rule train_reward_model): Bradley-Terry, GPM and Bayesian GPM heads on any transformers backbone.

Modules: settings (config), heads / scores / losses (math), pooling / collate / backbone (inputs),
model (RewardModel, save/load: the API evaluation and GRPO use), trainer (training loop; its checkpoints go
through prefpipe.common.checkpoint).
"""
