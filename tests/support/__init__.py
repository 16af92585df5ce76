"""Shared test builders (imported as `support.<module>`; pytest puts tests/ on sys.path):

- settings: typed settings from the real config (config/config.yaml + an overlay), never test-written defaults
- models: tiny tokenizers, tiny Llamas and reward models on them, saved as HF folders
- rows: preference pairs, RL prompts and data folders in the shapes prep_data writes
- scorers: deterministic scorers with the reward-model API
- stages: calling a stage entry point (argv, exit code and error lines, subprocess environment)
- workflow: copies of the workflow in a temp folder (with a test config embedded)
- results_tree, markdown_tables: a results tree for the report tests, and reading report.md back
"""
