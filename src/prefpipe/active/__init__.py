"""Active learning for reward models (docs/findings/ACTIVE_LEARNING.md): acquisition strategies, labelled sets per round, pool
scoring and the accuracy-vs-labels curve (workflow/rules/active.smk)."""
