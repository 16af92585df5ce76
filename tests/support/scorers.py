"""Deterministic test scorers with the reward-model API (`encode`, `compare`, `head_type`, `tau`): evaluation
code can be checked by hand against them without a model."""

from __future__ import annotations

import torch


class LengthRuleScorer:
    """A BT-style scalar head: a response's reward is its length in characters, so the longer response wins.
    `batches` records each encode call's sequence lengths (prompt + response characters)."""

    head_type = "bt"
    tau = 1.0
    bayesian = False
    scalar_reward = True

    def __init__(self):
        self.batches: list[list[int]] = []

    def encode(self, prompts, responses, batch_size=16):
        self.batches.append([len(p) + len(r) for p, r in zip(prompts, responses, strict=True)])
        return {"reward": torch.tensor([float(len(r)) for r in responses])}

    def compare(self, enc_a, enc_b):
        return enc_a["reward"] - enc_b["reward"], None

    def rewards(self, enc):
        return enc["reward"]


class PairwiseSignScorer:
    """A pairwise (non-scalar) head: s(a > b) = sign(len(a) - len(b)) in characters, so it has no reward per
    response (no `rewards()`); a row's best-of-n ranking matches LengthRuleScorer's, its margins do not."""

    head_type = "gpm"
    tau = 1.0
    bayesian = False

    def encode(self, prompts, responses, batch_size=16):
        return {"length": torch.tensor([float(len(r)) for r in responses])}

    def compare(self, enc_a, enc_b):
        return torch.sign(enc_a["length"] - enc_b["length"]), None


class PlusCountScorer:
    """A scalar head whose reward is the number of '+' characters in the response: its picks are set per pair
    independently of length, for checking length-split counts by hand."""

    head_type = "bt"
    tau = 1.0
    bayesian = False
    scalar_reward = True

    def encode(self, prompts, responses, batch_size=16):
        return {"reward": torch.tensor([float(r.count("+")) for r in responses])}

    def compare(self, enc_a, enc_b):
        return enc_a["reward"] - enc_b["reward"], None

    def rewards(self, enc):
        return enc["reward"]
