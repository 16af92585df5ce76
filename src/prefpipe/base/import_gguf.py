"""What the import_model stage does: a GGUF file -> a plain save_pretrained folder (see prefpipe.import_model).

transformers loads a GGUF file dequantised but flags the model as quantised (`quantization_config` gguf, an
`hf_quantizer`): trainers refuse it and `save_pretrained` fails ("not serializable"). The model is therefore
rebuilt from its config without the quantisation config, the dequantised weights are copied in (strict: every
weight accounted for), and the folder is written once, atomically, with the tokenizer read from the same file
(its chat template kept). Every later stage then loads it like a hub model.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import torch

from prefpipe.common.config import ConfigError
from prefpipe.common.io import atomic_dir
from prefpipe.common.run_record import RunRecord
from prefpipe.settings.build import to_mapping
from prefpipe.settings.models import ModelImportSettings

log = logging.getLogger("prefpipe.import_model")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_gguf(gguf: Path, dtype: torch.dtype, key: str) -> tuple[Any, Any]:
    """The model (dequantised, still flagged quantised) and tokenizer transformers reads from a GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not gguf.is_file():
        raise ConfigError(f"{key}: {gguf}: no such GGUF file")
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype)
    except (ValueError, KeyError, OSError) as err:  # not GGUF, or an architecture transformers cannot read
        raise ConfigError(f"{key}: {gguf}: transformers cannot load this GGUF file ({err})") from err
    return model, tokenizer


def plain_copy(model: Any, dtype: torch.dtype) -> Any:
    """The same network built from its config with no quantisation config, holding the same weights."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=dtype)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.generation_config = model.generation_config
    return plain.eval()


def import_gguf(gguf: Path, dtype_name: str, folder: Path, key: str) -> dict[str, Any]:
    """Write `folder` (atomically) from the GGUF file; returns what the summary records."""
    dtype = DTYPES[dtype_name]
    t0 = time.time()
    model, tokenizer = load_gguf(gguf, dtype, key)
    plain = plain_copy(model, dtype)
    del model
    with atomic_dir(folder) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return {
        "gguf": str(gguf),
        "model_dir": str(folder),
        "architecture": type(plain).__name__,
        "parameters": sum(p.numel() for p in plain.parameters()),
        "dtype": dtype_name,
        "vocab_size": len(tokenizer),
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "timings_s": {"import_s": round(time.time() - t0, 2)},
    }


def run(settings: ModelImportSettings, args: argparse.Namespace) -> None:
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    out = Path(args.out)
    record = RunRecord(out, "import_model", to_mapping(settings))
    summary = import_gguf(Path(args.gguf), settings.dtype, out / "model", f"models.{settings.name}.gguf")
    log.info("imported %s: %s, %d parameters", settings.name, summary["architecture"], summary["parameters"])
    record.finish(summary)
