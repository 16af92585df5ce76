"""The multi-hop world beside another prompt set (grpo.<run>.prompts: multihop, the default's search runs): the
settings derive when prep_data builds it, prep_data writes its questions to data/multihop without touching the
main prompts, adds its demonstrations to the SFT ones and writes the name words the scratch tokenizer keeps whole;
the tokenizer keeps them whole where BPE alone splits them; the workflow feeds those runs the world's files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.settings import data_settings
from support.workflow import repo_copy

from prefpipe.base.build import corpus_texts, whole_words
from prefpipe.base.tokenizer import train_tokenizer
from prefpipe.common.io import read_json, read_jsonl
from prefpipe.data.prepare import prepare
from prefpipe.data.synthetic_multihop import NAME_WORDS, TAGS, WHOLE_TOKENS, multihop_world
from prefpipe.settings.pipeline import PipelineSettings, load_config

REPO = Path(__file__).resolve().parents[1]
SMALL_WORLD = {
    "synthetic": {"pairs_per_subset_train": 2, "pairs_per_subset_test": 1, "demonstrations": 40},
    "multihop": {"train": 12, "heldout": 6, "demonstrations": 10},
}


def test_the_default_builds_the_world_only_for_runs_that_train_on_it():
    default = PipelineSettings.from_config(load_config())
    assert default.data.multihop_alongside is True
    assert {r for r, s in default.grpo.items() if s.prompts == "multihop"} == {"search", "search_env_mask"}
    single_turn = PipelineSettings.from_config(load_config({"grpo": {"only": ["verifier", "gpm"]}}))
    assert single_turn.data.multihop_alongside is False
    # the world is already the main set: no second copy
    experiment = PipelineSettings.from_config(load_config(REPO / "config" / "experiments" / "multihop.yaml"))
    assert experiment.data.multihop_alongside is False


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """prep_data at toy sizes with and without a run on the world."""
    out = {}
    for name, grpo_only in (("with", ["verifier", "search"]), ("without", ["verifier"])):
        folder = tmp_path_factory.mktemp(name)
        settings = data_settings(SMALL_WORLD, grpo={"only": grpo_only})
        out[name] = (settings, folder, prepare(settings, folder))
    return out


def test_prep_data_writes_the_world_beside_the_main_prompts_and_leaves_them_alone(prepared):
    settings, folder, summary = prepared["with"]
    _, plain_folder, plain_summary = prepared["without"]
    world = settings.multihop
    train, held, demos = multihop_world(
        settings.seed,
        world.train,
        world.heldout,
        world.demonstrations,
        world.distractors,
        world.shortcut_rate,
    )
    assert read_jsonl(folder / "multihop" / "rl_prompts_train.jsonl") == train
    assert read_jsonl(folder / "multihop" / "rl_prompts_heldout.jsonl") == held
    for name in (
        "rl_prompts_train.jsonl",
        "rl_prompts_heldout.jsonl",
        "pairs_train.jsonl",
        "pairs_test.jsonl",
    ):
        assert (folder / name).read_bytes() == (plain_folder / name).read_bytes(), name
    # the world's episodes follow the built-in demonstrations, which are unchanged
    plain_demos = read_jsonl(plain_folder / "demonstrations.jsonl")
    assert read_jsonl(folder / "demonstrations.jsonl") == plain_demos + demos
    assert read_json(folder / "whole_words.json") == {"words": list(WHOLE_TOKENS)}
    assert not (plain_folder / "whole_words.json").exists() and not (plain_folder / "multihop").exists()
    assert summary["multihop_prompts"]["multihop"]["train"] == 12 and summary["multihop_prompts"]["folder"]
    assert summary["rl_prompts"] == plain_summary["rl_prompts"]


def test_the_scratch_tokenizer_keeps_the_name_words_whole_where_bpe_alone_splits_them(prepared):
    _, folder, _ = prepared["with"]
    texts = corpus_texts(folder)
    plain = train_tokenizer(texts, 300, 256)
    kept = train_tokenizer(texts, 300, 256, whole_words(folder))
    ids = lambda tok, text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert [w for w in NAME_WORDS if len(ids(plain, w)) > 1], "BPE alone keeps every name: nothing is tested"
    for word in NAME_WORDS:
        one = ids(kept, word)
        assert len(one) == 1, word
        # the same token before a space, punctuation and a tag, and after any of them
        for text in (f"{word} x", f"{word}.", f"<search>{word}</search>", f"by {word}?"):
            assert one[0] in ids(kept, text), text
            assert kept.decode(ids(kept, text)) == text
    for tag in TAGS:  # a tag is one token, even glued to a name
        assert len(ids(kept, tag)) == 1 and ids(kept, tag)[0] in ids(kept, f"Ada{tag}"), tag
    # the merges come from the rest of the corpus: the built-in demonstrations tokenise as without the world
    builtin = [r for r in read_jsonl(folder / "demonstrations.jsonl") if "turns" not in r]
    assert all(ids(kept, r["response"]) == ids(plain, r["response"]) for r in builtin if not _names(r))
    assert not any("<search>" in t for t in texts)  # the world's episodes are not in the merge corpus
    # a longer word holding a name word is not cut at it ("Adam" is not "Ada" + "m")
    assert ids(kept, "Ada")[0] not in ids(kept, "Adam") and ids(kept, "Shaw")[0] not in ids(kept, "Shawl")


def _names(row: dict) -> bool:
    """Whether a row's text holds a name word (where the world's tokens may differ from plain BPE's)."""
    text = f"{row['prompt']} {row['response']}"
    return any(word in text for word in WHOLE_TOKENS)


def test_the_workflow_feeds_the_search_runs_the_worlds_files(tmp_path):
    wf = repo_copy(tmp_path / "wf", link_src=True)
    overlay = tmp_path / "two_runs.yaml"
    overlay.write_text("grpo:\n  only: [verifier, search]\n")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "--configfile", str(overlay)]
    result = subprocess.run(cmd, cwd=wf, env=env, capture_output=True, text=True, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    shells = [
        line for line in out.splitlines() if "prefpipe.train_grpo" in line or "prefpipe.eval_policy" in line
    ]
    assert len(shells) == 4, shells
    for line in shells:
        folder = "data/multihop" if "/grpo/search/" in line or "/policy_eval/search/" in line else "data "
        assert f"--data results/synthetic-default/{folder}" in line, line
    assert "whole_words.json" in out
