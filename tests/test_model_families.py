"""The model-family matrix (issue 34, item 2): tiny random Llama, Qwen2, Qwen3, Gemma 2, Gemma 3, Mistral and Phi-3
models (tests/support/families.py, each with its own chat template) through every stage: a reward backbone under
each head (a few training steps), scoring with the fast paths against the plain path, and GRPO steps."""

from __future__ import annotations

import math

import pytest
import torch
from support.families import FAMILIES, family_tokenizer, save_family_model
from support.models import build_reward
from support.rows import arith_pairs, rps_pairs

from prefpipe.common.chat import format_pair
from prefpipe.evaluation.predictive import predictive
from prefpipe.reward.model import load_reward_model, save_reward_model
from prefpipe.reward.pairs import Pair
from prefpipe.reward.trainer import RewardTrainer

NAMES = list(FAMILIES)
PROMPTS = ["Choose a move.", "What is 2 plus 3?", "Your move?", "Say yes."] * 2
RESPONSES = ["rock", "The answer is 5.", "paper", "yes", "scissors", "The answer is 6.", "rock paper", "no"]
# A few steps of each head: the matrix checks that every stage runs and agrees with its reference, not learning.
STEPS = {
    "steps": 2,
    "batch_size": 6,
    "micro_batch_size": 3,
    "head_fit": {"before_steps": 3, "after_steps": 3},
}
# The one family whose layers the reward fast paths (selected last layer, lean scoring forward) recognise.
FAST_FAMILIES = {"llama"}
BITING_CAP = (
    0.3  # Gemma 2's logit soft-cap in the likelihood tests: small enough to change a random model's log-probs
)


@pytest.fixture(scope="module")
def family_bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {name: save_family_model(FAMILIES[name], root / name) for name in NAMES}


def _pairs() -> list[Pair]:
    rows = rps_pairs()[:6] + arith_pairs(6)
    return [Pair(r["id"], r["prompt"], r["chosen"], r["rejected"], r["subset"]) for r in rows]


@pytest.mark.parametrize(
    ("family", "end"),
    [
        ("llama", "<|eot_id|>"),
        ("qwen2", "<|im_end|>"),
        ("qwen3", "<|im_end|>"),
        ("gemma2", "<end_of_turn>"),
        ("gemma3", "<end_of_turn>"),
        ("mistral", "</s>"),
        ("phi3", "<|end|>\n<|endoftext|>"),
    ],
)
def test_pairs_end_as_the_family_ends_a_turn(family, end):
    """A formatted pair is the family's own finished conversation (its turn end, not a bare EOS where they differ)."""
    tok = family_tokenizer(FAMILIES[family])
    text = format_pair(tok, "Choose a move.", "rock")
    messages = [{"role": "user", "content": "Choose a move."}, {"role": "assistant", "content": "rock"}]
    assert text.endswith("rock" + end)
    assert tok.apply_chat_template(messages, tokenize=False).rstrip() == text


@pytest.mark.parametrize("family", NAMES)
def test_family_reward_heads_train_save_and_score(family_bases, tmp_path, family):
    """Each head trains a few finite steps on the family's backbone; the saved model scores as the live one; the
    fast scoring paths give the plain path's encodings (engaged on Llama only, fallen back elsewhere)."""
    pairs = _pairs()
    for head in ("bt", "gpm", "bgpm"):
        rm, settings = build_reward(family_bases[family], head, train=STEPS)
        result = RewardTrainer(rm, settings, pairs, tmp_path / head).train()
        assert result.steps == 2 and math.isfinite(result.final_metrics["loss"]), (head, result.final_metrics)
        rm.eval()
        assert (rm._lean_core() is not None) == (family in FAST_FAMILIES)
        fast = rm.set_fast_paths(True).encode(PROMPTS, RESPONSES, 3)
        plain = rm.set_fast_paths(False).encode(PROMPTS, RESPONSES, 3)
        save_reward_model(rm, tmp_path / head / "model")
        loaded = load_reward_model(tmp_path / head / "model", fast_paths=False).encode(PROMPTS, RESPONSES, 3)
        for key, value in plain.items():
            assert torch.isfinite(value).all() and value.std() > 0, (head, key)
            assert torch.allclose(fast[key], value, atol=1e-5, rtol=1e-4), (head, key)
            assert torch.allclose(loaded[key], value, atol=1e-6), (head, key)


@pytest.mark.parametrize(
    "family", [n for n in NAMES if FAMILIES[n].config.get("tie_word_embeddings", "gemma" in n)]
)
def test_likelihood_features_are_the_language_models_own(family_bases, family):
    """backbone.likelihood_features reads the tied-embedding families' next-token log-probs from the bare model;
    they equal the causal LM's own log_softmax(logits), Gemma 2's soft-capped logits included (fixed: the cap
    was left out, so the 'log-likelihood' was not the model's)."""
    from transformers import AutoModel, AutoModelForCausalLM

    from prefpipe.reward.likelihood import response_stats, token_log_probs

    base = family_bases[family]
    lm, bare = AutoModelForCausalLM.from_pretrained(base).eval(), AutoModel.from_pretrained(base).eval()
    if getattr(
        lm.config, "final_logit_softcapping", None
    ):  # a cap that bites on a random model's small logits
        lm.config.final_logit_softcapping = bare.config.final_logit_softcapping = BITING_CAP
    tok = family_tokenizer(FAMILIES[family])
    ids = torch.tensor(
        [tok(format_pair(tok, "Choose a move.", "rock paper"), add_special_tokens=False)["input_ids"]]
    )
    with torch.no_grad():
        want = lm(input_ids=ids).logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        hidden = bare(input_ids=ids).last_hidden_state
        softcap = getattr(bare.config, "final_logit_softcapping", None)
        got = token_log_probs(hidden, ids, bare.get_input_embeddings().weight, softcap)[:, 1:]
        stats = response_stats(bare, ids, torch.ones_like(ids), torch.tensor([3]), {})
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(stats[0, 0], want[0, 3:].mean(), atol=1e-5)  # tokens after position 3


def test_a_qwen2_gguf_imports_with_the_original_logits(family_bases, tmp_path):
    """The GGUF import on a non-Llama family: a Qwen2 (q/k/v biases, tied embeddings) written as GGUF by the
    gguf package imports to a folder whose logits, tokens and chat template are the original model's."""
    pytest.importorskip("gguf")
    from support.gguf_files import write_gguf
    from support.settings import pipeline, stage_json
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prefpipe.import_model import main as import_model

    original = AutoModelForCausalLM.from_pretrained(family_bases["qwen2"]).eval()
    tok = AutoTokenizer.from_pretrained(family_bases["qwen2"])
    gguf = write_gguf(tmp_path / "qwen2.gguf", "qwen2", original, tok)
    settings = pipeline({"models": {"q": {"gguf": str(gguf), "dtype": "float32"}}}).models["q"]
    args = ["--config", stage_json(settings), "--gguf", str(gguf), "--out", str(tmp_path / "out")]
    assert import_model(args) == 0
    folder = tmp_path / "out" / "model"
    imported = AutoModelForCausalLM.from_pretrained(folder).eval()
    imported_tok = AutoTokenizer.from_pretrained(folder)
    assert type(imported).__name__ == "Qwen2ForCausalLM" and imported_tok.chat_template == tok.chat_template
    text = format_pair(tok, "What is 2 plus 3?", "The answer is 5.")
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    assert imported_tok(text, add_special_tokens=False)["input_ids"] == ids[0].tolist()
    with torch.no_grad():
        torch.testing.assert_close(
            imported(input_ids=ids).logits, original(input_ids=ids).logits, rtol=0, atol=1e-5
        )


@pytest.mark.parametrize("family", NAMES)
def test_family_lora_left_padding_and_export(family_bases, tmp_path, family):
    """LoRA with peft's per-architecture targets, left-padded batches scoring as rows alone (sliding windows and
    soft-capping see no padding), and the BT export through the family's AutoModelForSequenceClassification."""
    from support.models import lora_reward
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from prefpipe.export.run import export_reward

    plain = {"embedding_features": False, "likelihood_features": False}
    data = {"padding_side": "left", "max_length": 128}  # no row cut: the exported class sees the whole text
    rm, _ = lora_reward(family_bases[family], "bt", backbone=plain, data=data)
    rm.eval().set_fast_paths(False)
    batched = rm.encode(PROMPTS, RESPONSES, 4)["reward"]
    alone = torch.cat([rm.encode([p], [r], 1)["reward"] for p, r in zip(PROMPTS, RESPONSES, strict=True)])
    assert not rm.encoder.truncated
    assert torch.allclose(batched, alone, atol=1e-5), (batched - alone).abs().max()
    run = tmp_path / "run"
    save_reward_model(rm, run / "model")
    info = export_reward(run, tmp_path / "export")
    assert info["format"] == "sequence-classification"
    tok = AutoTokenizer.from_pretrained(tmp_path / "export")
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "export").eval()
    texts = [format_pair(tok, p, r) for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        logits = model(**batch).logits[:, 0] + model.config.prefpipe_reward_offset
    assert torch.allclose(logits, alone, atol=1e-5), (logits - alone).abs().max()


GRPO_PROMPTS = ["Say yes.", "What is 2 plus 3? Answer with one word.", "Choose a move."]  # 3 lengths: padding


def _family_policy(base, lora: bool = False):
    """The policy as the GRPO stage loads it (pad = eos where the tokenizer has none; LoRA on all linear layers)."""
    from prefpipe.grpo.policy_io import load_policy

    settings = _grpo_settings({"lora": {"enabled": lora, "r": 4}})
    model, tok, state = load_policy(base, settings.lora, "float32", "cpu")
    return model.eval(), tok, state


def _grpo_settings(overrides: dict):
    from support.settings import grpo_settings

    small = {"steps": 2, "prompts_per_step": 3, "num_generations": 2, "max_new_tokens": 6, "micro_batch_size": 3,
             "sample_every": 1, "checkpoint_every": 0, "mask_truncated_completions": False}  # fmt: skip
    return grpo_settings(small | overrides)


@pytest.mark.parametrize("family", NAMES)
def test_family_rollout_kv_cache_and_logprobs(family_bases, family):
    """The rollout's KV-cached decode (left-padded prompts, sliding-window caches, rows leaving the batch) picks
    what a full forward over the finished rows picks (greedy), the lean Llama decode gives the plain decode's
    samples where it applies and is not taken elsewhere, and the trainer's padded log-probs of sampled tokens
    are each row's own, unpadded."""
    from prefpipe.generation.tokens import eos_token_ids, pad_token_id, tokenize_prompts
    from prefpipe.grpo.logprobs import completion_logprobs
    from prefpipe.grpo.rollout.completions import GenerationSettings, generate
    from prefpipe.grpo.rollout.fast.decode import decode_compact
    from prefpipe.grpo.rollout.fast.lean_decode import LeanLlama
    from prefpipe.grpo.rollout.sampling import decode

    model, tok, _ = _family_policy(family_bases[family])
    assert (LeanLlama.build(model, 8) is not None) == (family in FAST_FAMILIES)
    stops = {tok.eos_token_id, *tok.convert_tokens_to_ids(list(FAMILIES[family].stop))}
    assert set(eos_token_ids(tok, model)) == stops  # a reply ends at EOS or the family's turn end
    batch = tokenize_prompts(tok, GRPO_PROMPTS, None)
    uniforms = torch.rand(len(GRPO_PROMPTS) * 2, 10, generator=torch.Generator().manual_seed(0))
    args = (
        batch.input_ids,
        batch.attention_mask,
        2,
        10,
        eos_token_ids(tok, model),
        pad_token_id(tok),
        uniforms,
    )
    with torch.no_grad():
        plain = decode(model, *args, 1.0, 0, 1.0)
        assert torch.equal(decode_compact(model, *args, 1.0, 0, 1.0, lean=True, compile_decode="none"), plain)
        assert torch.equal(
            decode_compact(model, *args, 1.0, 0, 1.0, lean=False, compile_decode="none"), plain
        )
    for sample in (False, True):
        settings = GenerationSettings(max_new_tokens=10, do_sample=sample, fast=True)
        rollout = generate(model, tok, GRPO_PROMPTS, 2, settings, uniforms=uniforms if sample else None)
        n_completion = rollout.completion_ids.shape[1]
        with torch.no_grad():
            padded, _ = completion_logprobs(
                model, rollout.input_ids, rollout.attention_mask, n_completion, 1.0
            )
            for i in range(rollout.input_ids.shape[0]):
                ids = rollout.input_ids[i][rollout.attention_mask[i].bool()][None]
                n = int(rollout.completion_mask[i].sum())
                logits = model(input_ids=ids).logits[0, -n - 1 : -1].float()
                alone = logits.log_softmax(-1).gather(-1, ids[0, -n:, None])[:, 0]
                assert torch.allclose(padded[i, :n], alone, atol=1e-5), (sample, i)
                if not sample:
                    assert torch.equal(logits.argmax(-1), ids[0, -n:]), i


@pytest.mark.parametrize("family", NAMES)
def test_family_grpo_steps(family_bases, tmp_path, family):
    """Two GRPO steps (rollout, old/reference log-probs, clipped update with KL) on the family's policy, full
    fine-tuning and LoRA (all linear layers, Phi-3's fused projections included), rewarded by a GPM reward model on
    the same family loaded as the stage loads it: finite losses, the weights move."""
    from support.settings import reward_spec

    from prefpipe.grpo.rewards import build_rewards
    from prefpipe.grpo.training.trainer import GRPOTrainer

    rm, _ = build_reward(family_bases[family], "gpm", data={"max_length": 128})
    save_reward_model(rm.eval(), tmp_path / "rm")
    rewards = build_rewards([reward_spec("reward_model")], load_reward_model(tmp_path / "rm"))
    rows = [{"id": str(i), "prompt": p, "answer": "5", "kind": "add"} for i, p in enumerate(GRPO_PROMPTS)]
    for lora in (False, True):
        model, tok, state = _family_policy(family_bases[family], lora)
        before = {k: v.clone() for k, v in model.named_parameters() if v.requires_grad}
        trainer = GRPOTrainer(_grpo_settings({"beta": 0.04}), model, tok, state, rows, rewards,
                              tmp_path / str(lora), run_fingerprint="fp")  # fmt: skip
        summary = trainer.train()
        assert summary["all_finite"] and len(trainer.metric_rows) == 2, (lora, summary)
        assert any(
            row["reward_std"] > 0 for row in trainer.metric_rows
        )  # the reward model tells samples apart
        moved = [k for k, v in model.named_parameters() if k in before and not torch.equal(v, before[k])]
        assert moved, lora


@pytest.mark.parametrize("family", NAMES)
def test_family_head_folder_export(family_bases, tmp_path, family):
    """A Bayesian GPM on the default features (embedding mean; likelihood on the tied families, soft-capped on
    Gemma 2) exported as a head folder: its standalone loader's P(a > b) equals prefpipe's evaluation's to 1e-5."""
    import importlib.util

    from prefpipe.export.run import export_reward

    rm, _ = build_reward(family_bases[family], "bgpm", data={"max_length": 128})
    assert rm.spec.likelihood_features == bool(rm.config.tie_word_embeddings)
    if getattr(rm.config, "final_logit_softcapping", None):
        rm.likelihood_model.config.final_logit_softcapping = BITING_CAP
    save_reward_model(rm.eval(), tmp_path / "run" / "model")
    assert export_reward(tmp_path / "run", tmp_path / "export")["format"] == "head-folder"
    spec = importlib.util.spec_from_file_location(
        f"loader_{family}", tmp_path / "export" / "reward_loader.py"
    )
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    exported = loader.ExportedRewardModel.from_folder(tmp_path / "export")
    half = len(PROMPTS) // 2
    a, b = (rm.encode(PROMPTS[:half], r, 4) for r in (RESPONSES[:half], RESPONSES[half:]))
    score, variance = (x if x is None else x.double().numpy() for x in rm.compare(a, b))
    want = torch.from_numpy(predictive(score, variance, rm.tau).prob)  # the evaluation's per-pair `prob`
    got = exported.preference_prob(PROMPTS[:half], RESPONSES[:half], RESPONSES[half:])
    assert torch.allclose(got.double(), want, atol=1e-5), (got - want).abs().max()
