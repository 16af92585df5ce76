"""One way to turn (prompt, response) into model text, shared by SFT, reward models, evaluation and GRPO.

Reward scores and policy log-probs are only comparable across stages when every stage formats text the same
way, so no stage builds its own strings: chat models get their tokenizer's chat template; tokenizers without
one get a plain "prompt\n\nresponse" layout.
"""

from __future__ import annotations

from typing import Any

PLAIN_SEPARATOR = "\n\n"


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def format_prompt(tokenizer: Any, prompt: str) -> str:
    """Text a policy is conditioned on before it generates (ends where the response starts)."""
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
    return prompt + PLAIN_SEPARATOR


def format_pair(tokenizer: Any, prompt: str, response: str, add_eos: bool = True) -> str:
    """Prompt and response as one sequence; the response ends with EOS so last-token pooling sees the end."""
    text = format_prompt(tokenizer, prompt) + response
    eos = getattr(tokenizer, "eos_token", None)
    if add_eos and eos and not text.endswith(eos):
        text += eos
    return text


def format_pairs(
    tokenizer: Any, prompts: list[str], responses: list[str], add_eos: bool = True
) -> tuple[list[str], list[str]]:
    """format_pair for many rows, rendering each distinct prompt once (the chat template is Jinja, slow per
    call). Returns the formatted prompts and the formatted pairs, row by row; the same strings as format_prompt
    and format_pair."""
    rendered: dict[str, str] = {}
    eos = getattr(tokenizer, "eos_token", None) if add_eos else None
    heads, texts = [], []
    for prompt, response in zip(prompts, responses, strict=True):
        head = rendered.get(prompt)
        if head is None:
            head = rendered[prompt] = format_prompt(tokenizer, prompt)
        text = head + response
        if eos and not text.endswith(eos):
            text += eos
        heads.append(head)
        texts.append(text)
    return heads, texts
