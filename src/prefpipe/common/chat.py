"""One way to turn (prompt, response) into model text, shared by SFT, reward models, evaluation and GRPO.

Reward scores and policy log-probs are only comparable across stages when every stage formats text the same
way, so no stage builds its own strings: chat models get their tokenizer's chat template; tokenizers without
one get a plain "prompt\n\nresponse" layout. A response ends the way the template ends an assistant turn
(`reply_end`): Gemma's <end_of_turn>, Phi-3's <|end|> then <|endoftext|>, the EOS token elsewhere.
"""

from __future__ import annotations

from typing import Any

PLAIN_SEPARATOR = "\n\n"
REPLY_PROBE = "@@prefpipe-reply@@"  # stands for the reply when the template renders a finished turn
_REPLY_ENDS: dict[tuple[str, str | None], str | None] = {}


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def format_prompt(tokenizer: Any, prompt: str) -> str:
    """Text a policy is conditioned on before it generates (ends where the response starts)."""
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
    return prompt + PLAIN_SEPARATOR


def reply_end(tokenizer: Any) -> str | None:
    """What follows a finished reply: the chat template's end of an assistant turn, trailing whitespace dropped
    (Gemma: <end_of_turn>; Phi-3: <|end|>, a newline and <|endoftext|>; Llama 3, ChatML, Mistral and the scratch
    base: their EOS token), else the EOS token (no template; a template that writes nothing after the reply, or
    whose finished turn does not start with its generation prompt). Rendered once per template."""
    eos = getattr(tokenizer, "eos_token", None)
    if not has_chat_template(tokenizer):
        return eos
    key = (tokenizer.chat_template, eos)
    if key not in _REPLY_ENDS:
        from jinja2 import TemplateError

        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": REPLY_PROBE}]
        try:
            turn = tokenizer.apply_chat_template(messages, tokenize=False)
        except (TemplateError, ValueError):  # a template that cannot render a finished turn: EOS ends replies
            turn = ""
        head, found, tail = turn.partition(REPLY_PROBE)
        end = tail.rstrip()
        _REPLY_ENDS[key] = end if found and end and head == format_prompt(tokenizer, "Hi") else eos
    return _REPLY_ENDS[key]


def format_pair(tokenizer: Any, prompt: str, response: str, add_eos: bool = True) -> str:
    """Prompt and response as one sequence; the response ends as the model ends a reply (`reply_end`), so
    last-token pooling reads the end of the turn."""
    text = format_prompt(tokenizer, prompt) + response
    end = reply_end(tokenizer) if add_eos else None
    if end and not text.endswith(end):
        text += end
    return text


def format_pairs(
    tokenizer: Any, prompts: list[str], responses: list[str], add_eos: bool = True
) -> tuple[list[str], list[str]]:
    """format_pair for many rows, rendering each distinct prompt once (the chat template is Jinja, slow per
    call). Returns the formatted prompts and the formatted pairs, row by row; the same strings as format_prompt
    and format_pair."""
    rendered: dict[str, str] = {}
    end = reply_end(tokenizer) if add_eos else None
    heads, texts = [], []
    for prompt, response in zip(prompts, responses, strict=True):
        head = rendered.get(prompt)
        if head is None:
            head = rendered[prompt] = format_prompt(tokenizer, prompt)
        text = head + response
        if end and not text.endswith(end):
            text += end
        heads.append(head)
        texts.append(text)
    return heads, texts
