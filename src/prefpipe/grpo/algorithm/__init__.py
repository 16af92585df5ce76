"""The GRPO algorithm: one policy update. Group-relative advantages (advantages), the clipped surrogate with
its KL penalty and aggregators (losses), which token positions are trained micro-batch by micro-batch (spans), the
reference policy (reference), the optimizer passes over a step's batch (update, its fp32 master weights from
common/optim), the trainable state a checkpoint keeps (train_state), the per-step diagnostics (diagnostics)
and the fast log-prob annex (fast/). May import the shared grpo/ modules and grpo.rollout (its masks and the
engines' log-prob correction); never policy_eval, the inspector or the training loop.
"""
