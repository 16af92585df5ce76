"""Skip a vLLM test module, saying why, where vllm does not import (the project's main virtualenv): the engine
needs its own virtualenv (scripts/vllm_env.sh). The skip is the declared optional "vLLM tier"
(tests/support/tiers.py) unless the tier is asked for: under CI=true with PREFPIPE_VLLM=1 it fails instead."""

from __future__ import annotations

import importlib.util
import os

import pytest

from support.tiers import need


def require_vllm(in_process: bool = True) -> None:
    """Import vllm in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, as the engine runs it) or skip the module.
    `in_process=False`, for tests whose launched workers import it: only check that it is installed (importing
    it costs the test process seconds of CPU for nothing; a broken wheel then fails the launch, showing why)."""
    try:
        if not in_process:
            if importlib.util.find_spec("vllm") is None:
                raise ImportError("No module named 'vllm'")
            return
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        import vllm  # noqa: F401
    except Exception as err:  # ImportError, or a wheel built for another torch
        why = (
            f"vllm does not import here ({type(err).__name__}: {err}); build the vLLM virtualenv with "
            "scripts/vllm_env.sh and run this file with its python"
        )
        # the tier was asked for (PREFPIPE_VLLM=1): under CI=true this fails, naming what is missing
        if os.environ.get("PREFPIPE_VLLM") == "1":
            need(why, allow_module_level=True)
        pytest.skip(why, allow_module_level=True)
