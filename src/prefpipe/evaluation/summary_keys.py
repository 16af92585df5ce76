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

# --- ablation/summary.json (the report and the seed table read them)
ROWS, VARIANTS, MOST_IMPORTANT, VERDICTS = "rows", "variants", "most_important", "verdicts"
MATTERS, NEUTRAL, HURTS = "matters", "neutral", "hurts"
ITEM_TITLES = {OVERALL: "Four-section average", "chat": "Chat", "chat_hard": "Chat Hard"}
ITEM_TITLES |= {"safety": "Safety", "reasoning": "Reasoning"}
