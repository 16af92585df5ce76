"""No `prefpipe` command deletes or overwrites what it did not write (issue 50, item 1; prefpipe.common.results.outputs).

Each command (report, export, inspect) is pointed at its input, at a stage folder, at its own results tree, at
another experiment's results tree and at an unrelated non-empty folder: it exits 2 with one message naming the
folder, and the sha256 of every file under the scratch folder is unchanged. Then the allowed cases: a new folder
(written, with the marker), the same command again (replaced), and another command or other inputs (refused).
"""

from __future__ import annotations

import json

import pytest
from support.faults import changed, command_scratch, tree_hashes

from prefpipe.cli import main as prefpipe
from prefpipe.common.results.outputs import MARKER


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return command_scratch(tmp_path_factory.mktemp("scratch"))


def _argv(root, command):
    """The command's arguments up to its output folder (which comes last) and its input folder."""
    results = root / "results"
    return {
        "report": (["report", str(results), "--out"], results),
        "export": (["export", str(results / "reward" / "bt")], results / "reward" / "bt"),
        "inspect": (
            ["inspect", str(results / "grpo" / "gpm-verifier"), "--step", "0", "--out"],
            results / "grpo" / "gpm-verifier",
        ),
    }[command]


def _targets(root):
    """target name -> (output folder, the path the message must name)."""
    results = root / "results"
    return {
        "stage_folder": (results / "eval" / "bt", results / "eval" / "bt"),
        "stage_subfolder": (results / "eval" / "bt" / "new", results / "eval" / "bt"),
        "stage_top": (results / "eval", results / "eval"),
        "own_results_tree": (results, results),
        "other_results_tree": (root / "other", root / "other"),
        "unrelated_nonempty": (root / "notes", root / "notes"),
    }


@pytest.mark.parametrize("command", ["report", "export", "inspect"])
@pytest.mark.parametrize(
    "target",
    [
        "input",
        "stage_folder",
        "stage_subfolder",
        "stage_top",
        "own_results_tree",
        "other_results_tree",
        "unrelated_nonempty",
    ],
)
def test_refused_output_changes_no_file(scratch, capfd, command, target):
    argv, source = _argv(scratch, command)
    out, named = (source, source) if target == "input" else _targets(scratch)[target]
    before = tree_hashes(scratch)
    assert before  # the check below compares real files
    code = prefpipe([*argv, str(out)])
    err = capfd.readouterr().err
    assert code == 2
    assert str(named) in err, err
    assert changed(before, tree_hashes(scratch)) == set()


def test_new_output_is_written_with_its_marker_and_only_its_own_is_replaced(scratch, tmp_path, capfd):
    results, out = scratch / "results", tmp_path / "report"
    assert prefpipe(["report", str(results), "--out", str(out)]) == 0
    marker = json.loads((out / MARKER).read_text())
    assert marker["command"] == "report" and marker["inputs"] == [str(results.resolve())]
    assert "report.html" in marker["files"] and "figures" not in marker["files"]
    assert prefpipe(["report", str(results), "--out", str(out)]) == 0  # its own output: replaced
    capfd.readouterr()
    before = tree_hashes(tmp_path)
    code = prefpipe(["export", str(results / "reward" / "bt"), str(out)])  # another command's output
    assert code == 2 and "holds the output of `prefpipe report`" in capfd.readouterr().err
    (out / "mine.txt").write_text("added by hand\n")
    before = tree_hashes(tmp_path)
    assert prefpipe(["report", str(results), "--out", str(out)]) == 2  # a file the command did not write
    assert f"{out}: holds files added after `prefpipe report` wrote it (mine.txt)" in capfd.readouterr().err
    assert changed(before, tree_hashes(tmp_path)) == set()


def test_empty_existing_folder_is_used(scratch, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert prefpipe(["export", str(scratch / "results" / "reward" / "bt"), str(out)]) == 0
    assert (out / "export.json").is_file() and (out / MARKER).is_file()
