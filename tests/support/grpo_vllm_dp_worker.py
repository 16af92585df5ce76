"""A few GRPO steps with one vLLM engine per process, in every process of a `torch.distributed.run` launch
(tests/test_grpo_vllm_data_parallel.py). Each process writes to argv[1]/rank<r>/: its metric rows, every rank's
probe gap after each sync (as this process saw them gathered) and its trained weights. argv[2]: JSON overrides
of the run (`lora`, `steps`, `skip_push_at`: a step after which process `skip_rank`'s weight push is skipped)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from safetensors.torch import save_file  # noqa: E402

from prefpipe.grpo.data_parallel import DataParallel  # noqa: E402
from prefpipe.grpo.rollout.engines.vllm_engine import EngineOutOfSync  # noqa: E402
from support.grpo_vllm import skip_push_at, trainer  # noqa: E402


def main(out: str, overrides: str) -> None:
    over = json.loads(overrides)
    dp = DataParallel()
    folder = Path(out) / f"rank{dp.rank}"
    t = trainer(folder, lora=over.get("lora", False), steps=over.get("steps", 3), data_parallel=dp)
    gaps = [t.engine.last_gaps]  # the starting sync's
    if "skip_push_at" in over and dp.rank == over["skip_rank"]:
        skip_push_at(t, over["skip_push_at"])
    error = None
    try:
        t.train(on_step_end=lambda step, row: gaps.append(t.engine.last_gaps))
    except EngineOutOfSync as err:
        error = str(err)
    t.engine.close()
    state = {k: v.detach().contiguous() for k, v in t.policy.named_parameters()}  # tied: once
    save_file(state, str(folder / "weights.safetensors"))
    (folder / "result.json").write_text(
        json.dumps({"rows": t.metric_rows, "probe_gaps": gaps, "error": error, "world_size": dp.world_size})
    )
    dp.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
