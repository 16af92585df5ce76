"""What the build_base stage does: build or load the base policy, SFT it, measure it (see prefpipe.build_base)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from prefpipe.base.heldout import heldout_accuracy
from prefpipe.base.model import build_tiny_llama, load_pretrained
from prefpipe.base.sft import encode_demonstrations, train_sft
from prefpipe.base.tokenizer import train_tokenizer
from prefpipe.common import model_ref
from prefpipe.common.config import ConfigError
from prefpipe.common.io import atomic_dir, read_jsonl, write_jsonl
from prefpipe.common.run_record import RunRecord
from prefpipe.common.stage import PathArg, check_path
from prefpipe.common.torch_runtime.device import resolve_device
from prefpipe.common.torch_runtime.seeding import seed_everything
from prefpipe.data.synthetic_multihop import WHOLE_WORDS_FILE
from prefpipe.settings.base import BaseSettings
from prefpipe.settings.build import to_mapping

log = logging.getLogger("prefpipe.build_base")


def corpus_texts(data_dir: Path) -> list[str]:
    """Text the scratch tokenizer learns its merges from (source scratch only): demonstrations (when prep_data
    wrote them), train pairs and RL train prompts (no test data). Tool-use episodes (demonstrations with `turns`,
    the multi-hop world's) are left out: their vocabulary comes whole from whole_words.json (whole_words)."""
    texts: list[str] = []
    demonstrations = data_dir / "demonstrations.jsonl"
    if demonstrations.exists():
        for row in read_jsonl(demonstrations):
            if "turns" not in row:
                texts += [row["prompt"], row["response"]]
    pairs = data_dir / "pairs_train.jsonl"
    if pairs.exists():
        for row in read_jsonl(pairs):
            texts += [row["prompt"], row["chosen"], row["rejected"]]
    for row in read_jsonl(data_dir / "rl_prompts_train.jsonl"):
        texts.append(row["prompt"])
    return texts


def whole_words(data_dir: Path) -> list[str]:
    """Words the scratch tokenizer keeps whole (prep_data writes them beside a world whose names a policy copies,
    prefpipe.data.synthetic_multihop); none when the file is absent."""
    path = data_dir / WHOLE_WORDS_FILE
    return list(json.loads(path.read_text(encoding="utf-8"))["words"]) if path.exists() else []


def pretrained_source(settings: BaseSettings, given: str | None) -> str:
    """The folder or hub id to load: the rule's --pretrained (base.pretrained resolved), else base.pretrained
    read here (a path, a hub id or pkg:<module>/<folder>; import:<name> needs the rule's folder)."""
    if not settings.pretrained:
        raise ConfigError(
            "base.pretrained must name a hub id, a local folder, pkg:<module>/<folder> or import:<name> "
            "when base.source is pretrained"
        )
    if given:
        return given
    if model_ref.parse(settings.pretrained, "base.pretrained").kind == "import":
        raise ConfigError(
            f"base.pretrained = {settings.pretrained!r}: pass the imported folder with --pretrained "
            "(the workflow does: results/models/<name>/model)"
        )
    source = model_ref.resolve(settings.pretrained, "base.pretrained", results=".")
    check_path("base.pretrained", source, PathArg("the pretrained base", "model"))
    return source


def make_model(
    settings: BaseSettings, data_dir: Path, pretrained: str | None = None
) -> tuple[Any, Any, dict[str, Any]]:
    if settings.source == "scratch":
        tokenizer = train_tokenizer(
            corpus_texts(data_dir),
            settings.tokenizer.vocab_size,
            settings.model.max_position_embeddings,
            whole_words(data_dir),
        )
        model = build_tiny_llama(settings.model, tokenizer, settings.seed)
        return model, tokenizer, {"pad_added": False}
    source = pretrained_source(settings, pretrained)
    model, tokenizer, pad_added = load_pretrained(source, settings.trust_remote_code)
    return (
        model,
        tokenizer,
        {"pretrained": settings.pretrained, "pretrained_path": source, "pad_added": pad_added},
    )


def chosen_replies(pairs_path: Path) -> list[dict]:
    """The training pairs' (prompt, chosen) as SFT rows; an HH-style base has read the preferred replies."""
    if not pairs_path.exists():
        raise ConfigError(
            f"base.sft.chosen_from_pairs is true but {pairs_path} does not exist; set it to false when there are "
            "no training pairs"
        )
    return [
        {"id": f"chosen:{row.get('id', i)}", "prompt": row["prompt"], "response": row["chosen"]}
        for i, row in enumerate(read_jsonl(pairs_path))
    ]


def _sft(model, tokenizer, settings: BaseSettings, data_dir: Path, record: RunRecord) -> dict[str, Any]:
    """Supervised fine-tuning on the demonstrations (and chosen replies, when asked); its summary."""
    sft_settings = settings.sft
    sft_summary: dict[str, Any] = {"enabled": sft_settings.enabled}
    if not sft_settings.enabled:
        return sft_summary
    rows = read_jsonl(data_dir / "demonstrations.jsonl")
    chosen = chosen_replies(data_dir / "pairs_train.jsonl") if sft_settings.chosen_from_pairs else []
    data = encode_demonstrations(tokenizer, rows + chosen, sft_settings.max_length)
    log.info("SFT on %d demonstrations (skipped %s)", len(data.examples), dict(data.skipped))
    sft_summary |= {
        "examples": len(data.examples),
        "demonstrations": len(rows),
        "chosen_from_pairs": len(chosen),
        "skipped": dict(data.skipped),
    }
    return sft_summary | train_sft(
        model, data, sft_settings, tokenizer.pad_token_id, settings.seed, log_step=record.log
    )


def _heldout(model, tokenizer, settings: BaseSettings, data_dir: Path, out: Path, record: RunRecord) -> dict:
    """Held-out verifier accuracy of the finished base policy (samples to heldout_samples.jsonl)."""
    heldout_rows = read_jsonl(data_dir / "rl_prompts_heldout.jsonl")
    heldout, samples = heldout_accuracy(model, tokenizer, heldout_rows, settings.heldout_eval, settings.seed)
    write_jsonl(out / "heldout_samples.jsonl", samples)
    record.log(
        step=None,
        heldout_sampled_accuracy=heldout["sampled_accuracy"],
        heldout_greedy_accuracy=heldout["greedy_accuracy"],
    )
    if heldout["accuracy_applicable"]:
        log.info(
            "held-out accuracy: sampled %.3f, greedy %.3f (n=%d)",
            heldout["sampled_accuracy"],
            heldout["greedy_accuracy"],
            heldout["n"],
        )
    else:
        log.info("held-out accuracy: %s (n=%d)", heldout["not_applicable"], heldout["n"])
    return heldout


def build(
    settings: BaseSettings, data_dir: Path, out: Path, record: RunRecord, pretrained: str | None = None
) -> dict[str, Any]:
    """Run the stage; return the summary."""
    seed_everything(settings.seed)
    timings: dict[str, float] = {}
    t0 = time.time()
    model, tokenizer, info = make_model(settings, data_dir, pretrained)
    model.to(resolve_device(settings.device, "base.device"))
    timings["build_s"] = time.time() - t0
    t0 = time.time()
    sft_summary = _sft(model, tokenizer, settings, data_dir, record)
    if settings.sft.enabled:
        timings["sft_s"] = time.time() - t0
    model.eval()
    with atomic_dir(out / "model") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    t0 = time.time()
    heldout = _heldout(model, tokenizer, settings, data_dir, out, record)
    timings["heldout_eval_s"] = time.time() - t0
    return {
        "source": settings.source,
        **info,
        "model_dir": str(out / "model"),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "special_tokens": {
            "bos": tokenizer.bos_token,
            "eos": tokenizer.eos_token,
            "pad": tokenizer.pad_token,
        },
        "sft": sft_summary,
        "heldout": heldout,
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
    }


def run(settings: BaseSettings, args: argparse.Namespace) -> None:
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    record = RunRecord(args.out, "build_base", to_mapping(settings))
    record.finish(build(settings, Path(args.data), Path(args.out), record, args.pretrained))


PATHS = {
    "data": PathArg("prep_data output folder (results/data)"),
    "pretrained": PathArg("base.pretrained resolved (import:/pkg: references as folders)", "model", False),
    "out": PathArg("output folder", "out"),
}
