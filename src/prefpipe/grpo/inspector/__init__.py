"""The one-step inspector: what the trainer keeps of a step named in `grpo.inspect_steps` (save) and that
step recomputed token by token with the algorithm's own functions (table); prefpipe.inspect_grpo runs it and
report/inspect_step_page.py renders it. May import the shared grpo/ modules, grpo.rollout and grpo.algorithm;
never training (which imports save to keep its steps).
"""
