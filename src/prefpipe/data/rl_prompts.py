"""RL prompts from a file or a hub dataset (`data.prompts`), as rows GRPO and the held-out evaluations read.

Row shape (the synthetic world's plus aliases): {"id", "prompt", "answer", "aliases", "kind"}, and "messages" where
the prompt is more than one user turn: an HH transcript, or a prompt field holding a message list ending on the
user's turn (a chat file; the prompt is then its plain_history text); `kind` is the configured verifier, so
every stage grades through `prefpipe.data.verifier`. Prompts without answers (`verifier: none`) have answer null
and kind "none" (reward-model-only GRPO).

Held-out prompts come from their own file or split and never repeat a training prompt: prompts are compared
after case folding and whitespace collapsing; held-out rows that match a training prompt are dropped and
counted (`overlap_dropped`). Bad rows follow `data.bad_rows` (error: file and row named; drop: counted).

With `paragraphs_field` set, a row also keeps its candidate paragraphs as `paragraphs` ([{title, text,
is_supporting}]: what a multi-turn run's `search` environment with `corpus: row` reads, and whose supporting
titles support recall counts) and its `hops` when it has an integer one (the multi-hop files' fields).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Any

from prefpipe.common.chat import plain_history
from prefpipe.common.config import DataError
from prefpipe.data.answers import normalize_number
from prefpipe.data.calculator_steps import DERIVERS
from prefpipe.data.hh_transcript import parse_transcript
from prefpipe.data.normalize import BadRow, RawRecord, message_list
from prefpipe.data.sources import open_records
from prefpipe.data.verifier import check_verifier
from prefpipe.settings.data import NO_VERIFIER, PromptSourceSettings

log = logging.getLogger(__name__)


class BadPrompt(ValueError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def prompt_key(prompt: str) -> str:
    """What makes two prompts the same prompt: case and whitespace do not count (punctuation does: 4 - 2)."""
    return " ".join(prompt.casefold().split())


def parse_answer(value: Any) -> str:
    """An answer as text; a GSM8K solution ("... #### 1,200") gives the number after ####, commas removed."""
    text = str(value).strip()
    if "####" in text:
        number = normalize_number(text.rsplit("####", 1)[1])
        if number is None:
            raise BadPrompt("bad_answer", f"no number after '####' in {text[-40:]!r}")
        return number
    if not text:
        raise BadPrompt("missing_answer", "empty answer")
    return text


def parse_paragraphs(value: Any, field: str) -> list[dict]:
    """A row's paragraphs as [{title, text, is_supporting}]: a non-empty list of objects with a non-empty
    string `text`, an optional string `title` and an optional boolean `is_supporting` (false when absent)."""
    if not isinstance(value, list) or not value:
        raise BadPrompt("bad_paragraphs", f"{field!r} is not a non-empty list of paragraphs")
    out = []
    for i, p in enumerate(value):
        if not isinstance(p, dict) or not isinstance(p.get("text"), str) or not p["text"].strip():
            raise BadPrompt("bad_paragraphs", f"{field}[{i}] has no non-empty string 'text'")
        title = p.get("title") or ""  # a paragraph may have no title (the search corpus's rule)
        supporting = p.get("is_supporting") or False
        if not isinstance(title, str) or not isinstance(supporting, bool):
            raise BadPrompt(
                "bad_paragraphs", f"{field}[{i}]: 'title' must be a string, 'is_supporting' a bool"
            )
        out.append({"title": title, "text": p["text"], "is_supporting": supporting})
    return out


def _environment_fields(settings: PromptSourceSettings, value: dict) -> dict:
    """What an environment reads from the row: its paragraphs and hops (nothing when paragraphs_field is null)."""
    if settings.paragraphs_field is None:
        return {}
    raw = value.get(settings.paragraphs_field)
    if raw is None:
        raise BadPrompt("missing_paragraphs", f"no {settings.paragraphs_field!r} field")
    hops = value.get("hops")
    kept_hops = {"hops": hops} if isinstance(hops, int) and not isinstance(hops, bool) else {}
    return {"paragraphs": parse_paragraphs(raw, settings.paragraphs_field), **kept_hops}


def _row(settings: PromptSourceSettings, value: Any, number: int, split: str) -> dict:
    if not isinstance(value, dict):
        raise BadPrompt("not_an_object", f"expected an object, got {type(value).__name__}")
    prompt, messages = value.get(settings.prompt_field), None
    if isinstance(prompt, list):  # a chat file: the field holds the turns before the reply
        try:
            messages = message_list(prompt, settings.prompt_field, "user")
        except BadRow as bad:
            raise BadPrompt("bad_prompt_messages", bad.detail) from None
        prompt = plain_history(messages)  # the text overlap checks and ids read, as for reward pairs
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadPrompt("missing_prompt", f"no non-empty {settings.prompt_field!r} field")
    row_id = value.get(settings.id_field) if settings.id_field else None
    row: dict[str, Any] = {"id": f"{split}-{number}" if row_id is None else str(row_id), "prompt": prompt}
    row |= _environment_fields(settings, value)
    messages = messages or parse_transcript(prompt)  # an HH transcript prompt: its turns
    if messages is not None and messages != [{"role": "user", "content": prompt}]:
        row["messages"] = messages  # the policy sees the turns (as reward pairs do)
    if settings.derive is not None:
        row[settings.solution_field] = value.get(settings.solution_field)
        return row
    answer, aliases = None, []
    if settings.has_answers:
        raw = value.get(settings.answer_field)
        if raw is None:
            raise BadPrompt("missing_answer", f"no {settings.answer_field!r} field")
        answer = parse_answer(raw)
        if settings.aliases_field:
            raw_aliases = value.get(settings.aliases_field) or []
            if not isinstance(raw_aliases, list):
                raise BadPrompt("bad_aliases", f"{settings.aliases_field!r} is not a list")
            aliases = [str(a).strip() for a in raw_aliases if str(a).strip()]
    return row | {"answer": answer, "aliases": aliases}


def _read(
    settings: PromptSourceSettings, key: str, path: str, split: str, bad_rows: str
) -> tuple[list[dict], dict]:
    """Rows of one file or split, and what was read, kept and dropped (by reason)."""
    where, records = open_records(settings.source, path, split, key=f"data.prompts.{key}")
    rows, dropped, seen_ids = [], Counter(), set()
    n_read = 0
    record: RawRecord
    for record in records:
        n_read += 1
        try:
            if record.error is not None:
                raise BadPrompt("unparsable", record.error)
            row = _row(settings, record.value, record.number, split)
            if row["id"] in seen_ids:
                raise BadPrompt("duplicate_id", f"id {row['id']!r} seen before")
        except BadPrompt as bad:
            if bad_rows == "error":
                raise DataError(f"{where}: row {record.number}: {bad} (data.bad_rows: error)") from None
            dropped[bad.reason] += 1
            continue
        seen_ids.add(row["id"])
        rows.append(row)
    if not rows:
        raise DataError(f"{where}: no usable prompt rows (data.prompts.{key}; dropped: {dict(dropped)})")
    if dropped:
        log.warning("%s: dropped %d bad prompt rows: %s", where, sum(dropped.values()), dict(dropped))
    return rows, {"source": where, "rows_read": n_read, "rows_kept": len(rows), "dropped": dict(dropped)}


def _dedupe(rows: list[dict]) -> tuple[list[dict], int]:
    seen: set[str] = set()
    out = []
    for row in rows:
        key = prompt_key(row["prompt"])
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out, len(rows) - len(out)


def _cap(rows: list[dict], limit: int | None, seed: int, part: str) -> list[dict]:
    """A seeded sample of `limit` rows in their original order (all rows when limit is None)."""
    if limit is None or len(rows) <= limit:
        return rows
    keep = sorted(random.Random(f"{seed}:prompts:{part}").sample(range(len(rows)), limit))
    return [rows[i] for i in keep]


def _finish(settings: PromptSourceSettings, rows: list[dict]) -> list[dict]:
    suffix = f"\n\n{settings.instruction}" if settings.instruction else ""
    kind = settings.verifier if settings.has_answers else NO_VERIFIER
    return [
        {
            "id": r["id"],
            "prompt": r["prompt"] + suffix,
            "answer": r.get("answer"),
            "aliases": r.get("aliases", []),
            "kind": kind,
            **_with_suffix(r.get("messages"), suffix),
            **{k: r[k] for k in ("paragraphs", "hops") if k in r},
        }
        for r in rows
    ]


def _with_suffix(messages: list[dict] | None, suffix: str) -> dict:
    """{"messages": ...} with the instruction appended to the last (user) turn, as it is to the prompt."""
    if not messages:
        return {}
    last = messages[-1] | {"content": messages[-1]["content"] + suffix}
    return {"messages": [*messages[:-1], last]}


def load_rl_prompt_rows(
    settings: PromptSourceSettings, bad_rows: str, seed: int
) -> tuple[list[dict], list[dict], dict]:
    """(train rows, held-out rows, report) from `data.prompts` (a non-synthetic source)."""
    check_verifier(settings)
    train, train_report = _read(settings, "path", settings.path, settings.split, bad_rows)
    if settings.source == "hf":
        heldout, heldout_report = _read(settings, "path", settings.path, settings.test_split, bad_rows)
    else:
        heldout, heldout_report = _read(
            settings, "test_path", settings.test_path, settings.test_split, bad_rows
        )
    report: dict[str, Any] = {
        "source": settings.source,
        "verifier": settings.verifier,
        "derive": settings.derive,
    }
    if settings.derive is not None:
        derive = DERIVERS[settings.derive]
        train, train_report["derived"] = derive(train, settings.solution_field)
        heldout, heldout_report["derived"] = derive(heldout, settings.solution_field)
    train, train_report["duplicate_prompts_dropped"] = _dedupe(train)
    heldout, heldout_report["duplicate_prompts_dropped"] = _dedupe(heldout)
    train_keys = {prompt_key(r["prompt"]) for r in train}
    before = len(heldout)
    heldout = [r for r in heldout if prompt_key(r["prompt"]) not in train_keys]
    heldout_report["overlap_dropped"] = before - len(heldout)
    if heldout_report["overlap_dropped"]:
        log.warning(
            "dropped %d held-out prompts that are also training prompts", heldout_report["overlap_dropped"]
        )
    if not heldout:
        raise DataError(
            f"{heldout_report['source']}: every held-out prompt is also a training prompt (data.prompts)"
        )
    train = _cap(train, settings.max_train, seed, "train")
    heldout = _cap(heldout, settings.max_heldout, seed, "heldout")
    train_report["rows"], heldout_report["rows"] = len(train), len(heldout)
    report |= {"train": train_report, "heldout": heldout_report}
    return _finish(settings, train), _finish(settings, heldout), report
