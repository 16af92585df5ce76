"""bf16 GRPO (`dtype: bfloat16`): the optimizer steps fp32 master copies of half-precision weights (an update
below bf16's rounding step would otherwise vanish), log-probs come out fp32, and a tiny run on the same seed
samples the same completions as the fp32 run with its metrics within stated tolerances, full-weight and LoRA."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from support.models import chat_tokenizer, save_grpo_inputs, tiny_llama
from support.settings import grpo_settings, stage_json
from support.stages import run_main

from prefpipe import train_grpo
from prefpipe.common.io import read_jsonl
from prefpipe.common.optim.master_weights import MasterWeights
from prefpipe.grpo.algorithm.update import make_adamw
from prefpipe.grpo.logprobs import completion_logprobs

# bf16 vs fp32 on the same seed over 4 steps at lr 1e-3 (observed: grad norm 4.7e-3, entropy 2.9e-6,
# KL 3.3e-2 relative; the same completions sampled). The KL to the reference is relative to |fp32 KL| + 1e-5:
# with LoRA it stays below 1e-5, where bf16 logits' rounding is the size of the value itself.
GRAD_NORM_RTOL, ENTROPY_RTOL, KL_RTOL, KL_FLOOR = 1e-2, 1e-4, 1e-1, 1e-5


def _adam(params, lr=1e-5):
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0, foreach=True)


def test_master_weights_keep_updates_that_bf16_rounds_away():
    torch.manual_seed(0)
    start = (0.02 + 0.005 * torch.rand(64)).bfloat16()  # bf16 spacing there: 1.2e-4
    grads = [torch.randn(64).bfloat16() for _ in range(3)]
    plain = torch.nn.Parameter(start.clone())
    half = torch.nn.Parameter(start.clone())
    reference = torch.nn.Parameter(start.float())  # fp32 AdamW on the same (bf16) gradients
    plain_opt, master_opt, ref_opt = _adam([plain]), MasterWeights([half], _adam), _adam([reference])
    for g in grads:
        plain.grad, half.grad, reference.grad = g.clone(), g.clone(), g.float()
        plain_opt.step(), master_opt.step(), ref_opt.step()
        master_opt.zero_grad()
    assert torch.equal(plain, start)  # 3 steps of 1e-5 on weights near 0.02: every one rounded away
    assert torch.equal(master_opt.master[0], reference.detach())  # exactly fp32 AdamW
    assert torch.equal(half.detach(), reference.detach().bfloat16())  # the model holds the rounded copy
    assert half.grad is None


def test_master_weights_state_dict_resumes_from_the_fp32_copies():
    torch.manual_seed(1)
    start = torch.randn(16).bfloat16()
    grads = [torch.randn(16).bfloat16() for _ in range(4)]

    def run(opt, p, gs):
        for g in gs:
            p.grad = g.clone()
            opt.step()
            opt.zero_grad()

    a = torch.nn.Parameter(start.clone())
    whole = MasterWeights([a], _adam)
    run(whole, a, grads)
    b = torch.nn.Parameter(start.clone())
    first = MasterWeights([b], _adam)
    run(first, b, grads[:2])
    state = first.state_dict()
    c = torch.nn.Parameter(torch.zeros(16, dtype=torch.bfloat16))
    resumed = MasterWeights([c], _adam)
    resumed.load_state_dict(state)
    run(resumed, c, grads[2:])
    assert torch.equal(resumed.master[0], whole.master[0]) and torch.equal(c, a)


def test_make_adamw_masters_only_half_precision_parameters():
    settings = grpo_settings()
    fp32 = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(make_adamw(fp32, settings), torch.optim.AdamW)
    assert isinstance(make_adamw([torch.nn.Parameter(torch.zeros(2).bfloat16())], settings), MasterWeights)


def test_log_probs_of_a_bf16_policy_are_fp32_and_near_the_fp32_ones():
    tok = chat_tokenizer()
    model = tiny_llama(tok).eval()
    ids = torch.tensor([tok.encode("What is 2 plus 3? 5")])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        ref = completion_logprobs(model, ids, mask, 4, 1.0)[0]
        got = completion_logprobs(model.to(torch.bfloat16), ids, mask, 4, 1.0)[0]
    assert ref.dtype == got.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=0, atol=5e-2)  # bf16 logits, fp32 log-softmax


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return save_grpo_inputs(tmp_path_factory.mktemp("grpo_bf16"))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_bf16_grpo_run_follows_the_fp32_run(inputs, tmp_path, lora):
    runs = {}
    for dtype in ("float32", "bfloat16"):
        run = {
            "steps": 4,
            "prompts_per_step": 2,
            "num_generations": 4,
            "max_new_tokens": 6,
            "learning_rate": 1e-3,
            "mask_truncated_completions": False,
            "beta": 0.04,
            "sample_every": 1,
            "dtype": dtype,
            "lora": {"enabled": lora, "r": 4, "alpha": 8},
            "reward_model": "gpm",
            "rewards": [{"type": "reward_model", "weight": 1.0}, {"type": "verifier", "weight": 1.0}],
        }
        out = tmp_path / dtype
        config = stage_json(grpo_settings(run, run="gpm", seed=0))
        paths = {"data": inputs / "data", "policy": inputs / "base", "reward_model": inputs / "rm"}
        assert run_main(train_grpo.main, config, **paths, out=out)[0] == 0
        runs[dtype] = (read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "samples.jsonl"))
    (ref, ref_samples), (got, got_samples) = runs["float32"], runs["bfloat16"]
    assert [s["completion"] for s in got_samples] == [s["completion"] for s in ref_samples]

    def worst(key, floor=0.0):
        """Largest |bf16 - fp32| / (|fp32| + floor) over the steps."""
        return max(abs(b[key] - a[key]) / (abs(a[key]) + floor) for a, b in zip(ref, got, strict=True))

    grad, entropy, kl = worst("grad_norm"), worst("entropy"), worst("kl_k3_mean", KL_FLOOR)
    kl_abs = max(abs(b["kl_k3_mean"] - a["kl_k3_mean"]) for a, b in zip(ref, got, strict=True))
    print(f"bf16 vs fp32 GRPO ({'LoRA' if lora else 'full'}), 4 steps: max relative diff grad norm {grad:.1e}, "
          f"entropy {entropy:.1e}, KL {kl:.1e} (max |diff| {kl_abs:.1e}, fp32 KL up to "
          f"{max(a['kl_k3_mean'] for a in ref):.1e})")  # fmt: skip
    assert grad <= GRAD_NORM_RTOL and entropy <= ENTROPY_RTOL and kl <= KL_RTOL
    assert got[0]["grad_norm"] != ref[0]["grad_norm"]  # the bf16 run really computed in bf16
    if not lora:
        saved = load_file(tmp_path / "bfloat16" / "policy" / "model.safetensors")
        assert {v.dtype for v in saved.values()} == {torch.bfloat16}
    assert json.loads((tmp_path / "bfloat16" / "summary.json").read_text())["all_finite"]
