"""RewardBench-style scoring, prefpipe vs a plain length-sorted Hugging Face loop, on identical settings: the same
saved reward model (backbone + head), the same rows, batch size and max length. A timed unit is a whole pass
from text rows to one score per pair (chat formatting, tokenisation, batching, forward, head, compare).

    .venv-bench/bin/python benchmarks/scoring.py [--quick] [--only synthetic|rewardbench|hh] [--rounds 3]

The model is a random-initialised reward model built on the default scratch base (the pipeline's own BPE
tokenizer with its chat template, trained here on the rows; a tiny Llama of base.model's default size: hidden
128, 2 layers, vocab 512), a BT head on the last token's state, written once to results/benchmarks/_scoring/
and loaded by both sides. Rows: the synthetic world's test pairs (the default eval benchmark; data.synthetic defaults,
seed 0, generated into the same folder) and real files from ../shared/data (see its README), pointed at by path.

The peer is what a competent user writes: render each row with the chat template, tokenise all texts in one
batched call (left truncation, so the end of the response is kept), sort by length, pad each batch to its
longest row, forward under torch.inference_mode, gather the last real token's state and apply the same head.
Both sides report their scores; the parent checks they agree on every pair neither side truncated."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

sys.path[:0] = [str(common.ROOT / "src"), str(common.ROOT / "tests")]  # the parent builds the model folder

DATA = common.ROOT.parent / "shared" / "data"
WORK = common.OUT / "_scoring"
DATASETS = {
    "synthetic": WORK
    / "synthetic_test.jsonl",  # the default eval benchmark: the synthetic world's test pairs
    "rewardbench": DATA / "rewardbench_real_subsets.jsonl",  # LLMBar + XSTest in RewardBench format (663)
    "hh": DATA / "hh_rlhf_helpful_test.jsonl",  # HH-RLHF helpful test pairs (1000)
}


def synthetic_pairs() -> None:
    """Write the default synthetic world's train and test pairs (data.synthetic defaults, seed 0), once."""
    if DATASETS["synthetic"].exists():
        return
    from support.settings import data_settings

    from prefpipe.data.synthetic_world import build_world

    world = build_world(data_settings({}).synthetic, seed=0, parts=frozenset({"pairs"}))
    WORK.mkdir(parents=True, exist_ok=True)
    for path, rows in (
        (WORK / "synthetic_train.jsonl", world.pairs_train),
        (DATASETS["synthetic"], world.pairs_test),
    ):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def load_rows(name: str, n: int | None) -> list[dict]:
    lines = Path(DATASETS[name]).read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return rows[:n] if n else rows


def model_folder(max_length: int) -> Path:
    """Build (once) the scratch base and a BT reward model on it; return the saved reward-model folder."""
    folder = WORK / f"reward_bt_L{max_length}"
    if (folder / "head_config.json").exists():
        return folder
    import torch
    from support.models import build_reward, save_scratch_base

    from prefpipe.reward.model import save_reward_model

    base = WORK / "base"
    if not (base / "config.json").exists():  # tokenizer trained on synthetic and real text alike
        synthetic_pairs()
        train = [
            json.loads(x) for x in (WORK / "synthetic_train.jsonl").read_text(encoding="utf-8").splitlines()
        ]
        texts = [r[k] for r in train for k in ("prompt", "chosen", "rejected")]
        texts += [
            r[k] for name in ("rewardbench", "hh") for r in load_rows(name, 300) for k in ("prompt", "chosen")
        ]
        save_scratch_base(base, texts, vocab_size=512, seed=0)
    rm, _ = build_reward(
        base,
        "bt",
        seed=0,
        data={"max_length": max_length},
        # the likelihood features (auto: on for the tied scratch base) are no part of the plain loop's head input
        backbone={"embedding_features": False, "likelihood_features": False, "pooling": "last"},
    )
    torch.manual_seed(0)
    save_reward_model(rm.eval(), folder)
    return folder


def load_model(case: dict):
    """The saved reward model on case["device"] (default cpu) in case["dtype"] (default float32)."""
    import torch

    from prefpipe.reward.model import load_reward_model

    dtype = getattr(torch, case.get("dtype", "float32"))
    return load_reward_model(case["folder"], device=case.get("device", "cpu"), dtype=dtype)


def worker_prefpipe(case: dict, rows: list[dict], rm=None):
    from prefpipe.evaluation.pair_scoring import score_pairs

    rm = rm if rm is not None else load_model(case)
    prompts = [r["prompt"] for r in rows]
    chosen = [r["chosen"] for r in rows]
    rejected = [r["rejected"] for r in rows]
    out = {}

    def fn():
        out["scores"] = score_pairs(rm, prompts, chosen, rejected, batch_size=case["batch_size"]).score

    return fn, out


def worker_hf(case: dict, rows: list[dict], rm=None):
    import torch

    # prefpipe's model only for its modules: the same backbone, head and tokenizer
    rm = rm if rm is not None else load_model(case)
    tok, backbone, head = rm.tokenizer, rm.backbone, rm.head
    tok.truncation_side = "left"
    bs, max_length = case["batch_size"], case["max_length"]
    device = next(backbone.parameters()).device
    head_dtype = next(head.parameters()).dtype
    out = {}

    def fn():
        with torch.inference_mode():
            texts = []
            for response_key in ("chosen", "rejected"):
                for r in rows:
                    messages = [{"role": "user", "content": r["prompt"]}]
                    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                    texts.append(text + r[response_key] + tok.eos_token)
            ids = tok(texts, add_special_tokens=False, truncation=True, max_length=max_length)["input_ids"]
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
            rewards = torch.empty(len(ids), device=device)
            for start in range(0, len(order), bs):
                idx = order[start : start + bs]
                width = max(len(ids[i]) for i in idx)
                input_ids = torch.full((len(idx), width), tok.pad_token_id, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for j, i in enumerate(idx):
                    input_ids[j, : len(ids[i])] = torch.tensor(ids[i])
                    mask[j, : len(ids[i])] = 1
                input_ids, mask = input_ids.to(device), mask.to(device)
                hidden = backbone(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state
                last = hidden[torch.arange(len(idx), device=device), mask.sum(1) - 1].to(head_dtype)
                reward = head(head.standardize(last), last)["reward"]
                rewards[torch.tensor(idx, device=device)] = reward.float()
            n = len(rows)
            out["scores"] = (rewards[:n] - rewards[n:]).double().cpu().numpy()
            out["lengths"] = [len(x) for x in ids]

    return fn, out


def worker(case: dict) -> None:
    import torch

    torch.set_num_threads(1)
    rows = load_rows(case["dataset"], case["rows"])
    make = worker_prefpipe if case["side"] == "prefpipe" else worker_hf
    fn, out = make(case, rows)
    seconds = common.cpu_units(fn, case["units"], warmup=1, now=common.clock(case.get("clock", "cpu")))
    rates = [2 * len(rows) / s for s in seconds]
    print(
        json.dumps(
            {
                "value": statistics.median(rates),
                "all": rates,
                "scores": [float(x) for x in out["scores"]],
                "lengths": out.get("lengths"),
            }
        )
    )


def agreement(case: dict, ours: dict, peer: dict) -> dict:
    """Largest score difference over pairs whose two sequences the peer did not cut to max_length."""
    n = len(ours["scores"])
    lengths = peer["lengths"]
    kept = [i for i in range(n) if lengths[i] < case["max_length"] and lengths[n + i] < case["max_length"]]
    diffs = [abs(ours["scores"][i] - peer["scores"][i]) for i in kept]
    return {"pairs_compared": len(kept), "pairs": n, "max_abs_diff": max(diffs) if diffs else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--quick", action="store_true", help="one round, fewer rows (a smoke run)")
    ap.add_argument("--smoke", action="store_true", help="one round, 16 synthetic rows, one pass (CI)")
    ap.add_argument("--only", choices=sorted(DATASETS), action="append")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--units", type=int, default=3, help="timed passes per child (after one warm-up)")
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
        return
    a.quick = a.quick or a.smoke
    rounds = 1 if a.quick else a.rounds
    cases = []
    synthetic_pairs()
    lengths = {"synthetic": (128,), "rewardbench": (128, 256), "hh": (128,)}
    for dataset in a.only or ["synthetic", "rewardbench"]:
        for max_length in lengths[dataset]:
            case = dict(
                dataset=dataset,
                rows=16 if a.smoke else 200 if a.quick else None,
                max_length=max_length,
                batch_size=16,
                units=1 if a.quick else a.units,
            )
            cases.append({**case, "folder": str(model_folder(max_length))})
    rows_out = []
    for case in cases:
        values: dict[str, list[float]] = {"prefpipe": [], "hf": []}
        last: dict[str, dict] = {}
        for r in range(rounds):
            for side in ("prefpipe", "hf") if r % 2 == 0 else ("hf", "prefpipe"):
                res = common.run_worker(__file__, {**case, "side": side})
                values[side].append(res["value"])
                last[side] = res
        label = f"{case['dataset']} L={case['max_length']} bs={case['batch_size']}"
        row = {
            "case": label,
            **{k: v for k, v in case.items() if k != "folder"},
            "n_pairs": len(last["prefpipe"]["scores"]),
            **common.summarise(values, "prefpipe", "hf", lower_is_better=False),
            "agreement": agreement(case, last["prefpipe"], last["hf"]),
        }
        rows_out.append(row)
        print(common.table([row], "seq/s", "length-sorted HF loop"), row["agreement"], flush=True)
    print()
    print(common.table(rows_out, "seq/s", "length-sorted HF loop"))
    path = common.write(
        "scoring", {"rows": rows_out, "unit": "sequences per CPU second (median), text rows to scores"}
    )
    print(f"written {path}")


if __name__ == "__main__":
    main()
