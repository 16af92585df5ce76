"""SFT pieces against independent computations: masked loss, label masks, padding, LR schedule, training."""

from __future__ import annotations

import math

import pytest
import torch
from support.settings import base_settings, world_settings

from prefpipe.base.model import build_tiny_llama
from prefpipe.base.sft import IGNORE, collate, encode_demonstrations, lr_factor, masked_lm_loss, train_sft
from prefpipe.base.tokenizer import train_tokenizer
from prefpipe.data.synthetic_world import build_world

SYNTH = world_settings(
    pairs=(4, 2), triples=(3, 3), rl_prompts=(8, 8), demonstrations=200, demo_error_rate=0.0
)
TINY = base_settings(
    {
        "model": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 64,
        }
    }
).model


@pytest.fixture(scope="module")
def demos() -> list[dict]:
    return build_world(SYNTH, seed=2).demonstrations


@pytest.fixture(scope="module")
def tokenizer(demos):
    return train_tokenizer([t for r in demos for t in (r["prompt"], r["response"])], 300, 64)


def test_masked_loss_matches_explicit_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 11, generator=gen)
    labels = torch.randint(0, 11, (3, 6), generator=gen)
    labels[0, :3] = IGNORE
    labels[1, 4:] = IGNORE
    labels[2, 0] = IGNORE
    total, count = 0.0, 0
    for b in range(3):
        for t in range(5):  # logits at t predict the label at t + 1
            target = int(labels[b, t + 1])
            if target == IGNORE:
                continue
            total += -math.log(
                math.exp(logits[b, t, target]) / sum(math.exp(v) for v in logits[b, t].tolist())
            )
            count += 1
    assert masked_lm_loss(logits, labels).item() == pytest.approx(total / count, rel=1e-5)


def test_labels_cover_response_and_eos_only(tokenizer, demos) -> None:
    data = encode_demonstrations(tokenizer, demos[:20], max_length=96)
    for (ids, labels), row in zip(data.examples, demos[:20], strict=True):
        kept = [t for t in labels if t != IGNORE]
        assert kept[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(kept[:-1]) == row["response"]
        assert labels[: len(ids) - len(kept)] == [IGNORE] * (len(ids) - len(kept))
        assert ids[len(ids) - len(kept) - 1] == tokenizer.convert_tokens_to_ids("<|assistant|>")


def test_skipped_rows_are_counted_and_bad_rows_named(tokenizer, demos) -> None:
    rows = demos[:10] + [{"id": "e", "prompt": "Repeat: cat", "response": "  "}]
    lengths = sorted(len(ids) for ids, _ in encode_demonstrations(tokenizer, demos[:10], 96).examples)
    data = encode_demonstrations(tokenizer, rows, max_length=lengths[4])
    assert data.skipped["empty_response"] == 1
    assert data.skipped["too_long"] == 10 - len(data.examples) and data.skipped["too_long"] > 0
    with pytest.raises(ValueError, match="row 1 .*'x'"):
        encode_demonstrations(tokenizer, [demos[0], {"id": "x", "prompt": 3, "response": "a"}], 96)


def test_collate_pads_right_and_masks() -> None:
    batch = collate([([5, 6, 7], [IGNORE, 6, 7]), ([8], [IGNORE])], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["labels"].tolist() == [[IGNORE, 6, 7], [IGNORE, IGNORE, IGNORE]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_lr_schedule_closed_form() -> None:
    warm, total, floor = 10, 110, 0.1
    assert lr_factor(0, warm, total, floor) == pytest.approx(0.1)
    assert lr_factor(9, warm, total, floor) == pytest.approx(1.0)
    assert lr_factor(10, warm, total, floor) == pytest.approx(1.0)
    assert lr_factor(60, warm, total, floor) == pytest.approx(floor + (1 - floor) * 0.5)  # half way: cos = 0
    assert lr_factor(85, warm, total, floor) == pytest.approx(
        floor + (1 - floor) * 0.5 * (1 + math.cos(0.75 * math.pi))
    )
    assert lr_factor(110, warm, total, floor) == pytest.approx(floor)
    assert lr_factor(500, warm, total, floor) == pytest.approx(floor)
    assert lr_factor(0, 0, 100, 0.0) == pytest.approx(1.0)


def test_training_lowers_loss_and_is_deterministic(tokenizer, demos) -> None:
    data = encode_demonstrations(tokenizer, demos, max_length=64)
    cfg = base_settings(
        {
            "sft": {
                "steps": 60,
                "batch_size": 16,
                "learning_rate": 1e-2,
                "warmup_steps": 5,
                "weight_decay": 0.0,
                "max_length": 64,
            }
        }
    ).sft
    runs = []
    for _ in range(2):
        model = build_tiny_llama(TINY, tokenizer, seed=0)
        losses: list[float] = []
        train_sft(
            model,
            data,
            cfg,
            tokenizer.pad_token_id,
            seed=0,
            log_step=lambda losses=losses, **m: losses.append(m["sft_loss"]),
        )
        runs.append(losses)
    assert runs[0] == runs[1]
    assert sum(runs[0][-5:]) / 5 < 0.6 * sum(runs[0][:5]) / 5
