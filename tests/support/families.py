"""Tiny random-initialised models of the common open model families, built from transformers' config classes
(no hub), each with a byte-level BPE tokenizer trained here on the family's special tokens and a chat template in
the family's own layout: where the system prompt goes, how a turn ends, which token ends a reply.

| family   | architecture traits exercised                                   | chat layout (turn end; eos)           |
|----------|-----------------------------------------------------------------|---------------------------------------|
| llama    | Llama 3: GQA, untied output, no pad token (pad = eos)           | header blocks (<|eot_id|>; <|eot_id|>) |
| qwen2    | q/k/v biases, tied embeddings                                   | ChatML + default system (<|im_end|>)  |
| qwen3    | q/k RMSNorm, tied embeddings                                    | ChatML, empty <think> block before a  |
|          |                                                                 |   reply (<|im_end|>)                  |
| gemma2   | soft-capped attention and logits, sliding window on every other | <start_of_turn>; system folded into   |
|          | layer, sqrt(H)-scaled embeddings, tied, query_pre_attn_scalar   | the first user turn (<end_of_turn>;   |
| gemma3   | Gemma 3 text: q/k norms, local/global rope, sliding window      |   eos <eos>)                          |
| mistral  | sliding-window attention, no pad token (pad = eos)              | [INST] ... [/INST], system folded     |
|          |                                                                 |   into the first user turn (</s>)     |
| phi3     | fused qkv and gate/up projections, pad = eos                    | <|user|> blocks (<|end|>; <|endoftext|>) |

The sliding windows (8 tokens) are shorter than the test rows, so a path that ignores them gives other numbers.

Chat templates (issue 52): every family's own. Llama 3, Qwen2.5 (qwen2), Qwen3, Gemma 3 and Phi-3 use the
templates as TRL ships them (trl/chat_templates/<name>.jinja, the `bench` extra: byte copies of the models'
tokenizer_config.json templates, kept current by TRL's weekly check against the Hub repos; TRL's
chat_templates/README.md names each one's source). Gemma 2 (gemma2) too: trl's gemma.jinja, "used by both Gemma
(v1) and Gemma2, which ship identical templates"; it refuses a system message ("System role not supported"), and
prefpipe.common.chat folds a system turn into the first user turn for it (template_turns). Qwen3's writes an
empty <think></think> block before a finished reply; prefpipe makes it part of the prompt text (reply_start).
Mistral's (MISTRAL_INSTRUCT below) is a pinned copy of Mistral-7B-Instruct-v0.1's tokenizer_config.json
template as llama-cpp-python 0.3.36 pins it (llama_cpp/llama_chat_format.py, MISTRAL_INSTRUCT_CHAT_TEMPLATE,
"Source: https://huggingface.co/mistralai/Mistral-7B-Instruct-v0.1/blob/main/tokenizer_config.json"); TRL
ships none. It refuses a system turn and two turns in a row from one speaker; prefpipe folds and joins them.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from support.models import CHAT_CORPUS, PAIR_CORPUS, _bpe_json
from support.rows import RPS_PROMPTS
from support.tiers import need

WINDOW = 8  # sliding-window length, shorter than every test row
CORPUS = PAIR_CORPUS + CHAT_CORPUS + RPS_PROMPTS + ("system user assistant model helpful",)


@dataclass(frozen=True)
class Family:
    name: str
    config_class: str  # a transformers config class
    specials: tuple[str, ...]
    eos: str
    template: str
    bos: str | None = None
    pad: str | None = None  # None: the tokenizer has no pad token (the reward backbone pads with eos)
    stop: tuple[str, ...] = ()  # extra ids generation stops at (generation_config.eos_token_id)
    config: dict[str, Any] = field(default_factory=dict)


def _own_template(name: str) -> str:
    """trl/chat_templates/<name>.jinja, read without importing trl (module docstring)."""
    spec = importlib.util.find_spec("trl")
    found = spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations))) / "chat_templates" if found else None
    need(None if folder and folder.is_dir() else "trl's chat_templates not found: the families' own chat templates "
         "come from it (the bench extra; scripts/test.sh installs it)", allow_module_level=True)  # fmt: skip
    return (folder / f"{name}.jinja").read_text()


LLAMA3 = _own_template("llama3")
LLAMA3_1 = _own_template("llama3_1")  # Llama 3.1's, with JSON tool calls (the tool-format tests swap it in)
CHATML_SYSTEM = _own_template("qwen2_5")
QWEN3 = _own_template("qwen3")
GEMMA = _own_template("gemma")  # Gemma 2's (and Gemma 1's): refuses a system turn, prefpipe folds it
GEMMA3 = _own_template("gemma3")
# Mistral-7B-Instruct-v0.1's own template, byte for byte (module docstring: where it is pinned from).
MISTRAL_INSTRUCT = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
PHI3 = _own_template("phi3")
GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>")
TWO_LAYER_WINDOWS = ["sliding_attention", "full_attention"]


def _qwen(name: str, config_class: str, template: str) -> Family:
    """Qwen 2 / 3: ChatML, replies end with <|im_end|>, padding with <|endoftext|>, tied embeddings."""
    specials = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    return Family(name, config_class, specials, eos="<|im_end|>", pad="<|endoftext|>", stop=("<|endoftext|>",),
                  template=template, config={"tie_word_embeddings": True})  # fmt: skip


def _gemma(name: str, config_class: str, template: str, **config: Any) -> Family:
    """Gemma 2 / 3 (text): <start_of_turn> blocks, replies end with <end_of_turn>, eos <eos>; a sliding window
    on every other layer and a query scale other than the head size."""
    windows = {"sliding_window": WINDOW, "layer_types": TWO_LAYER_WINDOWS, "query_pre_attn_scalar": 16}
    return Family(name, config_class, GEMMA_SPECIALS, eos="<eos>", bos="<bos>", pad="<pad>",
                  stop=("<end_of_turn>",), template=template, config=windows | config)  # fmt: skip


FAMILIES = {
    f.name: f
    for f in (
        Family(
            "llama",
            "LlamaConfig",
            (
                "<|begin_of_text|>",
                "<|eot_id|>",
                "<|start_header_id|>",
                "<|end_header_id|>",
                "<|end_of_text|>",
            ),
            eos="<|eot_id|>",
            bos="<|begin_of_text|>",
            stop=("<|end_of_text|>",),
            template=LLAMA3,
        ),
        _qwen("qwen2", "Qwen2Config", CHATML_SYSTEM),
        _qwen("qwen3", "Qwen3Config", QWEN3),
        _gemma("gemma2", "Gemma2Config", GEMMA, attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
        _gemma("gemma3", "Gemma3TextConfig", GEMMA3),
        Family(
            "mistral",
            "MistralConfig",
            ("<unk>", "<s>", "</s>"),
            eos="</s>",
            bos="<s>",
            template=MISTRAL_INSTRUCT,
            config={"sliding_window": WINDOW},
        ),
        Family(
            "phi3",
            "Phi3Config",
            ("<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"),
            eos="<|endoftext|>",
            pad="<|endoftext|>",
            stop=("<|end|>",),
            template=PHI3,
        ),
    )
}


def family_tokenizer(family: Family) -> PreTrainedTokenizerFast:
    """A byte-level BPE on the family's special tokens with its chat template (no BOS added to bare text: the
    template writes it, as the families' own templates do)."""
    tok = Tokenizer.from_str(_bpe_json(family.specials, CORPUS, 10, 320, None))
    kwargs = {"bos_token": family.bos, "pad_token": family.pad}
    named = {family.eos, family.bos, family.pad}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=family.eos,
        additional_special_tokens=[t for t in family.specials if t not in named],  # the turn markers
        **{k: v for k, v in kwargs.items() if v},
    )
    tokenizer.chat_template = family.template
    return tokenizer


def family_config(family: Family, tokenizer: Any, hidden: int = 32, layers: int = 2) -> Any:
    """The family's config class at a tiny size: 4 query heads of 8 over 2 key/value heads."""
    config_class = getattr(transformers, family.config_class)
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    if tokenizer.bos_token_id is not None:
        ids["bos_token_id"] = tokenizer.bos_token_id
    return config_class(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=256,
        **ids,
        **family.config,
    )


def save_family_model(family: Family, folder: Path, seed: int = 0) -> Path:
    """A random causal LM of `family` with its tokenizer, saved as an HF folder (a policy or a reward backbone);
    generation stops at the eos token and the family's other turn-end tokens."""
    tokenizer = family_tokenizer(family)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(family_config(family, tokenizer))
    stops = [tokenizer.eos_token_id] + [tokenizer.convert_tokens_to_ids(t) for t in family.stop]
    model.generation_config.eos_token_id = stops
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
