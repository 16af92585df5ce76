"""The exported model's README.md: what it is (base model, data, head math), how to load it, and its benchmark
scores from the run's evaluation summary when there is one."""

from __future__ import annotations

from typing import Any

from prefpipe.reward.heads.facts import head_facts

SEQ_CLS_USAGE = """```python
import importlib.util
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

# prefpipe_chat.py: prefpipe's own renderer of reward inputs (prefpipe.common.chat, standard library only)
spec = importlib.util.spec_from_file_location("prefpipe_chat", "THIS_FOLDER/prefpipe_chat.py")
chat = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chat)
tok = AutoTokenizer.from_pretrained("THIS_FOLDER")
model = AutoModelForSequenceClassification.from_pretrained("THIS_FOLDER").eval()
# a conversation: the turns before the reply, ending on the user's (roles system, user, assistant)
conversation = [
    {{"role": "user", "content": "Hi"}},
    {{"role": "assistant", "content": "Hello! How can I help?"}},
    {{"role": "user", "content": "What is 2 + 3?"}},
]
text = chat.format_pair(tok, conversation, response)  # also takes a plain prompt string (one user turn)
batch = tok([text], return_tensors="pt", padding=True, add_special_tokens={special})
with torch.no_grad():
    logit = model(**batch).logits[:, 0]
reward = logit + model.config.prefpipe_reward_offset  # prefpipe's r(x, y); preferences need only the logits
```
`format_pair` renders {render}. For a plain prompt string it is the same as, without `prefpipe_chat.py`,
`text = {prompt_text} + response + model.config.prefpipe_reply_end` (the reply starts and ends as the template
starts and ends a finished assistant turn). Pad on the right (the saved tokenizer does): the class reads the last token that is not padding.
It reads a row whole: prefpipe cuts a row longer than `model.config.prefpipe_max_length` tokens (prompt tokens
from the left first, then the response's end), so the class's score of such a row is not prefpipe's; score rows
that long with the head-folder form (`prefpipe export RUN OUT --format head-folder`), whose loader cuts them as
prefpipe does."""

LOADER_USAGE = """```python
import importlib.util
spec = importlib.util.spec_from_file_location("reward_loader", "THIS_FOLDER/reward_loader.py")
loader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loader)
rm = loader.ExportedRewardModel.from_folder("THIS_FOLDER")
p = rm.preference_prob([prompt], [response_a], [response_b])  # P(a preferred to b), one per row
# a conversation: the turns before the reply, ending on the user's (roles system, user, assistant)
conversation = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "What is 2 + 3?"},
]
p = rm.preference_prob([conversation], [response_a], [response_b])
```
Each entry of the first argument (of `preference_prob`, `encode` and, for a BT head, `rewards`) is a plain prompt
string (one user turn) or such a message list. The text is prefpipe's own reward input, rendered by the
shipped `prefpipe_chat.py` (prefpipe.common.chat, copied): RENDER. `reward_loader.py` needs torch and
transformers only; its docstring gives the text format and the head math."""

# How prefpipe renders a conversation + reply (prefpipe.common.chat.format_pairs), by whether there is a template.
RENDER = {
    True: "the chat template's rendering of the conversation with the reply as the final assistant turn, up to "
    "the end of that turn",
    False: 'the plain history ("Human: ...\\n\\nAssistant: ..." for several turns, the text itself for one '
    "user turn) + two newlines + the reply + the EOS token",
}


def _usage(info: dict[str, Any], chat_template: bool) -> str:
    if info["format"] != "sequence-classification":
        return LOADER_USAGE.replace("RENDER", RENDER[chat_template])
    prompt_text = (
        'tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)'
        " + model.config.prefpipe_reply_start"
        if chat_template
        else 'prompt + "\\n\\n"'
    )
    return SEQ_CLS_USAGE.format(
        prompt_text=prompt_text, special=not chat_template, render=RENDER[chat_template]
    )


def _num(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _benchmarks(summary: dict[str, Any] | None) -> list[str]:
    if summary is None:
        return ["No evaluation summary was given to the export: no benchmark scores."]
    lines = [
        f"Benchmark `{summary.get('benchmark')}` ({summary.get('n_pairs')} pairs, data "
        f"`{(summary.get('data') or {}).get('source')}`): overall {_num(summary.get('overall'))}, pooled accuracy "
        f"{_num(summary.get('pooled_accuracy'))}.",
        "",
        "| section | score | n |",
        "|---|---|---|",
    ]
    for name, section in (summary.get("sections") or {}).items():
        lines.append(f"| {name} | {_num(section.get('score'))} | {section.get('n')} |")
    calibration = summary.get("calibration") or {}
    if "ece" in calibration:
        lines += ["", f"Calibration: ECE {_num(calibration['ece'])}, Brier {_num(calibration.get('brier'))} "
                  f"({summary.get('prob_method')})."]  # fmt: skip
    return lines


def model_card(
    variant: str,
    info: dict[str, Any],
    spec: dict[str, Any],
    run_config: dict[str, Any],
    run_summary: dict[str, Any],
    eval_summary: dict[str, Any] | None,
) -> str:
    """README.md text. `spec`: head_config.json; `run_config`/`run_summary`: the training run's config.json
    ("config") and summary.json; `eval_summary`: the evaluation stage's summary.json or None."""
    head = spec["head"]
    backbone = run_config.get("backbone", {})
    why = info.get("why_not_sequence_classification")
    lines = [
        f"# prefpipe reward model `{variant}` ({head['type']})",
        "",
        f"Exported by `python -m prefpipe.export_reward` in the **{info['format']}** form"
        + (f" ({info['architecture']})." if "architecture" in info else "."),
    ]
    if why:
        lines += ["", f"Not a sequence-classification model because {why}."]
    lines += [
        "",
        "## Base model",
        f"Backbone `{backbone.get('model')}` ({info['model_type']}, hidden size {spec['hidden_size']}, "
        f"{spec['backbone_kind']}, {spec['backbone_format']} fine-tuning), pooling `{spec['pooling']}`; "
        f"features: final state{' + response mean input embedding' if spec['embedding_features'] else ''}"
        f"{' + response log-likelihood under the frozen base' if spec['likelihood_features'] else ''}.",
        "",
        "## Data",
        f"Experiment `{run_config.get('experiment')}`, seed {run_config.get('seed')}: "
        f"{run_summary.get('train_pairs')} training pairs, {run_summary.get('test_pairs')} test pairs, "
        f"{run_summary.get('steps')} steps; sequences cut to {spec['max_length']} tokens (prompt first, from the left; "
        f"then a too-long response keeps its {spec.get('keep_response', 'start')}).",
        "",
        "## Head",
        _head_math(head["type"]) + f" tau = {head['tau']}.",
    ]
    if info.get("reward_offset") is not None:
        lines.append(
            f"The class's score layer has no bias: logit = r(x, y) - {info['reward_offset']!r} "
            "(config.json `prefpipe_reward_offset`)."
        )
    lines += ["", "## Use", _usage(info, spec["chat"]["chat_template"]), "", "## Benchmark scores"]
    return "\n".join(lines + _benchmarks(eval_summary)) + "\n"


def _head_math(head_type: str) -> str:
    """What the head computes, from the head facts (prefpipe.reward.heads.facts); a head without facts by name."""
    facts = head_facts(head_type)
    return facts.math if facts is not None else f"A {head_type!r} reward head."
