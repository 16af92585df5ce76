"""What any stage that makes a causal-LM policy answer prompts shares: the RL prompt rows (rl_prompts.py) and
turning prompts into token batches and back, with every id that ends a completion (tokens.py).

Layer rank 2, beside data/: it needs only common/ (chat formatting) and settings/, and both base/ (rank 3: the
held-out accuracy of the base policy) and grpo/ (rank 4: rollouts, policy evaluation) use it, so neither has to
borrow the other's code. The decode loops stay in grpo/ (grpo/rollout/sampling.py and the annex grpo/rollout/fast/).
"""
