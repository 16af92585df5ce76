"""The report's uncertainty section and its first-screen answer (issue 33) on the fixture tree with made-up
uncertainty blocks in the eval summaries and one deep-ensemble summary: the numbers shown are the recorded ones,
the verdicts follow the intervals, and a tree without blocks gets neither section nor answer."""

from __future__ import annotations

from support.results_tree import manifest, report_markdown, write_results_tree
from support.uncertainty_tree import add_blocks

from prefpipe.report.inputs import Manifest

BGPM = {
    "neg_abs_margin": {"errors": (0.76, 0.74, 0.79)},
    "predictive_entropy": {"errors": (0.784, 0.76, 0.81), "disagreement": (0.489, 0.45, 0.52),
                           "unfamiliar": (0.732, 0.70, 0.77)},
    "expected_entropy": {"errors": (0.61, 0.58, 0.64), "disagreement": (0.52, 0.49, 0.55),
                         "disagreement_familiar": (0.66, 0.62, 0.70)},
    "mutual_information": {"errors": (0.763, 0.73, 0.79), "disagreement": (0.449, 0.41, 0.48),
                           "unfamiliar": (0.821, 0.79, 0.86)},
}  # fmt: skip
GPM = {"neg_abs_margin": {"errors": (0.703, 0.67, 0.74), "disagreement": (0.64, 0.61, 0.68)}}
ENSEMBLE = {
    "score_sd": {"errors": (0.65, 0.6, 0.7), "unfamiliar": (0.9, 0.85, 0.95)},
    "mutual_information": {"errors": (0.7, 0.66, 0.74)},
}


def _add_blocks(root):
    add_blocks(root, {"bgpm": BGPM, "gpm": GPM}, {"gpm-ensemble": ENSEMBLE})


def test_uncertainty_answer_and_table_show_the_recorded_numbers(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=3, grpo_steps=3)
    plain = report_markdown(root, tmp_path / "plain")
    assert "## Uncertainty" not in plain and "uncertainty informative" not in plain

    _add_blocks(root)
    files = manifest()
    files.files["eval_ensemble"] = {"gpm-ensemble": "eval_ensemble/gpm-ensemble/summary.json"}
    # `prefpipe report` on a folder whose report never ran lists the ensembles it finds
    assert Manifest.listed(root).files["eval_ensemble"] == files.files["eval_ensemble"]
    md = report_markdown(root, tmp_path / "out", files)
    answers = md.split("## Uncertainty", 1)[0]
    assert (
        "- Is the Bayesian GPM's uncertainty informative? bgpm's predictive entropy, AUROC: for its errors "
        "informative (0.78; gpm's |margin| 0.70); for high-disagreement pairs not distinguishable from chance "
        "(0.49; gpm's |margin| 0.64); for unfamiliar pairs informative (0.73). ([details](#uncertainty-table))"
        in answers
    )
    assert "- The uncertainty in detail: on synthetic, bgpm's AUROC [95%] for its errors: " in answers
    assert (
        "predictive entropy 0.784 [0.760, 0.810] (informative), expected entropy 0.610 [0.580, 0.640], "
        "mutual information 0.763 [0.730, 0.790]" in answers
    )
    assert (
        "gpm's |margin| 0.703 [0.670, 0.740]; ensemble gpm-ensemble's members' sd 0.650 [0.600, 0.700], "
        "mutual information 0.700 [0.660, 0.740]; for" in answers
    )
    assert "members' sd 0.900 [0.850, 0.950]." in answers  # no ensemble MI recorded for unfamiliar pairs
    assert (
        "high-disagreement pairs: predictive entropy 0.489 [0.450, 0.520] (not distinguishable from chance)"
        in answers
    )
    assert "expected entropy 0.520 [0.490, 0.550], mutual information 0.449 [0.410, 0.480]" in answers
    assert (
        "high-disagreement pairs among familiar ones:" not in answers
    )  # no predictive entropy recorded there
    assert "unfamiliar pairs: predictive entropy 0.732 [0.700, 0.770] (informative)" in answers
    assert "an AURC no different than abstaining on its own |margin| (+0.0010 [-0.0004, +0.0031])" in answers
    table = md.split("## Uncertainty", 1)[1]
    assert (
        "| bgpm | predictive entropy | 0.784 [0.760, 0.810] | 0.489 [0.450, 0.520] | – | 0.732 [0.700, 0.770] |"
        in table
    )
    assert (
        "| bgpm | expected entropy | 0.610 [0.580, 0.640] | 0.520 [0.490, 0.550] | 0.660 [0.620, 0.700] | – |"
        in table
    )
    assert "AUROC: high-disagreement pairs among familiar ones [95%]" in table
    assert "expected entropy (aleatoric: for disagreement)" in table
    assert (
        "| gpm | -\\|margin\\| (point estimate) | 0.703 [0.670, 0.740] | 0.640 [0.610, 0.680] | – | – |"
        in table
    )
    assert (
        "| ensemble gpm-ensemble | members' score sd | 0.650 [0.600, 0.700] | – | – | 0.900 [0.850, 0.950] |"
        in table
    )
