"""GRPO: group-relative policy optimisation of a causal LM against reward models and rule rewards.

Small components (advantages, KL estimators, losses, log-probs, rollouts, rewards, reference policy,
diagnostics, train_state for checkpoints) and one recipe that wires them together (trainer.py). Stage entry
points live in prefpipe.train_grpo and prefpipe.eval_policy.
"""
