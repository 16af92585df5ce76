"""Analyses of GRPO runs: reward over-optimisation (hacking), paired differences between policies (paired),
whether a risk-averse reward's penalty can act (risk), health flags of a training run (health) and the hypothesis
grid's verdicts (hypotheses). Pure functions of logged numbers and summaries, without torch models: the report
reads them too. May import the shared grpo/ modules (metric_names, rewards) and the packages below grpo
(common, settings); never another grpo room.
"""
