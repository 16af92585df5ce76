"""`search`: BM25 over a local corpus with `bm25s` (MIT), the retriever of Search-R1-style training.

Options (all required; a spec lacking one fails naming it):
  corpus  "row": each episode searches its own task row's `paragraphs` ([{title, text, ...}], the multi-hop
          files' candidate set); or a path to a JSON-lines file indexed once and shared by every episode, each
          line either a paragraph ({title, text}) or a row with `paragraphs` (pooled, duplicates dropped)
  top_k   paragraphs returned per query (fewer when fewer match at all)
  k1, b   BM25's term-frequency saturation and length normalisation

Scoring is bm25s's `lucene` variant: for query terms q and a document d of length |d| (average L),
  score(d) = sum_q idf(q) * tf(q, d) / (tf(q, d) + k1 * (1 - b + b * |d| / L)),  idf = log(1 + (N - df + .5) / (df + .5)).
Text is lower-cased and split into word characters (`\\w+`); a document is its title and its text. Only
documents with a positive score are returned, best first (ties in corpus order), as `[i] title: text` lines;
a query that matches nothing returns an empty result (counted as `empty_result` by the runner). The titles
returned in the current episode are kept in `retrieved` (for support recall).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefpipe.common.config import ConfigError, DataError
from prefpipe.grpo.environments.base import ToolCall
from prefpipe.grpo.environments.registry import register_environment

_WORD = re.compile(r"\w+")
OPTIONS = ("corpus", "top_k", "k1", "b")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _document(paragraph: Mapping[str, Any]) -> tuple[str, str]:
    return str(paragraph.get("title") or ""), str(paragraph["text"])  # a corpus line may have no title


class Bm25Index:
    """A bm25s index over (title, text) paragraphs."""

    def __init__(self, paragraphs: Sequence[tuple[str, str]], k1: float, b: float) -> None:
        import bm25s  # the search environment's own dependency: loaded only when one is built

        self.paragraphs = list(paragraphs)
        self.retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        self.retriever.index([words(f"{t} {x}") or [""] for t, x in self.paragraphs], show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        terms = words(query)
        if not terms or not self.paragraphs:
            return np.zeros(len(self.paragraphs))
        return np.asarray(self.retriever.get_scores(terms), dtype=np.float64)

    def search(self, query: str, top_k: int) -> list[int]:
        """Indices of the top_k best-scoring paragraphs with a positive score, ties in corpus order."""
        scores = self.scores(query)
        order = np.argsort(-scores, kind="stable")
        return [int(i) for i in order[:top_k] if scores[i] > 0]


def read_corpus(path: Path) -> list[tuple[str, str]]:
    """Paragraphs of a JSON-lines corpus: {title, text} lines, or rows whose `paragraphs` are pooled."""
    if not path.is_file():
        raise DataError(f"search corpus {path}: no such file")
    seen: dict[tuple[str, str], None] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        items = record.get("paragraphs", [record])
        for paragraph in items:
            if "text" not in paragraph:
                raise DataError(f"search corpus {path}:{n}: a paragraph without `text`")
            seen.setdefault(_document(paragraph), None)
    return list(seen)


class Search:
    tools = ("search",)

    def __init__(self, corpus: str, top_k: int, k1: float, b: float) -> None:
        self.per_row = corpus == "row"
        self.top_k, self.k1, self.b = int(top_k), float(k1), float(b)
        self.index = None if self.per_row else Bm25Index(read_corpus(Path(corpus)), self.k1, self.b)
        self.retrieved: list[str] = []

    def reset(self, row: Mapping[str, Any]) -> None:
        self.retrieved = []
        if self.per_row:
            if "paragraphs" not in row:
                raise DataError("search with corpus: row needs the task row's `paragraphs`")
            self.index = Bm25Index([_document(p) for p in row["paragraphs"]], self.k1, self.b)

    def step(self, call: ToolCall) -> str:
        if self.index is None:
            raise RuntimeError("search: reset(row) was not called before the first search")
        hits = self.index.search(call.argument, self.top_k)
        lines = []
        for rank, i in enumerate(hits, 1):
            title, text = self.index.paragraphs[i]
            self.retrieved.append(title)
            lines.append(f"[{rank}] {title}: {text}" if title else f"[{rank}] {text}")
        return "\n".join(lines)


@register_environment("search")
def search(options: Mapping[str, Any]) -> Search:
    missing = [k for k in OPTIONS if k not in options]
    unknown = sorted(set(options) - set(OPTIONS))
    if missing or unknown:
        raise ConfigError(f"search environment: missing options {missing}, unknown options {unknown}")
    return Search(**{k: options[k] for k in OPTIONS})
