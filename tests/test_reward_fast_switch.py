"""The run-wide `fast_paths` switch: false sends every reward fast path (prefpipe.reward.fast and the scoring
batches) to its plain path, and a tiny reward model then gives the same scores and training losses as with
them on, within the tolerances of the per-path equivalence tests (scores: test_reward_lean_encode's rtol and
atol 1e-5; training metrics: test_reward_fast_paths' 1e-4 at the first step, 1e-3 later)."""

from __future__ import annotations

import pytest
import torch
from support.models import save_tiny_base
from support.settings import TINY_REWARD, reward_settings
from test_reward_fast_paths import mixed_pairs

import prefpipe.reward.collate as collate
from prefpipe.reward.fast import shared_prompt
from prefpipe.reward.model import build_reward_model, load_reward_model, save_reward_model
from prefpipe.reward.trainer import RewardTrainer
from prefpipe.settings.merge import deep_merge

HEADS = ("bt", "gpm", "bgpm")
TRAIN = {
    "steps": 3,
    "batch_size": 8,
    "micro_batch_size": 4,
    "learning_rate": 1e-4,
    "head_learning_rate": 1e-3,
}


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("fast_switch_base"))


def build(base, head: str, fast: bool, **overrides):
    """The same tiny model (same seed, same weights) with the switch on or off."""
    settings = reward_settings(deep_merge(TINY_REWARD, overrides), variant=head, fast_paths=fast)
    assert settings.fast_paths is fast and settings.train.share_prompt  # the default shares prompts
    torch.manual_seed(0)
    return build_reward_model(str(base), settings), settings


def rows():
    """Pairs of very different lengths, a duplicate row and a batch of one length (the mask-free case)."""
    pairs = mixed_pairs(10)
    prompts = [p.prompt for p in pairs] * 2 + ["Play!"] * 4
    responses = [p.chosen for p in pairs] + [p.rejected for p in pairs] + ["rock", "rock", "paper", "stone"]
    return prompts, responses


def counting(monkeypatch, module, name):
    """Count calls of module.name (still calling it)."""
    calls = []
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_the_switch_reaches_every_fast_path_of_the_model(tiny_base, tmp_path):
    fast, _ = build(tiny_base, "gpm", True)
    plain, _ = build(tiny_base, "gpm", False)
    flags = ("fast_paths", "selected_last_layer", "lean_scoring", "shares_prompts")
    assert [getattr(fast, f) for f in flags] == [True] * 4 and fast.encoder.fast_tokenize
    assert [getattr(plain, f) for f in flags] == [False] * 4 and not plain.encoder.fast_tokenize
    folder = save_reward_model(plain, tmp_path / "model")
    assert load_reward_model(folder).lean_scoring
    loaded = load_reward_model(folder, fast_paths=False)
    assert not (loaded.lean_scoring or loaded.selected_last_layer or loaded.encoder.fast_tokenize)


@pytest.mark.parametrize("head", HEADS)
def test_scores_are_the_same_with_fast_paths_on_and_off(tiny_base, monkeypatch, head):
    fast, _ = build(tiny_base, head, True)
    plain, _ = build(tiny_base, head, False)
    for k, v in fast.state_dict().items():
        assert torch.equal(v, plain.state_dict()[k]), k
    prompts, responses = rows()
    batched = counting(monkeypatch, collate, "token_ids")
    backbone_calls = []
    for rm in (fast, plain):
        rm.eval()
        rm.backbone.register_forward_pre_hook(lambda *_: backbone_calls.append(1))
    enc_fast, passes_fast = fast.encode_dataset(prompts, responses, 4)
    fast_counts = (len(batched), len(backbone_calls))
    enc_plain, passes_plain = plain.encode_dataset(prompts, responses, 4)
    assert fast_counts == (2, 0)  # batched backend tokenisation; the lean forward instead of transformers'
    assert (len(batched), len(backbone_calls)) == (2, passes_plain)  # plain: per-row, transformers' forward
    assert passes_plain == -(-len(prompts) // 4) and passes_fast <= passes_plain
    assert enc_fast.keys() == enc_plain.keys()
    for k in enc_fast:
        torch.testing.assert_close(
            enc_fast[k], enc_plain[k], rtol=1e-5, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}"
        )
    n = len(prompts) // 2
    half = lambda enc, part: {k: v[part] for k, v in enc.items()}  # noqa: E731
    first, second = slice(0, n), slice(n, 2 * n)
    score_fast, _ = fast.compare(half(enc_fast, first), half(enc_fast, second))
    score_plain, _ = plain.compare(half(enc_plain, first), half(enc_plain, second))
    torch.testing.assert_close(score_fast, score_plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("head", HEADS)
def test_training_losses_are_the_same_with_fast_paths_on_and_off(tiny_base, tmp_path, monkeypatch, head):
    packed = counting(monkeypatch, shared_prompt, "pack_pairs")
    histories = {}
    for fast in (True, False):
        rm, settings = build(tiny_base, head, fast, train=TRAIN)
        before = len(packed)
        histories[fast] = RewardTrainer(rm, settings, mixed_pairs(16), tmp_path / str(fast)).train().history
        used = len(packed) - before
        assert (used > 0) == fast, "shared prompts on the fast path only"
    for ref, got in zip(histories[False], histories[True], strict=True):
        for key in ("loss", "preference_loss", "grad_norm", "prob", "accuracy"):
            tol = 1e-4 if ref["step"] == 1 else 1e-3  # float32 summation order; later: amplified by Adam
            assert got[key] == pytest.approx(ref[key], rel=tol, abs=1e-6), (head, ref["step"], key)
