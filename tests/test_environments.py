"""Environments (grpo/environments/): BM25 search against a brute-force BM25 written here, the calculator
against Python's own arithmetic, and every failure kind as a counted observation, never an exception."""

from __future__ import annotations

import json
import math
import re

import pytest
from support.episodes import Flaky

from prefpipe.common.config import ConfigError, DataError
from prefpipe.grpo.environments.base import (
    CUT_MARK,
    EMPTY_RESULT,
    EMPTY_TEXT,
    ENVIRONMENT_ERROR,
    ERROR_KINDS,
    MALFORMED_CALL,
    RESULT_CUT,
    UNKNOWN_TOOL,
    EnvironmentRunner,
    ToolCall,
)
from prefpipe.grpo.environments.calculator import evaluate
from prefpipe.grpo.environments.registry import ENVIRONMENTS, build_environment, register_environment
from prefpipe.grpo.environments.search import Bm25Index

DOCS = [
    ("Cats", "The cat sat on the mat. A cat likes the mat."),
    ("Dogs", "A dog ran in the park; the dog barked at a cat."),
    ("Birds", "Birds fly over the park and the river."),
]


def brute_bm25(docs: list[tuple[str, str]], query: str, k1: float, b: float) -> list[float]:
    """Lucene BM25, term by term, from the definition: idf = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    toks = [re.findall(r"\w+", f"{t} {x}".lower()) for t, x in docs]
    n, avg = len(toks), sum(len(d) for d in toks) / len(toks)
    scores = []
    for d in toks:
        s = 0.0
        for q in re.findall(r"\w+", query.lower()):
            df = sum(1 for other in toks if q in other)
            if df == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = d.count(q)
            s += idf * tf / (tf + k1 * (1 - b + b * len(d) / avg))
        scores.append(s)
    return scores


@pytest.mark.parametrize("query", ["cat mat", "dog park", "the park river", "birds cat", "zebra"])
@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (0.9, 0.4)])
def test_bm25_scores_and_ranking_match_the_formula(query, k1, b):
    index = Bm25Index(DOCS, k1, b)
    want = brute_bm25(DOCS, query, k1, b)
    assert index.scores(query) == pytest.approx(want, rel=1e-5, abs=1e-6)
    ranked = sorted((i for i in range(3) if want[i] > 0), key=lambda i: (-want[i], i))
    assert index.search(query, 3) == ranked
    assert index.search(query, 1) == ranked[:1]


def test_search_over_the_rows_own_paragraphs_and_a_shared_corpus(tmp_path):
    row = {"question": "q", "paragraphs": [{"title": t, "text": x, "is_supporting": False} for t, x in DOCS]}
    env = build_environment({"type": "search", "corpus": "row", "top_k": 2, "k1": 1.5, "b": 0.75})
    env.reset(row)
    out = env.step(ToolCall("search", "dog park"))
    assert out.splitlines()[0].startswith("[1] Dogs: A dog ran")
    assert env.retrieved[0] == "Dogs" and len(out.splitlines()) == 2
    env.reset({"paragraphs": [{"title": "Other", "text": "nothing about animals"}]})
    assert env.retrieved == [] and env.step(ToolCall("search", "dog")) == ""
    # shared corpus: rows with paragraphs pooled (a duplicate dropped) beside plain {title, text} lines
    path = tmp_path / "corpus.jsonl"
    lines = [
        {"paragraphs": [{"title": t, "text": x} for t, x in DOCS]},
        {"title": "Cats", "text": DOCS[0][1]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    shared = build_environment({"type": "search", "corpus": str(path), "top_k": 3, "k1": 1.5, "b": 0.75})
    assert len(shared.index.paragraphs) == 3
    shared.reset({"question": "no paragraphs needed"})
    assert shared.step(ToolCall("search", "river")).startswith("[1] Birds:")


def test_search_on_a_real_multihop_row(shared_data):
    row = json.loads((shared_data / "multihop_musique_train.jsonl").read_text().splitlines()[0])
    docs = [(p["title"], p["text"]) for p in row["paragraphs"]]
    index = Bm25Index(docs, 1.5, 0.75)
    want = brute_bm25(docs, row["question"], 1.5, 0.75)
    assert index.scores(row["question"]) == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert index.search(row["question"], 5) == sorted(range(len(docs)), key=lambda i: (-want[i], i))[:5]


def test_search_options_are_all_named():
    with pytest.raises(ConfigError, match=r"missing options \['top_k'"):
        build_environment({"type": "search", "corpus": "row", "k1": 1.5, "b": 0.75})
    with pytest.raises(DataError, match="no such file"):
        build_environment({"type": "search", "corpus": "/nonexistent.jsonl", "top_k": 1, "k1": 1, "b": 0.5})


EXPRESSIONS = ["1 + 2 * 3", "(1 + 2) * 3", "7 / 2", "7 // 2", "-7 % 3", "2 ** 10", "2 ** -2", "12 / 4",
               "0.1 + 0.2", "-(3 - 10) * 2.5", "1e3 / 7", "+5 - -5", "123456789 * 987654321"]  # fmt: skip


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_calculator_agrees_with_python_arithmetic(expr):
    want = eval(expr)  # the test's own reference: Python's arithmetic on a literal
    env = build_environment({"type": "calculator"})
    text = env.step(ToolCall("calc", expr))
    assert float(text) == float(want) and evaluate(expr) == want
    whole = isinstance(want, int) or (want.is_integer() and abs(want) < 1e16)
    assert ("." not in text) == whole and (not isinstance(want, int) or text == str(want))


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os')",
        "x + 1",
        "abs(-1)",
        "'a' * 3",
        "1 < 2",
        "[1, 2]",
        "(1).real",
        "9 ** 9 ** 9",
        "2 ** 5000",
    ],
)
def test_calculator_refuses_anything_but_arithmetic(expr):
    with pytest.raises(ValueError):
        evaluate(expr)


def test_every_failure_becomes_a_counted_observation():
    runner = EnvironmentRunner(Flaky(), max_result_chars=20)
    runner.reset({"question": "q"})
    cases = [
        (ToolCall("echo", "hello"), None, "hello"),
        (ToolCall("search", "x"), UNKNOWN_TOOL, "error: unknown tool 'search'; tools: echo"),
        (ToolCall("", "", malformed="<echo> opened, never closed"), MALFORMED_CALL, None),
        (ToolCall("echo", "   "), MALFORMED_CALL, "error: malformed tool call: echo needs an argument"),
        (
            ToolCall("echo", "boom"),
            ENVIRONMENT_ERROR,
            "error: tool 'echo' failed: RuntimeError: the tool broke",
        ),
        (ToolCall("echo", "blank"), EMPTY_RESULT, EMPTY_TEXT),
        (ToolCall("echo", "long"), RESULT_CUT, "x" * 20 + CUT_MARK),
    ]
    for call, kind, text in cases:
        obs = runner.run(call)
        assert obs.kind == kind
        if text is not None:
            assert obs.text == text
    assert runner.run(cases[2][0]).text == "error: malformed tool call: <echo> opened, never closed"
    assert dict(runner.counts) == {UNKNOWN_TOOL: 1, MALFORMED_CALL: 3, ENVIRONMENT_ERROR: 1, EMPTY_RESULT: 1,
                                    RESULT_CUT: 1}  # fmt: skip
    assert set(runner.counts) == set(ERROR_KINDS) and runner.calls == 8


def test_calculator_errors_are_observations_too():
    runner = EnvironmentRunner(build_environment({"type": "calculator"}), max_result_chars=50)
    assert runner.run(ToolCall("calc", "1/0")).text.startswith("error: tool 'calc' failed: ZeroDivisionError")
    assert runner.run(ToolCall("calc", "os.system('x')")).kind == ENVIRONMENT_ERROR
    assert runner.run(ToolCall("calc", "6*7")).text == "42"


def test_the_registry_builds_a_users_environment_and_names_unknown_ones():
    register_environment("flaky_test")(lambda options: Flaky())
    try:
        assert isinstance(build_environment({"type": "flaky_test"}), Flaky)
        with pytest.raises(ValueError, match="already registered"):
            register_environment("flaky_test")(lambda options: Flaky())
    finally:
        ENVIRONMENTS.pop("flaky_test")
    with pytest.raises(ConfigError, match="unknown environment 'nope'; known: calculator, search"):
        build_environment({"type": "nope"})
    register_environment("not_an_env")(lambda options: object())
    try:
        with pytest.raises(TypeError, match="not an Environment"):
            build_environment({"type": "not_an_env"})
    finally:
        ENVIRONMENTS.pop("not_an_env")
