"""Reward heads: one module per head type, built through the registry (prefpipe.reward.heads.registry).

This package file imports nothing, so the torch-free head facts (prefpipe.reward.heads.facts) can be read
without importing a head (the report does). Importing the registry imports every head module.
"""
