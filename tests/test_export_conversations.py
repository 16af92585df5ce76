"""Exported reward models read conversations (issues 34 and 36): the export ships prefpipe's own renderer
(prefpipe.common.chat as `prefpipe_chat.py`), so a real multi-turn HH-RLHF row scored through the exported folder,
without prefpipe, equals prefpipe's in-pipeline score of the same row to fp32 tolerance: a BT head through
AutoModelForSequenceClassification (the model card's recipe) and through the head folder's loader, and a GPM
head through the loader, on a tiny random Gemma 2 (its turn end <end_of_turn> is not EOS, and it renders earlier
assistant turns with its own role name)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.export_runs import folder_module, reward_run
from support.families import FAMILIES, save_family_model
from support.hh_rows import rows_by_id
from support.models import build_reward, save_tiny_base
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from prefpipe.common.chat import format_pair
from prefpipe.data.hh_transcript import parse_transcript
from prefpipe.export.run import export_reward
from prefpipe.reward.model import load_reward_model

# Real helpful-test rows with two human turns: two that fit in MAX_LENGTH and one whose prompt is cut from the left.
ROW_IDS = ("hh-helpful-test-976", "hh-helpful-test-1007", "hh-helpful-test-93")
MAX_LENGTH = 160
PLAIN = {"embedding_features": False, "likelihood_features": False}
TOL = 1e-5


@pytest.fixture(scope="module")
def hh_rows(shared_data: Path) -> list[dict]:
    """The rows as the data file has them, each with its history parsed by the project's transcript parser."""
    rows = [
        r | {"messages": parse_transcript(r["prompt"])}
        for r in rows_by_id(shared_data / "hh_rlhf_helpful_test.jsonl", ROW_IDS)
    ]
    assert all(sum(m["role"] == "user" for m in r["messages"]) == 2 for r in rows)
    return rows


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    return save_family_model(FAMILIES["gemma2"], tmp_path_factory.mktemp("gemma2"))


def _export(
    tmp_path: Path, base: Path, head: str, form: str, max_length: int = MAX_LENGTH
) -> tuple[Path, object, object]:
    """The export folder and the run's model as prefpipe loads it, on its fast paths (the default: each
    distinct conversation + reply encoded once, length-bucketed batches) and on the plain paths."""
    rm, _ = build_reward(base, head, backbone=PLAIN, data={"max_length": max_length})
    run = reward_run(tmp_path, rm)
    info = export_reward(run, tmp_path / "export", form)
    assert info["chat"] == "prefpipe_chat.py"
    fast, plain = (load_reward_model(run / "model", fast_paths=f) for f in (True, False))
    return tmp_path / "export", fast, plain


def _agree(fast, plain, prompts: list, responses: list[str]) -> dict[str, torch.Tensor]:
    """prefpipe's encodings of the rows; both paths give them to fp32 rounding."""
    a, b = fast.encode(prompts, responses, 2), plain.encode(prompts, responses, 2)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < TOL
    return b


def _seq_cls_rewards(folder: Path, prompts: list, responses: list[str]) -> torch.Tensor:
    """The model card's recipe: prefpipe_chat.format_pair, then AutoModelForSequenceClassification."""
    chat = folder_module(folder, "prefpipe_chat.py")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    texts = [chat.format_pair(tok, p, r) for p, r in zip(prompts, responses, strict=True)]
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert batch["input_ids"].shape[1] <= MAX_LENGTH  # the class does not truncate: the rows must fit
    with torch.no_grad():
        return model(**batch).logits[:, 0] + model.config.prefpipe_reward_offset


@pytest.mark.parametrize("form", ["sequence-classification", "head-folder"])
def test_bt_export_scores_a_real_conversation_as_prefpipe(tmp_path, gemma, hh_rows, form):
    folder, fast, ours = _export(tmp_path, gemma, "bt", form)
    rows = hh_rows[:2] if form == "sequence-classification" else hh_rows  # the class cannot cut long rows
    history = [r["messages"] for r in rows for _ in (0, 1)]
    flat_prompts = [r["prompt"] for r in rows for _ in (0, 1)]
    responses = [r[side] for r in rows for side in ("chosen", "rejected")]
    want = _agree(fast, ours, history, responses)["reward"]
    flat = _agree(fast, ours, flat_prompts, responses)["reward"]
    if form == "sequence-classification":
        got = _seq_cls_rewards(folder, history, responses)
        got_flat = _seq_cls_rewards(folder, flat_prompts, responses)
    else:
        exported = folder_module(folder, "reward_loader.py").ExportedRewardModel.from_folder(folder)
        got = exported.rewards(history, responses)
        got_flat = exported.rewards(flat_prompts, responses)
        lengths = [len(ids) for ids, _ in exported.tokenize_many(history, responses)]
        assert MAX_LENGTH in lengths  # a long row really is cut, as prefpipe cuts it
    diff = (got - want).abs().max().item()
    print(f"bt {form}: conversation |reward diff| {diff:.2e}, rewards {want.tolist()}")
    assert diff < TOL and (got_flat - flat).abs().max().item() < TOL  # the plain-string form still agrees
    assert (want - flat).abs().min().item() > 1e-3  # the turns change the score: the check is not vacuous
    card = (folder / "README.md").read_text()
    assert "prefpipe_chat.py" in card and '{"role": "assistant"' in card


@pytest.mark.parametrize("template", [True, False], ids=["gemma2", "no-template"])
def test_gpm_export_scores_a_real_conversation_as_prefpipe(tmp_path, gemma, hh_rows, template):
    """Also on a backbone without a chat template (the plain "Human: ...\\n\\nAssistant: ..." form; its
    positions stop at 128)."""
    base = gemma if template else save_tiny_base(tmp_path / "plain")
    folder, fast, ours = _export(tmp_path, base, "gpm", "head-folder", MAX_LENGTH if template else 128)
    exported = folder_module(folder, "reward_loader.py").ExportedRewardModel.from_folder(folder)
    history = [r["messages"] for r in hh_rows]
    chosen, rejected = [r["chosen"] for r in hh_rows], [r["rejected"] for r in hh_rows]
    enc_a, enc_b = _agree(fast, ours, history, chosen), _agree(fast, ours, history, rejected)
    want = ours.preference_prob(enc_a, enc_b)
    got = exported.preference_prob(history, chosen, rejected)
    enc = exported.encode(history, chosen)
    enc_diff = max((enc[k] - enc_a[k]).abs().max().item() for k in enc_a)
    diff = (got - want).abs().max().item()
    print(
        f"gpm template={template}: max |P diff| {diff:.2e}, max |encoding diff| {enc_diff:.2e}, P {want.tolist()}"
    )
    assert diff < TOL and enc_diff < TOL and want.std() > 0
    flat = exported.preference_prob([r["prompt"] for r in hh_rows], chosen, rejected)
    assert (got - flat).abs().max().item() > 1e-4  # the turns are read, not the flattened transcript


def test_loader_renders_with_prefpipes_function_and_refuses_bad_conversations(tmp_path, gemma, hh_rows):
    """The loader's text is format_pair's, token for token; a malformed conversation is one line naming it."""
    folder, _, ours = _export(tmp_path, gemma, "gpm", "head-folder")
    exported = folder_module(folder, "reward_loader.py").ExportedRewardModel.from_folder(folder)
    row = hh_rows[0]
    ids, prompt_len = exported.tokenize(row["messages"], row["chosen"])
    text = format_pair(ours.tokenizer, row["messages"], row["chosen"])
    assert ids == ours.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert text.endswith("<end_of_turn>") and text.count("<start_of_turn>model") == 2
    assert prompt_len == ours.encoder.tokenize(row["messages"], row["chosen"]).prompt_len
    bad = row["messages"] + [{"role": "assistant", "content": "ends on the reply"}]
    with pytest.raises(ValueError, match=r"^prompts\[1\]: expected a prompt string or a list") as err:
        exported.encode(["fine", bad], ["a", "b"])
    assert "\n" not in str(err.value)
