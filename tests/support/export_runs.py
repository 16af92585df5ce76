"""Reward run folders as train_reward leaves them, for the export tests (prefpipe.export): a model with a
randomised head saved with its config.json and summary.json, and the exported folder's shipped modules."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import torch

from prefpipe.reward.model import save_reward_model


def randomise_head(rm) -> None:
    """Non-trivial standardisation buffers and head weights, so folding them in is tested."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in rm.head.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        norm = rm.head._modules.get("input_norm")
        if norm is not None:
            norm.mean.copy_(torch.randn(norm.mean.shape, generator=gen) * 0.1)
            norm.inv_sd.copy_(torch.rand(norm.inv_sd.shape, generator=gen) + 0.5)


def reward_run(tmp_path: Path, rm, name: str = "run") -> Path:
    """A reward run folder as train_reward leaves it (model/, config.json, summary.json)."""
    randomise_head(rm)
    run = tmp_path / name
    save_reward_model(rm.eval(), run / "model")
    config = {"experiment": "test", "seed": 0, "variant": name, "backbone": {"model": "tiny"}}
    (run / "config.json").write_text(json.dumps({"stage": "train_reward", "config": config}))
    (run / "summary.json").write_text(json.dumps({"train_pairs": 8, "test_pairs": 8, "steps": 0}))
    return run


# The start of a script for a user's interpreter without prefpipe: an import hook refuses every prefpipe module and
# records the attempt in `tried`; what follows loads an export folder's shipped modules by path, as its card says.
WITHOUT_PREFPIPE = """
import importlib.util, json, sys

tried = []


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "prefpipe":
            tried.append(name)
            raise ModuleNotFoundError(name)
        return None


sys.meta_path.insert(0, Refuse())
import torch
"""


def folder_module(folder: Path, file: str) -> ModuleType:
    """A module shipped in an export folder (reward_loader.py, prefpipe_chat.py), loaded by path as a user
    without prefpipe would."""
    spec = importlib.util.spec_from_file_location(f"exported_{Path(file).stem}", folder / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
