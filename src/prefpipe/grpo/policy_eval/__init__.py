"""Policy evaluation: what is measured on a policy (measures: completions for held-out prompts, verifier
accuracy with its interval, KL to a reference), the eval_policy stage that compares the base and the trained
policy (stage) and the learning curve the trainer records with the same measures (curve). It lives in grpo/, not
beside reward evaluation (prefpipe.evaluation), because it samples with grpo's rollout and scores with its
log-probs and KL, which prefpipe.evaluation (ranked level with grpo) may not import. May import the shared grpo/
modules, grpo.rollout and grpo.analyses (paired differences); never the algorithm, inspector or training.
"""
