"""How scripts/test.sh spreads the suite over two pytest-xdist workers (`-n 2 --dist loadfile`): whole files.

A file stays on one worker, so its module-scoped fixtures (a tiny workflow run, a trained model) are built once,
as in a serial run. The files that bring up the local SLURM cluster (one per machine: it links
/etc/slurm/slurm.conf) form one unit, so the two clusters never overlap. The costliest units are handed out first
(longest first: the other worker meanwhile takes the many short files), from the slowest tests a full CI run
listed (`--durations=40`); a file missing from COSTLY only loses that head start, and nothing else depends on it.
"""

from __future__ import annotations

from collections import OrderedDict

# Files that share a machine-wide resource run as one unit, in this order, on one worker.
SHARED_UNITS = {
    "tests/test_slurm_cluster.py": "local SLURM cluster",
    "tests/faults/test_slurm_faults.py": "local SLURM cluster",
}
# Units by measured cost, costliest first (CI log, 2 cores: seconds of set-up and calls per file).
COSTLY = (
    "tests/test_grpo_default_base.py",  # 155 s: builds the default base on a fresh clone
    "local SLURM cluster",  # 140 s
    "tests/test_benchmarks_smoke.py",  # 115 s
    "tests/test_report_workflow.py",  # 90 s: the tiny_full workflow run
    "tests/test_reward_deepspeed.py",  # 80 s
    "tests/test_eval_workflow.py",  # 78 s
    "tests/test_workflow_deploy.py",  # 77 s
    "tests/test_stage_resume.py",  # 62 s
    "tests/test_cli.py",  # 36 s
    "tests/test_grpo_data_parallel.py",  # 34 s
    "tests/test_multihop_workflow.py",  # 34 s
    "tests/faults/test_interrupts.py",  # 30 s
    "tests/test_workflow_reruns.py",  # 28 s
    "tests/test_slurm_profiles.py",  # 26 s
    "tests/faults/test_checkpoints.py",  # 25 s
    "tests/faults/test_export_equals_eval.py",  # 23 s
    # and the long tails of a two-worker run at load 5-10 (seconds there, about 3x the idle figure)
    "tests/test_determinism.py",  # 124 s
    "tests/test_transformers_api.py",  # 160 s
    "tests/test_workflow_results_owner.py",  # 150 s
    "tests/test_run_script.py",  # 80 s
    "tests/test_active_workflow.py",  # 80 s
    "tests/test_seeds.py",  # 69 s
    "tests/test_ci_tiers.py",  # 120 s: pytest sessions of its own, two on two workers
)


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its file, or the shared unit its file belongs to."""
    path = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(path, path)


def costliest_first(workqueue: OrderedDict) -> OrderedDict:
    """The units of `workqueue` with COSTLY's first, in its order; the rest after, most tests first."""
    rank = {unit: i for i, unit in enumerate(COSTLY)}
    ordered = sorted(workqueue.items(), key=lambda kv: (rank.get(kv[0], len(rank)), -len(kv[1])))
    return OrderedDict(ordered)


def make_scheduler(config, log):
    """A loadfile scheduler with SHARED_UNITS and COSTLY; None (xdist's own) for any other --dist."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileUnits(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the first assignment: the queue is complete
                self.workqueue, self.ordered = costliest_first(self.workqueue), True
            super()._assign_work_unit(node)

    return FileUnits(config, log)
