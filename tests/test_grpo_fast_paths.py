"""The optimised GRPO paths (grpo/rollout/fast/, grpo/algorithm/fast/) give what the plain ones give on the same batch: the compacting decode
loop vs the plain one and `model.generate` (greedy), inverse-CDF sampling vs the categorical it samples, lean
decode steps vs the model's forward, unpadded and shared-prompt micro-batches vs the padded layout (log-probs,
losses, gradients), fused AdamW vs the plain loop; and the run-wide `fast_paths` switch: a GRPO run with every
fast path off takes the same steps."""

from __future__ import annotations

import pytest
import torch
from support.models import chat_tokenizer, random_lora, tiny_llama
from support.settings import grpo_settings

from prefpipe.generation.tokens import pad_token_id, tokenize_prompts
from prefpipe.grpo.algorithm.fast.packing import pack_span, share_prompt_span
from prefpipe.grpo.algorithm.losses import BatchNorms, grpo_loss
from prefpipe.grpo.algorithm.spans import loss_spans, plain_span
from prefpipe.grpo.algorithm.update import make_adamw
from prefpipe.grpo.rewards import WeightedReward
from prefpipe.grpo.rollout.completions import GenerationSettings, generate, generate_hf
from prefpipe.grpo.rollout.fast.decode import decode_compact
from prefpipe.grpo.rollout.sampling import decode, filter_logits, inverse_cdf_sample
from prefpipe.grpo.training.trainer import GRPOTrainer

PROMPTS = ["What is 2 plus 3?", "Say yes.", "Say no please, now.", "Repeat cat:"]


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    return tiny_llama(tok, seed=0).eval()


def _frequent_token(model, tok) -> int:
    """A token the random model emits often, used as EOS so that rows finish at different steps."""
    ro = generate_hf(model, tok, PROMPTS, 2, GenerationSettings(12, do_sample=False, fast=True))
    values, counts = ro.completion_ids[:, 1:].flatten().unique(return_counts=True)
    return int(values[counts.argmax()])


def test_greedy_decode_equals_model_generate_with_rows_finishing_early(model, tok):
    eos = _frequent_token(model, tok)
    batch = tokenize_prompts(tok, PROMPTS, None)
    G = 3
    args = (model, batch.input_ids, batch.attention_mask, G, 12, [eos], pad_token_id(tok), None, 1.0, 0, 1.0)
    ours, plain_loop = decode_compact(*args, compile_decode="none"), decode(*args)
    plain = model.generate(
        input_ids=batch.input_ids.repeat_interleave(G, 0),
        attention_mask=batch.attention_mask.repeat_interleave(G, 0),
        max_new_tokens=12,
        do_sample=False,
        pad_token_id=pad_token_id(tok),
        eos_token_id=[eos],
    )[:, batch.input_ids.shape[1] :]
    assert (ours == eos).any(dim=1).sum() >= 2, "some rows must finish early for the test to mean anything"
    assert torch.equal(ours, plain) and torch.equal(plain_loop, plain)


def test_fast_generate_matches_generate_hf_greedy(model, tok):
    g = GenerationSettings(10, do_sample=False, fast=True)
    a, b = generate(model, tok, PROMPTS, 2, g), generate_hf(model, tok, PROMPTS, 2, g)
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert torch.equal(a.completion_mask, b.completion_mask) and torch.equal(a.prompt_ids, b.prompt_ids)


def test_sampling_does_not_depend_on_compaction_or_the_rest_of_the_batch(model, tok):
    eos = _frequent_token(model, tok)
    batch = tokenize_prompts(tok, PROMPTS, None)
    G, T = 4, 10
    u = torch.rand(len(PROMPTS) * G, T, generator=torch.Generator().manual_seed(1))
    args = (G, T, [eos], pad_token_id(tok))
    compact = decode_compact(
        model, batch.input_ids, batch.attention_mask, *args, u, 0.9, 0, 1.0, compile_decode="none"
    )
    plain = decode(model, batch.input_ids, batch.attention_mask, *args, u, 0.9, 0, 1.0)
    assert (compact == eos).any(dim=1).sum() >= 2
    assert torch.equal(compact, plain)
    # the last two prompts alone (a data-parallel process's share) draw the same tokens for their rows
    part = decode_compact(
        model,
        batch.input_ids[2:],
        batch.attention_mask[2:],
        *args,
        u[2 * G :],
        0.9,
        0,
        1.0,
        compile_decode="none",
    )
    assert torch.equal(part, compact[2 * G :, : part.shape[1]])
    assert (compact[2 * G :, part.shape[1] :] == pad_token_id(tok)).all()


def test_inverse_cdf_sampling_picks_the_first_token_reaching_u():
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    for u, want in ((0.0, 0), (0.05, 0), (0.1, 0), (0.11, 1), (0.3, 1), (0.31, 2), (0.61, 3), (0.9999, 3)):
        assert int(inverse_cdf_sample(probs, torch.tensor([u]))) == want
    # frequencies over many uniforms follow the probabilities (independent check with a fixed draw)
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0))
    picks = inverse_cdf_sample(probs.expand(len(u), -1), u)
    freq = torch.bincount(picks, minlength=4).float() / len(u)
    assert torch.allclose(freq, probs[0], atol=0.005)


def test_top_k_and_top_p_filters_keep_the_expected_tokens():
    logits = torch.log(torch.tensor([[0.05, 0.4, 0.15, 0.3, 0.1]]))
    kept_k = torch.isfinite(filter_logits(logits, 2, 1.0))[0].tolist()
    assert kept_k == [False, True, False, True, False]
    kept_p = torch.isfinite(filter_logits(logits, 0, 0.8))[0].tolist()  # 0.4 + 0.3 + 0.15 reaches 0.8
    assert kept_p == [False, True, True, True, False]


def _rollout(model, tok):
    torch.manual_seed(3)
    ro = generate(model, tok, PROMPTS, 4, GenerationSettings(8, temperature=1.0, fast=True))
    # make the rollout uneven: some completions end early (EOS at a different step per row), some truncated
    eos = pad_token_id(tok)
    ids = ro.completion_ids.clone()
    for r in range(ids.shape[0]):
        if r % 3 != 2:
            ids[r, 1 + r % 6] = eos
            ids[r, 2 + r % 6 :] = eos
    from prefpipe.grpo.rollout.completions import completion_mask

    mask, has_eos = completion_mask(ids, [eos])
    ro.completion_ids, ro.completion_mask, ro.truncated = ids, mask, ~has_eos
    ro.env_mask = torch.ones_like(mask)
    return ro


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("mask_truncated", [True, False])
def test_unpadded_micro_batches_give_the_padded_losses_and_gradients(model, tok, loss_type, mask_truncated):
    ro = _rollout(model, tok)
    spans = loss_spans(ro, "completion", mask_truncated, 5)
    n = ro.completion_ids.shape[0]
    adv = torch.linspace(-1.0, 1.0, n)
    norms = BatchNorms(n, sum(int(sp.mask.sum()) for sp in spans), len(spans), 8)
    results = []
    layouts = (
        lambda sp: plain_span(ro, sp),
        lambda sp: pack_span(ro, sp, pad_token_id(tok)),
        lambda sp: share_prompt_span(ro, sp, 4),  # each prompt forwarded once per micro-batch
    )
    for build in layouts:
        model.zero_grad()
        losses, logps = [], []
        for sp in spans:
            mb = build(sp)
            logp, ent = mb.logprobs(model, 0.7, with_entropy=True)
            ref = logp.detach() + 0.05
            out = grpo_loss(
                logp, logp.detach() - 0.01, adv[mb.rows], mb.mask, norms, loss_type=loss_type,
                eps_low=0.2, eps_high=0.28, beta=0.04, ref_logp=ref, kl_estimator="k3", log_ratio_clamp=20.0,
                objective="ppo_clip",
            )  # fmt: skip
            out.loss.backward()
            losses.append(out.loss.detach())
            full = torch.zeros(n, mb.n_scored)
            full[mb.rows] = logp.detach() * mb.mask
            logps.append(full)
            full = torch.zeros(n, mb.n_scored)
            full[mb.rows] = ent * mb.mask
            logps.append(full)
            # the no-entropy (selective log-softmax) form gives the same log-probs
            with torch.no_grad():
                assert torch.allclose(
                    mb.logprobs(model, 0.7)[0] * mb.mask, logp.detach() * mb.mask, atol=1e-5
                )
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        results.append((torch.stack(losses).sum(), logps, grads))
    loss_a, logp_a, grad_a = results[0]
    for loss_b, logp_b, grad_b in results[1:]:
        assert torch.allclose(loss_a, loss_b, atol=1e-6, rtol=1e-5)
        for a, b in zip(logp_a, logp_b, strict=True):
            assert torch.allclose(a, b, atol=1e-5)
        assert torch.allclose(grad_a, grad_b, atol=1e-6, rtol=1e-4)
    packed = [pack_span(ro, sp, pad_token_id(tok)) for sp in spans]
    plain_tokens = sum(plain_span(ro, sp).input_ids.numel() for sp in spans)
    assert sum(p.input_ids.numel() for p in packed) < plain_tokens  # it does drop padding
    shared = [share_prompt_span(ro, sp, 4) for sp in spans]
    shared_tokens = sum(s.prompt_ids.numel() + s.completion_ids.numel() for s in shared)
    assert shared_tokens < sum(
        p.input_ids.numel() for p in packed
    )  # and each prompt goes once per micro-batch


def test_fused_adamw_steps_like_the_plain_loop(tok):
    cfg = grpo_settings({"learning_rate": 1e-2, "weight_decay": 0.01})
    ref_model, fast_model = tiny_llama(tok, seed=1), tiny_llama(tok, seed=1)
    plain = torch.optim.AdamW(
        list(ref_model.parameters()), lr=cfg.learning_rate, betas=cfg.adam_betas,
        weight_decay=cfg.weight_decay, foreach=False,
    )  # fmt: skip
    fast = make_adamw(list(fast_model.parameters()), cfg)
    assert fast.defaults.get("fused") or fast.defaults.get("foreach")
    ids = torch.randint(0, 100, (3, 7), generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        for m, opt in ((ref_model, plain), (fast_model, fast)):
            opt.zero_grad()
            m(input_ids=ids, labels=ids).loss.backward()
            opt.step()
    for a, b in zip(ref_model.parameters(), fast_model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("variant", ["full", "lora", "lora_disabled", "full_unfused"])
def test_lean_decode_steps_give_the_model_forward_logits_and_samples(model, tok, variant, monkeypatch):
    import contextlib

    from prefpipe.grpo.rollout.fast import lean_decode
    from prefpipe.grpo.rollout.fast.lean_decode import LeanLlama

    if variant == "full_unfused":  # the large-layer path: q/k/v and gate/up stay separate matmuls
        monkeypatch.setattr(lean_decode, "FUSE_ELEMENTS_PER_STEP", 0)
        variant = "full"

    m = model if variant == "full" else random_lora(model, 5)
    ctx = m.disable_adapter() if variant == "lora_disabled" else contextlib.nullcontext()
    batch = tokenize_prompts(tok, PROMPTS, None)
    G, T = 3, 12
    u = torch.rand(len(PROMPTS) * G, T, generator=torch.Generator().manual_seed(2))
    with ctx, torch.no_grad():
        eos = _frequent_token(m, tok)
        args = (G, T, [eos], pad_token_id(tok))
        # logits of one lean step against the model's forward on the same prefix (GQA: 4 heads, 2 kv heads)
        lean = LeanLlama.build(m, 4)
        assert lean is not None
        pos = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
        first = m(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=pos, use_cache=True
        )
        lean.start(first.past_key_values, batch.attention_mask, pos[:, -1] + 1, 4)
        nxt = torch.tensor([3, 7, 11, 13])
        full_ids = torch.cat([batch.input_ids, nxt[:, None]], 1)
        full_mask = torch.cat([batch.attention_mask, torch.ones(4, 1, dtype=torch.long)], 1)
        full_pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
        want = m(input_ids=full_ids, attention_mask=full_mask, position_ids=full_pos).logits[:, -1]
        assert torch.allclose(lean.step(nxt), want, atol=1e-5)
        for uu in (None, u):  # greedy and sampled, rows finishing early (compaction)
            fast = decode_compact(
                m, batch.input_ids, batch.attention_mask, *args, uu, 0.9, 0, 1.0, compile_decode="none"
            )
            forward = decode_compact(
                m,
                batch.input_ids,
                batch.attention_mask,
                *args,
                uu,
                0.9,
                0,
                1.0,
                lean=False,
                compile_decode="none",
            )
            plain = decode(m, batch.input_ids, batch.attention_mask, *args, uu, 0.9, 0, 1.0)
            if uu is None:
                assert (fast == eos).any(dim=1).sum() >= 2
            assert torch.equal(fast, forward) and torch.equal(fast, plain)


def test_lean_decode_declines_what_it_does_not_know(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    from prefpipe.grpo.rollout.fast.lean_decode import LeanLlama

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32))
    assert LeanLlama.build(gpt2, 4) is None


@pytest.mark.parametrize("width", [1, 7])
def test_prefix_packed_one_call_equals_the_cache_two_call_form(tok, width):
    """Groups of unequal size (3, 1, 2 rows): log-probs, entropy and gradients of the one-call form (completions
    packed behind their prompt under a 4-D mask) against the two-call form, itself checked against the padded
    layout in the test above."""
    from prefpipe.grpo.algorithm.fast.shared_prompt import prefix_packed_logprobs, shared_prompt_logprobs

    m = tiny_llama(tok, seed=3)
    batch = tokenize_prompts(tok, PROMPTS[:3], None)
    group = torch.tensor([0, 0, 0, 1, 2, 2])
    comp = torch.randint(5, 200, (6, width), generator=torch.Generator().manual_seed(0))
    res = []
    for fn in (shared_prompt_logprobs, prefix_packed_logprobs):
        m.zero_grad()
        logp, ent = fn(m, batch.input_ids, batch.attention_mask, group, comp, 0.7, True)
        (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        res.append((logp.detach(), ent, torch.cat([p.grad.flatten() for p in m.parameters()])))
    (lp_a, ent_a, grad_a), (lp_b, ent_b, grad_b) = res
    assert torch.allclose(lp_a, lp_b, atol=1e-5)
    assert torch.allclose(ent_a, ent_b, atol=1e-5)
    assert torch.allclose(grad_a, grad_b, atol=1e-5, rtol=1e-4)


def test_shared_prompt_form_without_a_cache_falls_back_to_one_call(tok):
    """A policy under gradient checkpointing returns no KV cache in training mode; the two-call form then takes
    the one-call form and gives the same log-probs."""
    from prefpipe.grpo.algorithm.fast.shared_prompt import shared_prompt_logprobs

    m = tiny_llama(tok, seed=3)
    batch = tokenize_prompts(tok, PROMPTS[:2], None)
    group = torch.tensor([0, 0, 1])
    comp = torch.randint(5, 200, (3, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, _ = shared_prompt_logprobs(m, batch.input_ids, batch.attention_mask, group, comp, 1.0)
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.train()
    got, _ = shared_prompt_logprobs(m, batch.input_ids, batch.attention_mask, group, comp, 1.0)
    assert torch.allclose(got.detach(), want, atol=1e-5)


def _switch_run(tmp_path, tok, fast: bool, mask_mode: str = "completion") -> GRPOTrainer:
    rows = [{"id": str(i), "prompt": p, "answer": "5", "kind": "add"} for i, p in enumerate(PROMPTS)]
    cfg = grpo_settings(
        {
            "steps": 1,
            "prompts_per_step": 3,
            "num_generations": 4,
            "max_new_tokens": 6,
            "learning_rate": 3e-2,
            "beta": 0.04,
            "num_iterations": 2,
            "micro_batch_size": 3,
            "sample_every": 1,
            "checkpoint_every": 0,
            "mask_truncated_completions": False,
            "mask_mode": mask_mode,
        },
        fast_paths=fast,
    )
    assert cfg.fast_paths is fast
    digits = WeightedReward(
        "digits", 1.0, lambda x: torch.tensor([float(sum(map(str.isdigit, t))) for t in x.completions])
    )
    trainer = GRPOTrainer(
        cfg, tiny_llama(tok, seed=4), tok, "none", rows, [digits], tmp_path, run_fingerprint="fp"
    )
    trainer.train()
    return trainer


@pytest.mark.parametrize("mask_mode", ["completion", "with_prompt"])
def test_fast_paths_switch_off_takes_the_same_grpo_steps(tmp_path, tok, monkeypatch, mask_mode):
    """fast_paths: false sends generation to the plain decode loop and micro-batches to the padded layout (plain
    log-probs): the same completions, and the first optimizer pass's loss, KL, log-ratio and entropy within this
    file's tolerances. (Later passes are compared only loosely: Adam turns a 1e-7 gradient difference on a
    near-zero gradient entry into a full-size step, so two runs part after the first update either way.)"""
    from prefpipe.grpo.algorithm.fast import packing
    from prefpipe.grpo.rollout import completions as rollout

    calls = {"compact": 0, "shared": 0}

    def counting(name, fn):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(rollout, "decode_compact", counting("compact", rollout.decode_compact))
    monkeypatch.setattr(packing, "grouped_logprobs", counting("shared", packing.grouped_logprobs))
    on = _switch_run(tmp_path / "on", tok, True, mask_mode)
    fast_calls = dict(calls)
    calls.update(compact=0, shared=0)
    off = _switch_run(tmp_path / "off", tok, False, mask_mode)
    assert fast_calls["compact"] > 0 and calls == {"compact": 0, "shared": 0}
    assert (fast_calls["shared"] > 0) == (mask_mode == "completion")
    assert [s["completion"] for s in on.sample_rows] == [s["completion"] for s in off.sample_rows]
    keys = ["loss_first_iteration", "kl_k1_mean", "kl_k3_mean", "kl_k3_max", "max_abs_log_ratio", "entropy"]
    keys += ["reward_mean", "completion_length_mean", "num_loss_tokens", "prompt_loss_share"]
    (a,), (b,) = on.metric_rows, off.metric_rows
    for key in keys:
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-5)
