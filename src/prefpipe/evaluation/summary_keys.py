"""Keys of the files the evaluation and ablation stages write, in a module without torch so the CPU-only
report (and the ablation stage, which only reads files) can name them without loading the scorers.
"""

from __future__ import annotations

from prefpipe.evaluation.accuracy_summary import OVERALL

# --- eval/<variant>/summary.json: the top level, then each benchmark block
PRIMARY_BENCHMARK, BENCHMARKS = "primary_benchmark", "benchmarks"
N_PAIRS, HEAD_TYPE, CALIBRATION = "n_pairs", "head_type", "calibration"
# {max_length, pairs, pairs_share, sequences: {prompt|response: n}, by_subset: {subset: pairs}} or null
TRUNCATION_KEY = "truncation"
# In a benchmark block's `data` (its load report): {train_pairs, benchmark_rows, train_pairs_exact,
# train_pairs_normalised, benchmark_rows_exact, benchmark_rows_normalised} (prefpipe.data.normalize).
PROMPT_OVERLAP = "prompt_overlap"
# The model's extra heads (e.g. "as_finetuned", the head before the refit): name -> their scores and ECE; their
# per-example decisions and scores are the columns correct_<name> and score_<name>.
EXTRA_HEADS, AS_FINETUNED = "extra_heads", "as_finetuned"
# Each benchmark's uncertainty block (prefpipe.evaluation.uncertainty_block) and eval_ensemble/<name>/summary.json:
# {auroc: {target: {candidate: {value, low, high, positives, negatives}} | {skipped: why}},
#  aurc_vs_margin: {candidate: {uncertainty, margin, difference: {value, low, high}}}, n, accuracy, ...}.
UNCERTAINTY, AUROC, AURC_VS_MARGIN = "uncertainty", "auroc", "aurc_vs_margin"
ERRORS, DISAGREEMENT, UNFAMILIAR = "errors", "disagreement", "unfamiliar"
# Disagreement among familiar pairs only (unfamiliar ones left out, so novelty does not count against a measure of
# label noise); recorded where the pairs record both flip_rate and unfamiliar.
DISAGREEMENT_FAMILIAR = "disagreement_familiar"
# Candidates: -|m| (the point margin, every head's reference), the posterior's predictive entropy (total) and its
# two parts, the expected entropy (aleatoric: for disagreement) and the mutual information (epistemic: for unfamiliar
# pairs), of Bayesian heads and deep ensembles, and a deep ensemble's members' sd.
MARGIN, PREDICTIVE_ENTROPY, MUTUAL_INFORMATION = "neg_abs_margin", "predictive_entropy", "mutual_information"
EXPECTED_ENTROPY = "expected_entropy"
MEMBER_SD = "score_sd"
# The per-pair fields of the uncertainty world (prefpipe.data.synthetic_noise) that the targets read; the
# benchmark loader keeps them and the per-example table gets them as columns where every pair records them.
PAIR_FIELDS = ("flip_rate", "unfamiliar")

# --- ablation/summary.json (the report and the seed table read them)
ROWS, VARIANTS, MOST_IMPORTANT, VERDICTS = "rows", "variants", "most_important", "verdicts"
MATTERS, NEUTRAL, HURTS = "matters", "neutral", "hurts"
ITEM_TITLES = {OVERALL: "Four-section average", "chat": "Chat", "chat_hard": "Chat Hard"}
ITEM_TITLES |= {"safety": "Safety", "reasoning": "Reasoning"}
