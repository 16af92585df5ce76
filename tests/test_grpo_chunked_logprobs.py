"""grpo.<run>.logprob_chunk_tokens (grpo/logprobs.py, grpo/output_layer.py): log-probs through the decoder's
final hidden states and the output layer in checkpointed chunks equal the plain path's (the CausalLM's logits),
and the logits are never all there at once.

Independent reference: the plain path, i.e. `model(...).logits` from transformers' own CausalLM forward (lm_head,
and for Gemma-2 its final soft-cap), through the same log-softmax. Models: a tiny Llama and a tiny Gemma-2 with
`final_logit_softcapping` small enough that the cap bends the logits (the bare lm_head gives other logits: checked),
both built from configs in float64 so the comparison is tight: TOL = 1e-9 on log-probs, entropy and every trainable
parameter's gradient (observed: at most a few 1e-15), full fine-tuning and LoRA, temperature 0.7, chunks that do
not divide the position count; the per-micro-batch path, the shared-prompt two-call form (its first-token
`logits_to_keep=1` call and the KV-cache call) and the one-call prefix-packed form; the whole `update` (old,
reference and policy log-probs with entropy; a frozen-copy and a disable_adapter reference).
"""

from __future__ import annotations

import pytest
import torch
from support.settings import grpo_settings

from prefpipe.common.config import ConfigError
from prefpipe.common.torch_runtime.transformers_api import get_peft_model
from prefpipe.grpo.algorithm.fast.shared_prompt import prefix_packed_logprobs, shared_prompt_logprobs
from prefpipe.grpo.algorithm.reference import build_reference
from prefpipe.grpo.algorithm.update import Learner, StepBatch, make_adamw, update
from prefpipe.grpo.data_parallel import DataParallel
from prefpipe.grpo.logprobs import completion_logprobs, logprob_chunk_tokens, set_logprob_chunk_tokens
from prefpipe.grpo.output_layer import OUTPUT_LAYERS, decoder, output_layer
from prefpipe.grpo.rollout.completions import Rollout

V, TOL, TOL_FP32, TEMPERATURE, CHUNK = 96, 1e-9, 1e-5, 0.7, 5
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2, pad_token_id=0,
              bos_token_id=1, eos_token_id=2)  # fmt: skip


def _model(kind: str, seed: int = 3) -> torch.nn.Module:
    """A random float64 CausalLM of `kind` (config.model_type), from its config."""
    import transformers

    extra = {
        "llama": dict(tie_word_embeddings=False),
        "qwen2": dict(tie_word_embeddings=False),
        "gemma": dict(head_dim=8, tie_word_embeddings=True),
        "gemma2": dict(
            head_dim=8,
            sliding_window=4,
            query_pre_attn_scalar=8,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=0.5,
            tie_word_embeddings=True,
        ),
    }[kind]
    names = {"llama": "Llama", "qwen2": "Qwen2", "gemma": "Gemma", "gemma2": "Gemma2"}[kind]
    config = getattr(transformers, f"{names}Config")(**COMMON, **extra)
    torch.manual_seed(seed)
    return getattr(transformers, f"{names}ForCausalLM")(config).double()


def _lora(model: torch.nn.Module) -> torch.nn.Module:
    from peft import LoraConfig

    policy = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    for name, p in policy.named_parameters():  # B != 0: the adapter changes the outputs and the gradients
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1, generator=torch.Generator().manual_seed(len(name)))
    return policy


def _policy(kind: str, lora: bool) -> torch.nn.Module:
    model = _model(kind)
    return _lora(model) if lora else model


def _batch(rows: int = 4, width: int = 9, padded: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids; with `padded` row 1 and the last row left padded. transformers' float64 Gemma-2 (eager attention) turns
    a left-padded row into NaN on either path (its own forward), so the float64 Gemma-2 cases are unpadded and
    one float32 case covers Gemma-2 with padding."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, V, (rows, width), generator=g)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, :3] = 0
        mask[rows - 1, :1] = 0
    return ids.masked_fill(mask == 0, 0), mask


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])


def _run(model, fn, chunk: int):
    """(log-probs, entropy, gradients of a weighted sum of the log-probs) with the given chunk (0 = plain)."""
    set_logprob_chunk_tokens(model, chunk)
    model.zero_grad(set_to_none=True)
    logp, ent = fn(model)
    (logp * torch.linspace(-1, 1, logp.numel(), dtype=logp.dtype).view_as(logp)).sum().backward()
    return logp.detach(), ent, _grads(model)


def _assert_same(model, fn, tol: float = TOL) -> float:
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = _run(model, fn, 0), _run(model, fn, CHUNK)
    worst = max(float((lp_a - lp_b).abs().max()), float((ent_a - ent_b).abs().max()))
    worst = max(worst, float((g_a - g_b).abs().max()))
    print(f"max |plain - chunked| {worst:.3g}")
    assert worst <= tol, worst  # NaN fails too
    assert g_a.abs().max() > 0  # gradients reached the trainable parameters
    return worst


@pytest.mark.parametrize("kind", sorted(OUTPUT_LAYERS))
def test_output_layer_gives_the_models_own_logits(kind):
    model = _model(kind).eval()
    ids, mask = _batch(padded=kind != "gemma2")
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).logits
        hidden = decoder(model)(input_ids=ids, attention_mask=mask).last_hidden_state
        got = output_layer(model)(hidden)
        bare = model.get_output_embeddings()(hidden)
    assert torch.allclose(got, want, atol=1e-12, rtol=0)
    if model.config.model_type == "gemma2":  # the soft-cap is in play: dropping it would fail the line above
        assert (bare - want).abs().max() > 0.05


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize(
    ("kind", "dtype"), [("llama", "float64"), ("gemma2", "float64"), ("gemma2", "float32")]
)
def test_chunked_completion_logprobs_equal_the_plain_path(kind, dtype, lora):
    """float32 Gemma-2 with left padding: TOL_FP32 (the chunks' matmuls may round differently)."""
    policy = _policy(kind, lora).to(getattr(torch, dtype)).train()
    ids, mask = _batch(padded=kind != "gemma2" or dtype == "float32")
    tol = TOL if dtype == "float64" else TOL_FP32
    _assert_same(policy, lambda m: completion_logprobs(m, ids, mask, 6, TEMPERATURE, with_entropy=True), tol)
    with torch.no_grad():  # old / reference log-probs: no checkpoint, chunks all the same
        set_logprob_chunk_tokens(policy, 0)
        want, _ = completion_logprobs(policy, ids, mask, 6, TEMPERATURE, micro_batch_size=3)
        set_logprob_chunk_tokens(policy, CHUNK)
        got, _ = completion_logprobs(policy, ids, mask, 6, TEMPERATURE, micro_batch_size=3)
    assert (got - want).abs().max() <= tol


@pytest.mark.parametrize("form", [shared_prompt_logprobs, prefix_packed_logprobs])
@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("kind", ["llama", "gemma2"])
def test_chunked_shared_prompt_forms_equal_the_plain_path(kind, lora, form):
    policy = _policy(kind, lora).train()
    prompts, prompt_mask = _batch(rows=3, width=5, padded=kind != "gemma2")
    group = torch.tensor([0, 0, 0, 1, 2, 2])
    comp = torch.randint(3, V, (6, 4), generator=torch.Generator().manual_seed(1))
    _assert_same(policy, lambda m: form(m, prompts, prompt_mask, group, comp, TEMPERATURE, True))


def _saved_logit_rows(policy, chunk: int, ids, mask) -> tuple[int, int]:
    """The most logit rows (positions x vocabulary) one saved-for-backward tensor holds in a training forward,
    and the most rows one output-layer call makes (forward and the backward's recomputation)."""
    set_logprob_chunk_tokens(policy, chunk)
    saved, made = [0], [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dim() and t.shape[-1] == V:
            saved[0] = max(saved[0], t.numel() // V)
        return t

    head = policy.get_output_embeddings().register_forward_hook(
        lambda _m, _i, out: made.__setitem__(0, max(made[0], out.numel() // V))
    )
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = completion_logprobs(policy, ids, mask, 6, TEMPERATURE, with_entropy=True)
    logp.sum().backward()
    head.remove()
    return saved[0], made[0]


@pytest.mark.parametrize("kind", ["llama", "gemma2"])
def test_chunks_bound_the_logits_held_at_once(kind):
    """Plain: B x (n + 1) logit rows saved (and made) at once; chunked: at most CHUNK rows, in the forward and
    in the backward's recomputation."""
    policy = _model(kind).train()
    ids, mask = _batch(rows=4, width=9, padded=kind != "gemma2")
    saved, made = _saved_logit_rows(policy, 0, ids, mask)
    assert saved >= 4 * 6 and made == 4 * 7
    saved, made = _saved_logit_rows(policy, CHUNK, ids, mask)
    assert saved <= CHUNK and made <= CHUNK


def test_an_unknown_output_layer_or_a_negative_chunk_is_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32))
    with pytest.raises(ConfigError, match="grpo.logprob_chunk_tokens.*'gpt2'"):
        set_logprob_chunk_tokens(gpt2, 8)
    set_logprob_chunk_tokens(gpt2, 0)  # off: any model
    with pytest.raises(ConfigError, match="must be >= 0"):
        set_logprob_chunk_tokens(_model("llama"), -1)


def _rollout(n: int = 8, prompt: int = 4, completion: int = 5) -> Rollout:
    g = torch.Generator().manual_seed(2)
    prompts = torch.randint(3, V, (n // 4, prompt), generator=g).repeat_interleave(4, 0)
    lengths = torch.tensor([5, 2, 4, 1, 5, 3, 5, 2])[:n]
    comp_mask = (torch.arange(completion)[None, :] < lengths[:, None]).long()
    return Rollout(
        prompt_ids=prompts, prompt_mask=torch.ones_like(prompts),
        completion_ids=torch.randint(3, V, (n, completion), generator=g), completion_mask=comp_mask,
        env_mask=torch.ones_like(comp_mask), truncated=lengths == completion,
        prompt_truncated=torch.zeros(n, dtype=torch.bool), texts=[""] * n,
    )  # fmt: skip


def _update(
    kind: str, lora: bool, fast_paths: bool, chunk: int, dtype: str, gc: bool
) -> tuple[list[torch.Tensor], dict]:
    """One `update` (2 iterations: old log-probs; beta > 0: reference log-probs; entropy): its gradients."""
    settings = grpo_settings(
        {"num_generations": 4, "max_new_tokens": 5, "beta": 0.04, "micro_batch_size": 4, "num_iterations": 2,
         "temperature": TEMPERATURE, "mask_truncated_completions": False, "max_grad_norm": 1e9,
         "learning_rate": 1e-12, "lora": {"enabled": lora}, "logprob_chunk_tokens": chunk,
         "gradient_checkpointing": gc},
        fast_paths=fast_paths,
    )  # fmt: skip
    policy = _policy(kind, lora).to(getattr(torch, dtype))
    set_logprob_chunk_tokens(policy, settings.logprob_chunk_tokens)
    params = [p for p in policy.parameters() if p.requires_grad]
    reference = build_reference(policy, "fresh" if lora else "none", True, settings.reference_mode)
    assert logprob_chunk_tokens(reference.module) == chunk  # the frozen copy (or the same module) keeps it
    learner = Learner(settings, policy, make_adamw(params, settings), params, reference, DataParallel(),
                      torch.device("cpu"))  # fmt: skip
    adv = torch.linspace(-1.0, 1.2, 8, dtype=torch.float64)
    metrics = update(learner, StepBatch([{}] * 8, _rollout(), adv.clone(), {}, adv))
    return [p.grad.clone() for p in params], metrics


@pytest.mark.parametrize("fast_paths", [False, True])
@pytest.mark.parametrize(
    ("kind", "lora", "dtype", "gc"),
    [
        ("llama", False, "float64", False),
        ("gemma2", True, "float32", False),
        ("llama", True, "float64", True),
    ],
)
def test_update_with_chunks_equals_the_plain_update(kind, lora, dtype, gc, fast_paths):
    """Through the trainer's own update: the policy's training log-probs (with entropy), the old log-probs and
    the reference's (a frozen copy for full fine-tuning: it keeps the setting; the adapter switched off for
    LoRA) give the same last-iteration gradients, loss, KL and entropy, also under gradient checkpointing (the
    shared-prompt form then takes its one-call fallback). The update keeps its metrics in float32:
    TOL_FP32 for them (and for the float32 Gemma-2, whose left-padded rows are NaN in float64: `_batch`)."""
    want_grads, want = _update(kind, lora, fast_paths, 0, dtype, gc)
    got_grads, got = _update(kind, lora, fast_paths, CHUNK, dtype, gc)
    tol = TOL if dtype == "float64" else TOL_FP32
    worst = max(float((a - b).abs().max()) for a, b in zip(want_grads, got_grads, strict=True))
    print(f"max |plain - chunked| gradient {worst:.3g}")
    assert worst <= tol
    for key in ("loss", "entropy", "kl_loss", "max_abs_log_ratio_old"):
        assert abs(want[key] - got[key]) <= TOL_FP32, key


def test_the_backward_recomputes_the_logits_but_not_the_entropy(monkeypatch):
    """checkpoint's early stop ends each chunk's recomputation at its log-probs: the detached entropy after them
    runs once per chunk, in the forward only."""
    from prefpipe.grpo import logprobs as logprobs_module

    calls: list[bool] = []
    entropy = logprobs_module.entropy_from_log_probs

    def counted(log_probs: torch.Tensor) -> torch.Tensor:
        calls.append(torch._C._current_graph_task_id() >= 0)  # True inside a backward pass
        return entropy(log_probs)

    monkeypatch.setattr(logprobs_module, "entropy_from_log_probs", counted)
    policy = _model("llama").train()
    ids, mask = _batch()
    set_logprob_chunk_tokens(policy, CHUNK)
    logp, _ = completion_logprobs(policy, ids, mask, 6, TEMPERATURE, with_entropy=True)
    logp.sum().backward()
    assert calls == [False] * -(-4 * 6 // CHUNK)


def test_the_trainer_gives_the_key_to_the_policy_and_its_frozen_copy(tmp_path):
    """GRPOTrainer sets grpo.<run>.logprob_chunk_tokens itself (every caller gets it, not only the stage), on
    the policy before it copies the reference; a model whose output layer is unknown is refused there."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from prefpipe.grpo.training.trainer import GRPOTrainer

    settings = grpo_settings(
        {"logprob_chunk_tokens": CHUNK, "beta": 0.04, "reference_mode": "frozen_copy", "device": "cpu"}
    )
    policy = _model("llama")
    assert logprob_chunk_tokens(policy) == 0
    trainer = GRPOTrainer(settings, policy, None, "none", [], [], tmp_path, run_fingerprint="fp")
    with trainer.reference.active() as reference:
        assert reference is not policy
        assert logprob_chunk_tokens(policy) == logprob_chunk_tokens(reference) == CHUNK
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(ConfigError, match="logprob_chunk_tokens"):
        GRPOTrainer(settings, gpt2, None, "none", [], [], tmp_path, run_fingerprint="fp")
