"""Real tiny models for tests: byte-level BPE tokenizers trained here, 2-layer Llamas built from a config,
the same saved as HF folders (what results/base/model looks like), and reward models built on them.

- `chat_tokenizer` / `tiny_llama` / `save_tiny_policy`: the GRPO tests' policy (pad, bos, eos; optional chat
  template).
- `pair_tokenizer` / `save_tiny_base` / `build_reward`: the reward tests' backbone (a Llama-like tokenizer that
  adds BOS; `pad=False` leaves it without a pad token).
- `save_scratch_base`: the pipeline's own scratch tokenizer and tiny Llama (prefpipe.base), trained on given texts.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel, PreTrainedTokenizerFast

from support.settings import base_settings, tiny_reward_settings

CHAT_SPECIALS = ("<pad>", "<bos>", "<eos>")
CHAT_CORPUS = (
    "What is 2 plus 3? 5",
    "What is 7 plus 1? 8",
    "Say yes. yes",
    "Say no. no",
    "Repeat cat: cat",
    "the quick brown fox jumps over the lazy dog",
    "0 1 2 3 4 5 6 7 8 9",
    "abcdefghijklmnopqrstuvwxyz",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "Answer with one word.",
)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
PAIR_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
PAIR_CORPUS = (
    "Choose a move. rock paper scissors",
    "What is 2 plus 3? The answer is 5. What is 7 plus 1? 8",
    "Please be polite. I cannot help with that. Sure, here you go.",
    "the quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,!?",
)


@functools.lru_cache(maxsize=4)
def _bpe_json(
    specials: tuple[str, ...], corpus: tuple[str, ...], repeat: int, vocab_size: int, unk: str | None
) -> str:
    """A byte-level BPE trained on `corpus * repeat`; with `unk`, a Llama-like `<s> $A` post-processor."""
    tok = Tokenizer(models.BPE(unk_token=unk) if unk else models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(corpus) * repeat, trainer)
    if unk:
        bos = specials[1]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    return tok.to_str()


def chat_tokenizer(vocab_size: int = 320, chat_template: bool = False) -> PreTrainedTokenizerFast:
    """The GRPO tests' tokenizer: pad, bos and eos tokens; no BOS added to bare text."""
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_bpe_json(CHAT_SPECIALS, CHAT_CORPUS, 20, vocab_size, None)),
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
    )
    if chat_template:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def pair_tokenizer(pad: bool = True) -> PreTrainedTokenizerFast:
    """The reward tests' Llama-like tokenizer (adds BOS); pad=False leaves it without a pad token."""
    kwargs = {"pad_token": "<pad>"} if pad else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_bpe_json(PAIR_SPECIALS, PAIR_CORPUS, 10, 300, "<unk>")),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        **kwargs,
    )


def _llama_config(
    tokenizer: Any, hidden: int, layers: int, heads: int, kv_heads: int, positions: int, **extra
):
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **extra,
    )


def tiny_llama(tokenizer: Any, seed: int = 0, hidden: int = 32, layers: int = 2) -> LlamaForCausalLM:
    """A random causal Llama for `tokenizer` (same seed, same weights), generation ids set."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_llama_config(tokenizer, hidden, layers, 4, 2, 256, tie_word_embeddings=False))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def tiny_smollm2(tokenizer: Any, seed: int = 0) -> LlamaForCausalLM:
    """A random 2-layer model of SmolLM2's architecture (Llama with grouped-query attention and tied
    embeddings), head size 32 (a size vLLM's CPU attention supports), generation ids set."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_llama_config(tokenizer, 128, 2, 4, 2, 256, tie_word_embeddings=True))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_tiny_policy(folder: Path, seed: int = 0, chat_template: bool = True) -> Path:
    """`tiny_llama` + `chat_tokenizer` saved as an HF folder (a policy or a reward backbone)."""
    tok = chat_tokenizer(chat_template=chat_template)
    tiny_llama(tok, seed=seed).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def save_tiny_base(folder: Path, pad: bool = True, hidden: int = 32, seed: int = 0) -> Path:
    """A 2-layer Llama backbone + `pair_tokenizer` saved as an HF folder."""
    tok = pair_tokenizer(pad=pad)
    torch.manual_seed(seed)
    LlamaModel(_llama_config(tok, hidden, 2, 2, 2, 128)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def save_gqa_base(folder: Path, seed: int = 0) -> Path:
    """A 3-layer Llama backbone with 4 query heads over 2 key/value heads (grouped-query attention) +
    `pair_tokenizer`, saved as an HF folder."""
    tok = pair_tokenizer()
    torch.manual_seed(seed)
    LlamaModel(_llama_config(tok, 32, 3, 4, 2, 128)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def lora_reward(base: Path | str, head: str = "gpm", /, **overrides):
    """build_reward with LoRA adapters (r 4) whose B matrices are random, so the adapters change outputs
    (LoRA B starts at zero)."""
    lora = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0}
    rm, settings = build_reward(base, head, lora=lora, **overrides)
    with torch.no_grad():
        for name, p in rm.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return rm, settings


def save_tiny_tied_base(folder: Path, hidden: int = 32, seed: int = 0) -> Path:
    """A 2-layer causal Llama whose output layer is its input embeddings (what backbone.likelihood_features
    needs) + `pair_tokenizer`, saved as an HF folder."""
    tok = pair_tokenizer()
    torch.manual_seed(seed)
    LlamaForCausalLM(_llama_config(tok, hidden, 2, 2, 2, 128, tie_word_embeddings=True)).save_pretrained(
        folder
    )
    tok.save_pretrained(folder)
    return folder


def build_reward(base: Path | str, head: str = "gpm", /, seed: int = 0, **overrides):
    """A fresh reward model on the backbone in `base` (head init seeded) and its settings:
    `tiny_reward_settings(head, **overrides)`."""
    from prefpipe.reward.model import build_reward_model

    settings = tiny_reward_settings(head, **overrides)
    torch.manual_seed(seed)
    return build_reward_model(str(base), settings), settings


def save_scratch_base(folder: Path, texts: list[str], vocab_size: int, seed: int = 0, **model: Any) -> Path:
    """The pipeline's scratch tokenizer trained on `texts` and its tiny Llama (`base.model` with `model`
    merged), saved as an HF folder."""
    from prefpipe.base.model import build_tiny_llama
    from prefpipe.base.tokenizer import train_tokenizer

    model_settings = base_settings({"model": model}).model
    tokenizer = train_tokenizer(texts, vocab_size, model_settings.max_position_embeddings)
    build_tiny_llama(model_settings, tokenizer, seed).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_grpo_inputs(root: Path) -> Path:
    """What train_grpo reads, under root: base/ (`save_tiny_policy`, seed 2), data/ (RL prompt rows, train and
    held-out) and rm/ (a GPM reward model on that policy, 4-dim head)."""
    from prefpipe.common.io import write_jsonl
    from prefpipe.reward.model import build_reward_model, save_reward_model
    from support.rows import rl_rows

    policy = save_tiny_policy(root / "base", seed=2)
    write_jsonl(root / "data" / "rl_prompts_train.jsonl", rl_rows())
    write_jsonl(root / "data" / "rl_prompts_heldout.jsonl", rl_rows())
    torch.manual_seed(0)
    settings = tiny_reward_settings("gpm", head={"dim": 4}, data={"max_length": 64})
    save_reward_model(build_reward_model(str(policy), settings), root / "rm")
    return root


def random_lora(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A LoRA-wrapped copy of `model` whose adapter is not the identity (lora_B random, not zero)."""
    import copy

    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return peft_model.eval()
