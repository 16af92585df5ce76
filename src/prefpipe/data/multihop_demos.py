"""Tool-use SFT demonstrations from a file of real multi-hop questions (`data.prompts.demonstrations`), so a
pretrained policy that has never seen the tag format (SmolLM2-135M writes prose, never a `<search>` tag) starts
GRPO from episodes whose groups can differ.

Each row ({question, answer, paragraphs: [{title, text, is_supporting}]}, read with data.prompts' field names)
gives the episode a searcher who knows the supporting titles writes: one `<search>title</search>` per
supporting paragraph, the paragraph coming back as the tag format renders the search environment's top result
(`\\n<result>[1] title: text</result>\\n`, cut to max_result_chars plus " [cut]" as the environment runner cuts
a long result), then `<answer>answer</answer>`. The paragraph whose title the question names goes first (the
first hop), the others in file order. A row whose results never show the answer (cut away, or not in a
supporting paragraph) would teach answering unseen text: it is dropped and counted (`answer_not_shown`), as
are rows whose question is a held-out prompt (`heldout_prompt`). Rows are the prompt file's shape plus
`turns` ({owner: policy | environment, text}) and `response`, what base.sft trains on (loss on the policy's
turns only).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from prefpipe.common.config import DataError
from prefpipe.data.answers import normalize_answer
from prefpipe.data.rl_prompts import BadPrompt, parse_paragraphs, prompt_key
from prefpipe.data.sources import open_records
from prefpipe.settings.data import PromptSourceSettings

CUT_MARK = " [cut]"  # the search environment runner's mark on a cut result (grpo/environments/base.py)


def result_text(paragraph: dict, max_chars: int) -> str:
    """What the tag format appends after a search whose top result is `paragraph`, cut as the runner cuts."""
    text = f"[1] {paragraph['title']}: {paragraph['text']}"
    if len(text) > max_chars:
        text = text[:max_chars] + CUT_MARK
    return f"\n<result>{text}</result>\n"


def hop_order(question: str, supporting: list[dict]) -> list[dict]:
    """Supporting paragraphs, those whose title the question names first (stable otherwise)."""
    folded = question.casefold()
    return sorted(supporting, key=lambda p: p["title"].casefold() not in folded)


def _shown(answers: list[str], texts: list[str]) -> bool:
    seen = " ".join(f" {normalize_answer(t)} " for t in texts)
    return any(f" {a} " in seen for a in map(normalize_answer, answers) if a)


def demonstration(prompt: str, answer: str, aliases: list[str], paragraphs: list[dict], max_chars: int):
    """The demonstration's turns, or None when no result shows the answer or no paragraph supports it."""
    hops = hop_order(prompt, [p for p in paragraphs if p["is_supporting"]])
    if not hops:
        return None
    turns: list[dict[str, str]] = []
    for p in hops:
        turns.append({"owner": "policy", "text": f"<search>{p['title']}</search>"})
        turns.append({"owner": "environment", "text": result_text(p, max_chars)})
    if not _shown([answer, *aliases], [t["text"] for t in turns if t["owner"] == "environment"]):
        return None
    return [*turns, {"owner": "policy", "text": f"<answer>{answer}</answer>"}]


def _demo_row(settings: PromptSourceSettings, value: Any, number: int) -> dict | None:
    if not isinstance(value, dict):
        raise BadPrompt("not_an_object", f"expected an object, got {type(value).__name__}")
    question, answer = value.get(settings.prompt_field), value.get(settings.answer_field or "")
    if not isinstance(question, str) or not question.strip() or answer is None or not str(answer).strip():
        raise BadPrompt("missing_prompt_or_answer", "no question or no answer")
    aliases = [str(a) for a in (value.get(settings.aliases_field or "") or [])]
    paragraphs = parse_paragraphs(value.get(settings.paragraphs_field or ""), settings.paragraphs_field or "")
    spec = settings.demonstrations
    turns = demonstration(question, str(answer).strip(), aliases, paragraphs, spec.max_result_chars)
    if turns is None:
        return None
    suffix = f"\n\n{settings.instruction}" if settings.instruction else ""
    row_id = value.get(settings.id_field) if settings.id_field else None
    return {
        "id": f"demo-{number}" if row_id is None else f"demo-{row_id}",
        "prompt": question + suffix,
        "response": "".join(t["text"] for t in turns),
        "turns": turns,
    }


def load_demonstrations(
    settings: PromptSourceSettings, heldout: list[dict], bad_rows: str
) -> tuple[list[dict], dict[str, Any]]:
    """(demonstrations, report) from data.prompts.demonstrations.path (read as data.prompts.source reads its
    files), the first max_rows usable rows in file order; held-out questions never appear."""
    spec = settings.demonstrations
    where, records = open_records(settings.source, spec.path, "train", key="data.prompts.demonstrations.path")
    held = {prompt_key(r["prompt"]) for r in heldout}
    rows, dropped, n_read = [], Counter(), 0
    for record in records:
        n_read += 1
        try:
            if record.error is not None:
                raise BadPrompt("unparsable", record.error)
            row = _demo_row(settings, record.value, record.number)
        except BadPrompt as bad:
            if bad_rows == "error":
                raise DataError(f"{where}: row {record.number}: {bad} (data.bad_rows: error)") from None
            dropped[bad.reason] += 1
            continue
        if row is None:
            dropped["answer_not_shown"] += 1
        elif prompt_key(row["prompt"]) in held:
            dropped["heldout_prompt"] += 1
        elif spec.max_rows is None or len(rows) < spec.max_rows:
            rows.append(row)
    if not rows:
        raise DataError(f"{where}: no usable demonstration rows (dropped: {dict(dropped)})")
    return rows, {"source": where, "rows_read": n_read, "demonstrations": len(rows), "dropped": dict(dropped)}
