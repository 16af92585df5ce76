"""Environments: what answers a policy's tool calls in a multi-turn episode. The protocol a tool
implements and the runner that turns every failure into an observation, counted by kind (base), the registry
of environments by name (registry), and the built-in ones: BM25 search over a question's own paragraphs or a
shared corpus (search) and safe arithmetic (calculator). Torch-free: plain text in, plain text out.

A room of the vocabulary rank: it imports no other grpo module (only the packages below grpo), and the rollout's
episodes (grpo/rollout/episodes/) and everything above use it.
"""
