"""Real tiny components for the reward tests (no test functions here): a byte-level BPE tokenizer trained in
the fixture, a 2-layer Llama built from a config, saved as HF folders, plus small config/data helpers.

Test modules import these helpers (pytest puts tests/ on sys.path) and build the tiny base in a module fixture.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

from prefpipe.settings.merge import deep_merge
from prefpipe.reward.model import build_reward_model
from prefpipe.reward.settings import parse_settings

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CORPUS = [
    "Choose a move. rock paper scissors",
    "What is 2 plus 3? The answer is 5. What is 7 plus 1? 8",
    "Please be polite. I cannot help with that. Sure, here you go.",
    "the quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,!?",
]
RPS_PROMPTS = ["Choose a move.", "Pick one: rock, paper or scissors.", "Your move?", "Play!"]
RPS_BEATS = [("paper", "rock"), ("scissors", "paper"), ("rock", "scissors")]


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 10, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return tok.to_str()


def tiny_tokenizer(pad: bool = True) -> PreTrainedTokenizerFast:
    """Llama-like tokenizer (adds BOS); pad=False leaves it without a pad token."""
    kwargs = {"pad_token": "<pad>"} if pad else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        **kwargs,
    )


def save_tiny_base(folder: Path, pad: bool = True, hidden: int = 32, seed: int = 0) -> Path:
    """A 2-layer Llama backbone + tokenizer saved as an HF folder (what results/base/model looks like)."""
    tok = tiny_tokenizer(pad=pad)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    LlamaModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def reward_config(head: str = "gpm", /, **overrides) -> dict:
    """A small valid stage config; overrides are deep-merged (e.g. train={"steps": 5}, head={"dim": 6})."""
    cfg = {
        "seed": 0,
        "head": {"type": head, "dim": 4},
        "data": {"max_length": 64},
        "train": {
            "steps": 4,
            "batch_size": 8,
            "micro_batch_size": 8,
            "learning_rate": 1e-2,
            "lr_schedule": "constant",
        },
        "eval": {"batch_size": 8, "train_pairs": 0},
    }
    if head == "bgpm":
        cfg["head"]["bayes"] = {"kl_warmup_steps": 2}
    return deep_merge(cfg, overrides)


def build(base: Path, head: str = "gpm", /, seed: int = 0, **overrides):
    """Fresh RewardModel from the tiny base (head init seeded)."""
    settings = parse_settings(reward_config(head, **overrides))
    torch.manual_seed(seed)
    return build_reward_model(str(base), settings), settings


def rps_pairs() -> list[dict]:
    """Rock-paper-scissors: every pair is 'winner beats loser' under each prompt (a pure 3-cycle)."""
    rows = []
    for i, prompt in enumerate(RPS_PROMPTS):
        for winner, loser in RPS_BEATS:
            rows.append(
                {
                    "id": f"rps-{i}-{winner}",
                    "prompt": prompt,
                    "chosen": winner,
                    "rejected": loser,
                    "subset": "cyclic-rps",
                }
            )
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
