"""Active learning for reward models (issue 33 item 4): acquisition strategies, labelled sets per round, pool
scoring and the accuracy-vs-labels curve (workflow/rules/active.smk)."""
