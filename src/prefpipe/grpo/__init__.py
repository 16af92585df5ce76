"""GRPO: group-relative policy optimisation of a causal LM against reward models and rule rewards.

The package is split into rooms, each with its own `__init__` saying what it owns and what it may import
(tests/test_import_layers.py holds the order). Lowest first:

  grpo/ (these modules)  the shared vocabulary: metric and summary names (metric_names), reward functions
                         (rewards), KL estimators (kl), per-token log-probs (logprobs), data-parallel processes
                         (data_parallel), which prompts train and which evaluate (splits), loading and saving a
                         policy (policy_io)
  analyses/              what a finished run's numbers say: over-optimisation, paired differences, risk,
                         health flags, the hypothesis grid
  rollout/               who samples the completions: the decode loops, the rollout masks, the engines
  policy_eval/           what is measured on a policy: the eval_policy stage and the training's learning curve
  algorithm/             one GRPO update: advantages, the loss, the spans trained, the reference policy, the
                         optimizer pass, the state a checkpoint keeps
  inspector/             the one-step inspector: what a step keeps and the token-by-token table recomputed from it
  training/              the loop that runs the algorithm step after step, and the train_grpo stage

Modules here import only prefpipe.common, settings, data, generation and reward, never a room. Stage entry
points live in prefpipe.train_grpo, prefpipe.eval_policy, prefpipe.inspect_grpo and prefpipe.grpo_hypotheses.
"""
