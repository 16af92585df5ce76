"""Every export equals its evaluation (issue 50, item 2): each head type with each option the reward trainer
accepts that changes how a pair is scored, trained for two steps by the train_reward stage on a tiny base,
evaluated by the eval_rewardbench stage, exported by `prefpipe export` and scored by the exported folder in an
interpreter that cannot import prefpipe. Per pair, the folder's score s(chosen > rejected), Var[s] (Bayesian
GPM) and P(chosen > rejected) equal the evaluation's per_example.parquet figures to TOL; a Bayesian head's P is
integrated by the evaluation's own code, shipped in the folder (prefpipe.common.expected_sigmoid).

The largest difference per row of the matrix is printed (`pytest -s`). Cost: the models are trained, evaluated
and exported once per module and scored in one subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from support.export_runs import WITHOUT_PREFPIPE
from support.models import save_tiny_tied_base
from support.rows import arith_pairs, rps_pairs
from support.settings import eval_settings, stage_json, tiny_reward_settings
from support.stages import stage_env

from prefpipe.cli import main as prefpipe
from prefpipe.common.chat import conversation
from prefpipe.common.io import write_jsonl
from prefpipe.eval_rewardbench import main as eval_main
from prefpipe.reward.model import load_reward_model
from prefpipe.train_reward import main as train_main

TOL = 1e-5  # fp32 scoring in both places; P and Var[s] absolute, s relative to max(1, |s|)
PLAIN = {"backbone": {"embedding_features": False, "likelihood_features": False}}
# option -> reward settings over the tiny variant (support.settings.TINY_REWARD); every key that changes how a
# pair is scored, one at a time, then the default variant's own recipe.
OPTIONS: dict[str, dict] = {
    "plain": PLAIN,
    "length_head": {**PLAIN, "head": {"length_head": {"enabled": True}}},
    "likelihood_features": {"backbone": {"embedding_features": False, "likelihood_features": True}},
    "embedding_features": {"backbone": {"embedding_features": True, "likelihood_features": False}},
    "keep_response_end": {**PLAIN, "data": {"max_length": 12, "keep_response": "end"}},
    "lora": {**PLAIN, "lora": {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}},
    "pooling_no_standardize": {
        "backbone": {"embedding_features": False, "likelihood_features": False, "pooling": "response_mean"},
        "head": {"standardize": False, "normalize": False, "gate": False},
    },
    "default_recipe": {},
}
HEADS = ("bt", "gpm", "bgpm")
ROWS = [(head, option) for head in HEADS for option in OPTIONS]


def _pairs() -> list[dict]:
    """The 18 pairs (a rock-paper-scissors cycle, arithmetic), one as a conversation of three turns."""
    rows = rps_pairs() + arith_pairs(6)
    rows[0] = {**rows[0], "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": rows[0]["prompt"]},
    ]}  # fmt: skip
    return rows


# One interpreter for every folder: argv[1] is a JSON list of [name, folder, prompts, chosen, rejected].
SCORE_FOLDERS = (
    WITHOUT_PREFPIPE
    + """
from pathlib import Path


def load(folder, file):
    spec = importlib.util.spec_from_file_location(Path(file).stem, folder + "/" + file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sequence_classification(folder, prompts, chosen, rejected):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    chat, tok = load(folder, "prefpipe_chat.py"), AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()

    def rewards(responses):
        texts = [chat.format_pair(tok, p, r) for p, r in zip(prompts, responses)]
        batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=not tok.chat_template)
        with torch.no_grad():
            return model(**batch).logits[:, 0].double()

    score = rewards(chosen) - rewards(rejected)
    return score, None, torch.sigmoid(score / model.config.prefpipe_tau)


def head_folder(folder, prompts, chosen, rejected):
    rm = load(folder, "reward_loader.py").ExportedRewardModel.from_folder(folder)
    enc_c, enc_r = rm.encode(prompts, chosen), rm.encode(prompts, rejected)
    score, variance = rm.compare(enc_c, enc_r)
    return score, variance, rm.preference_prob_encoded(enc_c, enc_r)


out = {}
for name, folder, prompts, chosen, rejected in json.loads(sys.argv[1]):
    form = head_folder if Path(folder, "reward_loader.py").exists() else sequence_classification
    score, variance, prob = form(folder, prompts, chosen, rejected)
    out[name] = {"score": score.tolist(), "variance": None if variance is None else variance.tolist(),
                 "prob": prob.tolist()}
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "prefpipe")
print("RESULT", json.dumps({"scores": out, "tried": tried, "loaded": loaded}))
"""
)


def _train_evaluate_export(root: Path, base: Path, data: Path, eval_config: str, head: str, option: str):
    """results/reward/<row>, results/eval/<row> and the export(s) of one matrix row; {form: folder}."""
    name = f"{head}-{option}"
    settings = tiny_reward_settings(head, train={"steps": 2}, **OPTIONS[option])
    run, evaluation = root / "reward" / name, root / "eval" / name
    argv = ["--config", stage_json(settings), "--data", str(data), "--base", str(base), "--out", str(run)]
    assert train_main(argv) == 0, name
    argv = [
        "--config",
        eval_config,
        "--model",
        str(run / "model"),
        "--data",
        str(data),
        "--out",
        str(evaluation),
    ]
    assert eval_main(argv) == 0, name
    forms = {}
    for form in ("auto", "head-folder"):
        folder = root / "export" / f"{name}-{form}"
        assert prefpipe(["export", str(run), str(folder), "--format", form]) == 0, name
        forms[json.loads((folder / "export.json").read_text())["format"]] = folder
    return forms


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """{row: (the evaluation's per_example frame, {form: the folder's scores})} for every matrix row."""
    root = tmp_path_factory.mktemp("matrix")
    base = save_tiny_tied_base(root / "base")  # tied embeddings: what likelihood features need
    rows = _pairs()
    write_jsonl(root / "data" / "pairs_train.jsonl", rows)
    write_jsonl(root / "data" / "pairs_test.jsonl", rows)
    eval_config = stage_json(eval_settings({
        "benchmarks": {"synthetic": None, "heldout": {"source": "heldout"}}, "mc_samples": 0,
        "length_bootstrap_resamples": 0, "uncertainty": {"resamples": 100},
    }))  # fmt: skip
    jobs, frames = [], {}
    for head, option in ROWS:
        forms = _train_evaluate_export(root, base, root / "data", eval_config, head, option)
        frame = pd.read_parquet(root / "eval" / f"{head}-{option}" / "per_example.parquet")
        by_id = {r["id"]: r for r in rows}
        picked = [by_id[i] for i in frame["id"]]
        frames[(head, option)] = frame
        for form, folder in forms.items():
            jobs.append([f"{head}|{option}|{form}", str(folder), [conversation(r) for r in picked],
                         [r["chosen"] for r in picked], [r["rejected"] for r in picked]])  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", SCORE_FOLDERS, json.dumps(jobs)],
        capture_output=True, text=True, timeout=900, cwd=root, env=stage_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    assert result["tried"] == [] and result["loaded"] == []  # prefpipe was never asked for
    scores: dict = {row: {} for row in ROWS}
    for key, value in result["scores"].items():
        head, option, form = key.split("|")
        scores[(head, option)][form] = value
    return root, {row: (frames[row], scores[row]) for row in ROWS}


def _differences(frame: pd.DataFrame, got: dict) -> dict[str, float]:
    """The largest |exported - evaluated| of the row's pairs: P, s (relative to max(1, |s|)) and Var[s]."""
    score = frame["score_chosen_minus_rejected"].to_numpy()
    out = {
        "prob": float(np.abs(np.asarray(got["prob"]) - frame["prob"].to_numpy()).max()),
        "score": float((np.abs(np.asarray(got["score"]) - score) / np.maximum(1.0, np.abs(score))).max()),
    }
    if got["variance"] is not None:
        out["variance"] = float(np.abs(np.asarray(got["variance"]) - frame["variance"].to_numpy()).max())
    return out


@pytest.mark.parametrize(("head", "option"), ROWS, ids=[f"{h}-{o}" for h, o in ROWS])
def test_the_export_gives_the_evaluations_per_pair_figures(matrix, head, option):
    root, rows = matrix
    frame, forms = rows[(head, option)]
    assert len(frame) == len(_pairs()) and frame["prob"].std() > 0  # every pair, not a degenerate model
    assert "head-folder" in forms
    if head == "bt" and option in ("plain", "length_head", "lora"):
        assert "sequence-classification" in forms  # the standard class where it is faithful, checked too
    if (
        option == "keep_response_end"
    ):  # a cut the class's tokenizer cannot make: no such form, not approximated
        assert "sequence-classification" not in forms
    for form, got in forms.items():
        diffs = _differences(frame, got)
        print(
            f"{head:5s} {option:24s} {form:24s} "
            + ", ".join(f"max |{k} diff| {v:.1e}" for k, v in diffs.items())
        )
        assert max(diffs.values()) < TOL, (form, diffs)
    if head == "bgpm":  # the variance matters for P: the comparison is not one of point probabilities
        assert (frame["variance"] > 0).all()
        own = _head_difference(root, head, option, frame)
        print(
            f"      the head's own preference_prob (the training stage's sanity P): max |prob diff| {own:.1e}"
        )
        assert own < TOL  # training, evaluation and export give one P


def _head_difference(root: Path, head: str, option: str, frame: pd.DataFrame) -> float:
    """max |P - the evaluation's P| for P the saved head's own preference_prob, what the training stage's sanity
    figures (prefpipe.reward.sanity_accuracy) average."""
    rm = load_reward_model(root / "reward" / f"{head}-{option}" / "model", fast_paths=False)
    by_id = {r["id"]: r for r in _pairs()}
    picked = [by_id[i] for i in frame["id"]]
    prompts = [conversation(r) for r in picked]
    enc_c = rm.encode(prompts, [r["chosen"] for r in picked], 8)
    enc_r = rm.encode(prompts, [r["rejected"] for r in picked], 8)
    prob = rm.preference_prob(enc_c, enc_r).double().numpy()
    return float(np.abs(prob - frame["prob"].to_numpy()).max())


def test_truncation_and_options_really_happen(matrix):
    """The rows exercise what they name: keep_response_end cuts responses, the length head is trained (and
    dropped at scoring), LoRA and the features are in the saved models."""
    root, _ = matrix
    summary = json.loads((root / "eval" / "bt-keep_response_end" / "heldout" / "summary.json").read_text())
    assert summary["truncation"]["pairs"] > 0
    for head in HEADS:
        spec = json.loads(
            (root / "reward" / f"{head}-length_head" / "model" / "head_config.json").read_text()
        )
        assert spec["head"]["length_head"]["enabled"]
        lora = json.loads((root / "reward" / f"{head}-lora" / "model" / "head_config.json").read_text())
        assert lora["backbone_format"] == "lora"
    metrics = (root / "reward" / "bgpm-length_head" / "metrics.jsonl").read_text()
    assert torch.isfinite(torch.tensor([json.loads(line)["loss"] for line in metrics.splitlines()])).all()


def test_a_cut_the_standard_class_cannot_make_is_refused_at_export(matrix, capsys):
    """`--format sequence-classification` on a model that keeps a too-long response's end: exit 2 naming the
    key and the config that exports, nothing written (auto wrote the head folder instead, tested above)."""
    root, _ = matrix
    out = root / "export" / "refused"
    run = root / "reward" / "bt-keep_response_end"
    assert prefpipe(["export", str(run), str(out), "--format", "sequence-classification"]) == 2
    err = capsys.readouterr().err
    print(err)
    assert "data.keep_response is 'end'" in err and "data.keep_response: start" in err and not out.exists()
