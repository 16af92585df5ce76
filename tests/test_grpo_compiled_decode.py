"""`grpo.<run>.rollout.compile_decode` (grpo/rollout/fast/static_decode.py): the fixed-shape decode step gives the
lean step's logits (eager, full and LoRA), and compiled by torch.compile (inductor on the CPU: one graph,
compiled once for the module and reused) it samples the eager decode's tokens, greedy and seeded, with
log-probs within 1e-4 of the eager step's; the key's names are the schema's and reach the plain engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from support.models import chat_tokenizer, random_lora, tiny_llama
from support.settings import grpo_settings

from prefpipe.generation.tokens import pad_token_id, tokenize_prompts
from prefpipe.grpo.rollout.engines.base import PlainEngine
from prefpipe.grpo.rollout.fast.decode import decode_compact
from prefpipe.grpo.rollout.fast.lean_decode import LeanLlama
from prefpipe.grpo.rollout.fast.static_decode import COMPILE_MODES, StaticDecode, cache_width
from prefpipe.grpo.rollout.sampling import prefill

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["What is 2 plus 3?", "Say yes.", "Say no please, now.", "Repeat cat:"]
G, T = 3, 10
LOGPROB_TOLERANCE = 1e-4  # fp32: the compiled graph reorders sums and fuses kernels, nothing else


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return tiny_llama(tok, seed=0).eval()


def _prompts(m, tok):
    batch = tokenize_prompts(tok, PROMPTS, None)
    device = next(m.parameters()).device
    return batch.input_ids.to(device), batch.attention_mask.to(device)


def _teacher_forced(m, tok, tokens: torch.Tensor, mode: str | None) -> torch.Tensor:
    """Log-probs (n, steps, vocab) of the decode steps fed `tokens` (n, steps): the lean step (mode None) or
    the static step in `mode`."""
    with torch.no_grad():
        cache, logits, attn, pos = prefill(m, *_prompts(m, tok), G)
        lean = LeanLlama.build(m, T)
        fast = lean if mode is None else StaticDecode(m, lean, mode)
        fast.start(cache, attn, pos, T)
        out = [logits.log_softmax(-1)]
        for t in range(tokens.shape[1] - 1):
            out.append(fast.step(tokens[:, t].to(attn.device)).log_softmax(-1))
    return torch.stack(out, 1).cpu()


@pytest.mark.parametrize("variant", ["full", "lora"])
def test_static_step_gives_the_lean_step_logits(model, tok, variant):
    m = model if variant == "full" else random_lora(model, 3)
    tokens = torch.randint(3, len(tok), (len(PROMPTS) * G, T), generator=torch.Generator().manual_seed(1))
    lean = _teacher_forced(m, tok, tokens, None)
    static = _teacher_forced(m, tok, tokens, "none")
    assert (lean - static).abs().max() < 1e-5
    assert cache_width(tokenize_prompts(tok, PROMPTS, None).input_ids.shape[1], T) % 64 == 0


def _decodes(m, tok, mode: str) -> dict:
    """Greedy and seeded-sampled decodes, eager and compiled in `mode`, and the graphs the compile made."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    ids, mask = _prompts(m, tok)
    u = torch.rand(len(PROMPTS) * G, T, generator=torch.Generator().manual_seed(2)).to(ids.device)
    out = {}
    with torch.no_grad():
        eos = int(m(ids[:1]).logits[0, -1].argmax())  # the untrained model's frequent token: rows end early
        for kind, uniforms in (("greedy", None), ("sampled", u)):
            args = (G, T, [eos], pad_token_id(tok), uniforms, 0.9, 0, 1.0)
            for how in ("none", mode):
                out[kind, how] = decode_compact(m, ids, mask, *args, compile_decode=how).cpu()
    out["graphs"] = counters["stats"]["unique_graphs"]  # a shape that changed per step would recompile
    return out


def _check_compiled(m, tok, decoded: dict, kind: str, mode: str) -> None:
    eager, compiled = decoded[kind, "none"], decoded[kind, mode]
    assert decoded["graphs"] == 1  # every step of both decodes ran the one graph
    assert torch.equal(compiled, eager)
    if kind == "greedy":
        assert eager.shape[1] == T  # some rows ran to the end while others finished early (pad after EOS)
    pad = pad_token_id(tok)
    assert (eager == pad).any(dim=1).sum() >= 1
    tokens = torch.where(eager == pad, 0, eager)  # a finished row's step still runs on some token
    want = _teacher_forced(m, tok, tokens, None)
    got = _teacher_forced(m, tok, tokens, mode)
    assert (got - want).abs().max() < LOGPROB_TOLERANCE


@pytest.fixture(scope="module")
def decoded(model, tok):
    """On the CPU: mode default (inductor), one shape, compiled once for every case here."""
    return _decodes(model, tok, "default")


@pytest.mark.parametrize("kind", ["greedy", "sampled"])
def test_compiled_decode_samples_the_eager_tokens_with_its_logprobs(model, tok, decoded, kind):
    _check_compiled(model, tok, decoded, kind, "default")


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device: CUDA graphs (benchmarks/device_window.sh decode)",
)
def test_cuda_graph_decode_samples_the_eager_tokens_with_its_logprobs(tok):
    """On a GPU (the device window): mode reduce-overhead, the step replayed as a CUDA graph."""
    m = tiny_llama(tok, seed=0).eval().cuda()
    decoded = _decodes(m, tok, "reduce-overhead")
    for kind in ("greedy", "sampled"):
        _check_compiled(m, tok, decoded, kind, "reduce-overhead")


def test_compile_modes_are_the_schema_enum_and_reach_the_plain_engine():
    schema = yaml.safe_load((ROOT / "workflow/schemas/grpo.schema.yaml").read_text(encoding="utf-8"))
    rollout = schema["$defs"]["grpo_run"]["properties"]["rollout"]["properties"]
    assert rollout["compile_decode"]["enum"] == list(COMPILE_MODES)
    assert grpo_settings().rollout.compile_decode == "none"
    settings = grpo_settings({"rollout": {"compile_decode": "reduce-overhead"}})
    assert PlainEngine(settings).gen.compile_decode == "reduce-overhead"
