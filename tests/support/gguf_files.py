"""Tiny GGUF files written here with the `gguf` package (llama.cpp's own writer), F32, for fast import tests: the
2-layer Llama and chat tokenizer of support/models.py, or any model of a family that shares llama.cpp's Llama
tensor names (Qwen2: the same names plus the q/k/v biases), in llama.cpp's tensor names and metadata keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from support.models import chat_tokenizer, tiny_llama

# transformers' Llama weight names -> llama.cpp's (per layer: blk.<i>.)
LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}  # fmt: skip


def _gguf_name(name: str) -> str:
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    _, _, index, rest = name.split(".", 3)  # model.layers.<i>.<module>.weight|bias
    module, kind = rest.rsplit(".", 1)
    return f"blk.{index}.{LAYER_NAMES[module]}.{kind}"


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """The tiny chat Llama as a GGUF file (byte-level BPE tokenizer with its merges and chat template)."""
    tok = chat_tokenizer(chat_template=True)
    return write_gguf(path, "llama", tiny_llama(tok, seed=seed), tok)


def write_gguf(path: Path, arch: str, model: Any, tok: Any) -> Path:
    """`model` (a causal LM with Llama tensor names) and `tok` (byte-level BPE with pad, bos or not, eos and a
    chat template) as a GGUF file of llama.cpp architecture `arch`; a tied model writes no output tensor."""
    import gguf

    cfg = model.config
    backend = json.loads(tok.backend_tokenizer.to_str())
    vocab = backend["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
    specials = {t["content"] for t in backend["added_tokens"] if t["special"]}
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in specials else 1 for t in tokens])  # 3 = control
    writer.add_token_merges(merges)
    if tok.bos_token_id is not None:
        writer.add_bos_token_id(tok.bos_token_id)
    writer.add_eos_token_id(tok.eos_token_id)
    writer.add_pad_token_id(tok.pad_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(tok.chat_template)
    tied = cfg.tie_word_embeddings
    for name, tensor in model.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        writer.add_tensor(_gguf_name(name), tensor.detach().float().numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
