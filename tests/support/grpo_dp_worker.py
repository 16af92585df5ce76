"""One GRPO step of a tiny Llama in every process of a `torch.distributed.run` launch (tests/test_grpo_data_parallel.py):
process 0 writes the trained weights and the step's metrics to argv[1]."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefpipe.grpo.data_parallel import DataParallel  # noqa: E402
from prefpipe.grpo.rewards import WeightedReward  # noqa: E402
from prefpipe.grpo.training.trainer import GRPOTrainer  # noqa: E402
from support.models import chat_tokenizer, tiny_llama  # noqa: E402
from support.settings import grpo_settings  # noqa: E402

ROWS = [
    {"id": str(i), "prompt": f"Say {w} now.", "answer": "5", "kind": "add"} for i, w in enumerate("abcdefgh")
]


def length_reward(inputs) -> torch.Tensor:
    return torch.tensor([len(t) / 10.0 for t in inputs.completions])


def main(out: str, overrides: str) -> None:
    torch.set_num_threads(1)
    tok = chat_tokenizer()
    cfg = grpo_settings(
        {
            "steps": 2, "prompts_per_step": 4, "num_generations": 4, "max_new_tokens": 6,
            "learning_rate": 3e-2, "micro_batch_size": 3, "sample_every": 0, "checkpoint_every": 0,
            "mask_truncated_completions": False, "inspect_steps": [], **json.loads(overrides),
        }
    )  # fmt: skip
    dp = DataParallel()
    trainer = GRPOTrainer(
        cfg, tiny_llama(tok, seed=0), tok, "none", ROWS, [WeightedReward("length", 1.0, length_reward)],
        Path(out) / f"rank{dp.rank}", data_parallel=dp,
    )  # fmt: skip
    trainer.train()
    if dp.is_main:
        save_file(
            {k: v.contiguous() for k, v in trainer.policy.state_dict().items()}, f"{out}/weights.safetensors"
        )
        Path(out, "metrics.json").write_text(json.dumps(trainer.metric_rows))
    dp.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
