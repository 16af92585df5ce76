"""A scripted policy for episode tests: a real tiny causal LM (its KV cache, positions and padding run as in
training) whose logits are replaced, row by row, by a one-hot on the next token of the row's script. The script
is the whole expected episode (policy and environment tokens) after the prompt; while a row's sequence so far is
a prefix of it, the policy writes the script's next token, and once it is not (the environment wrote something
else) it writes EOS. So an episode reproduces its script exactly when, and only when, the decode's environment
turns add exactly the scripted environment tokens."""

from __future__ import annotations

import torch

from prefpipe.common.torch_runtime.transformers_api import cache_kwargs


class ScriptedPolicy(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, prompts: list[list[int]], scripts: list[list[int]], eos: int):
        """`scripts[p]`: the episode ids after prompt `prompts[p]` (the prompt's own ids, unpadded)."""
        super().__init__()
        self.model, self.eos = model, eos
        self.expected = {tuple(p): s for p, s in zip(prompts, scripts, strict=True)}
        self.config, self.generation_config = model.config, model.generation_config
        self.rows: list[list[int]] = []  # what each row was fed, attended tokens only

    def _next(self, seen: list[int]) -> int:
        for prompt, script in self.expected.items():
            k = len(prompt)
            if (
                tuple(seen[:k]) == prompt
                and seen[k:] == script[: len(seen) - k]
                and len(seen) - k < len(script)
            ):
                return script[len(seen) - k]
        return self.eos

    def forward(self, input_ids, attention_mask, position_ids, cache=None, use_cache=True, logits_to_keep=0):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **({"use_cache": True} if cache is None else cache_kwargs(self.model, cache)),
        )
        width = input_ids.shape[1]
        fed = [
            ids[bits.bool()].tolist() for ids, bits in zip(input_ids, attention_mask[:, -width:], strict=True)
        ]
        if cache is None:  # the prefill: one row per prompt
            self.rows = fed
        else:
            if len(self.rows) != len(fed):  # the prompts' cache was repeated for the group
                group = len(fed) // len(self.rows)
                self.rows = [r for r in self.rows for _ in range(group)]
            self.rows = [r + f for r, f in zip(self.rows, fed, strict=True)]
        logits = torch.full((len(fed), width, out.logits.shape[-1]), -1e9)
        for i, row in enumerate(self.rows):
            logits[i, :, self._next(row)] = 0.0
        out["logits"] = logits  # the model's own output (its cache included), the script's logits
        return out
