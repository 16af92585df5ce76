"""build_base end to end on a tiny world: a loadable HF folder that generates, and honest accuracy records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from support.settings import base_settings, data_settings, stage_json
from support.stages import run_main
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from prefpipe import build_base, prep_data
from prefpipe.base.build import chosen_replies
from prefpipe.base.model import load_pretrained
from prefpipe.common.chat import format_prompt
from prefpipe.common.config import ConfigError
from prefpipe.data.verifier import verify
from prefpipe.settings.merge import deep_merge

DATA = {
    "synthetic": {
        "pairs_per_subset_train": 6,
        "pairs_per_subset_test": 2,
        "cyclic_triples_train": 3,
        "cyclic_triples_test": 2,
        "demonstrations": 200,
        "rl_prompts_train": 16,
        "rl_prompts_heldout": 24,
        "demo_error_rate": 0.3,
    },
}
BASE = {
    "source": "scratch",
    "tokenizer": {"vocab_size": 300},
    "model": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "max_position_embeddings": 96,
    },
    "sft": {
        "enabled": True,
        "steps": 30,
        "batch_size": 16,
        "learning_rate": 0.01,
        "warmup_steps": 3,
        "weight_decay": 0.0,
        "max_length": 96,
    },
    "heldout_eval": {"max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0, "batch_size": 16},
}


def base_config(**changes) -> str:
    """The base stage's --config: `base` with BASE and then `changes` merged over it (seed 0)."""
    return stage_json(base_settings(deep_merge(BASE, changes), seed=0))


def run_base(config: str, data: Path, out: Path, caplog=None, **paths) -> dict:
    code, errors = run_main(build_base.main, config, caplog, data=data, out=out, **paths)
    assert code == 0, errors
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data")
    assert run_main(prep_data.main, stage_json(data_settings(DATA, seed=0)), out=out)[0] == 0
    return out


@pytest.fixture(scope="module")
def scratch(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("base")
    return out, run_base(base_config(), data_dir, out)


def test_saved_folder_loads_and_generates(scratch) -> None:
    out, summary = scratch
    folder = out / "model"
    assert (folder / "model.safetensors").exists()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert model.config.vocab_size == len(tokenizer) == summary["vocab_size"]
    enc = tokenizer(
        [format_prompt(tokenizer, "Repeat: cat dog")], return_tensors="pt", add_special_tokens=False
    )
    with torch.no_grad():
        generated = model.generate(**enc, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] > enc["input_ids"].shape[1]
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id


def test_summary_and_metrics_are_consistent(scratch, data_dir: Path) -> None:
    out, summary = scratch
    heldout = summary["heldout"]
    samples = [json.loads(x) for x in (out / "heldout_samples.jsonl").read_text().splitlines()]
    assert heldout["n"] == len(samples) == DATA["synthetic"]["rl_prompts_heldout"]
    assert heldout["sampled_correct"] == sum(verify(s["kind"], s["answer"], s["sampled"]) for s in samples)
    assert heldout["greedy_correct"] == sum(verify(s["kind"], s["answer"], s["greedy"]) for s in samples)
    assert heldout["sampled_accuracy"] == heldout["sampled_correct"] / heldout["n"]
    assert sum(v["n"] for v in heldout["per_kind"].values()) == heldout["n"]
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "sft_loss" in m]
    assert [m["step"] for m in steps] == list(range(BASE["sft"]["steps"]))
    train_pairs = (data_dir / "pairs_train.jsonl").read_text().splitlines()
    sft = summary["sft"]
    assert sft["demonstrations"] == DATA["synthetic"]["demonstrations"]
    assert sft["chosen_from_pairs"] == len(train_pairs)  # base.sft.chosen_from_pairs is on by default
    assert sft["examples"] == sft["demonstrations"] + sft["chosen_from_pairs"] - sum(sft["skipped"].values())


def test_chosen_replies_are_the_training_pairs_and_never_test_pairs(data_dir: Path, tmp_path: Path) -> None:
    rows = chosen_replies(data_dir / "pairs_train.jsonl")
    train = [json.loads(x) for x in (data_dir / "pairs_train.jsonl").read_text().splitlines()]
    assert [(r["prompt"], r["response"]) for r in rows] == [(p["prompt"], p["chosen"]) for p in train]
    with pytest.raises(ConfigError, match="chosen_from_pairs"):
        chosen_replies(tmp_path / "pairs_train.jsonl")


def test_pretrained_folder_reproduces_greedy_accuracy(scratch, data_dir: Path, tmp_path: Path) -> None:
    out, summary = scratch
    config = base_config(source="pretrained", pretrained=str(out / "model"), sft={"enabled": False})
    again = run_base(config, data_dir, tmp_path / "again")
    assert again["pad_added"] is False and again["sft"] == {"enabled": False}
    assert (
        again["heldout"]["greedy_correct"] == summary["heldout"]["greedy_correct"]
    )  # same weights, same greedy


def test_pretrained_pad_equal_to_eos_reuses_the_existing_pad_token(scratch, tmp_path: Path) -> None:
    out, _ = scratch
    folder = tmp_path / "pad_is_eos"
    shutil.copytree(out / "model", folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    pad_id = tokenizer.pad_token_id
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.save_pretrained(folder)
    model, loaded, pad_added = load_pretrained(str(folder), base_settings().trust_remote_code)
    assert pad_added and loaded.pad_token_id == pad_id != loaded.eos_token_id
    assert model.get_input_embeddings().weight.shape[0] == len(loaded) == len(tokenizer)


def test_pretrained_without_pad_token_gets_a_new_one(tmp_path: Path) -> None:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=280,
        special_tokens=["</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(["a tiny corpus for a tiny model"] * 10, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="</s>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=32,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, loaded, pad_added = load_pretrained(str(tmp_path), base_settings().trust_remote_code)
    assert pad_added and loaded.pad_token_id == len(tokenizer) != loaded.eos_token_id
    assert model.get_input_embeddings().weight.shape[0] == len(loaded) == len(tokenizer) + 1
    assert model.generation_config.pad_token_id == loaded.pad_token_id == model.config.pad_token_id


def test_bad_source_is_a_config_error(data_dir: Path, tmp_path: Path, caplog) -> None:
    with pytest.raises(ConfigError, match=r"config\.base\.source: 'magic' is not one of"):
        base_settings({"source": "magic"})
    magic = {**json.loads(base_config()), "source": "magic"}
    code, errors = run_main(build_base.main, json.dumps(magic), caplog, data=data_dir, out=tmp_path / "x")
    assert code == 2 and len(errors) == 1 and "config.source: 'magic' is not one of" in errors[0]
    code, errors = run_main(
        build_base.main,
        base_config(source="pretrained", pretrained=None),
        caplog,
        data=data_dir,
        out=tmp_path / "y",
    )
    assert code == 2 and len(errors) == 1 and "base.pretrained must name" in errors[0]
    assert not (tmp_path / "x").exists() and not (tmp_path / "y" / "model").exists()


def test_pretrained_import_reference_without_sft_needs_no_demonstrations(scratch, data_dir, tmp_path, caplog):
    """base.pretrained: import:<name> loads the folder the rule passes (--pretrained); with SFT off the stage
    reads no demonstrations (prep_data need not write them) and the summary names the loaded folder."""
    out, _ = scratch
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    (data / "demonstrations.jsonl").unlink()
    changes = {"source": "pretrained", "pretrained": "import:tiny", "sft": {"enabled": False}}
    models = {"tiny": {"gguf": "tiny.gguf"}}  # the workflow checks import:<name> names a `models` entry
    config = stage_json(base_settings(deep_merge(BASE, changes), seed=0, models=models))
    code, errors = run_main(build_base.main, config, caplog, data=data, out=tmp_path / "a")
    assert code == 2 and "pass the imported folder with --pretrained" in errors[0]
    folder = str(out / "model")
    summary = run_base(config, data, tmp_path / "b", pretrained=folder)
    assert summary["pretrained"] == "import:tiny" and summary["pretrained_path"] == folder
    assert summary["sft"] == {"enabled": False}
