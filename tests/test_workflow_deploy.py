"""The workflow deployed the way `snakedeploy deploy-workflow` deploys it (issue 32, item 1): a fresh folder
holding only a copied config/ and a workflow/Snakefile that uses this repository's workflow/Snakefile as a
`module:`. It dry-runs the default and runs the catalog's test config (.test/config/tiny.yaml) to the end,
with the package imported (this checkout's src on PYTHONPATH, as an installed prefpipe would be) and the
schemas read from the repository's workflow/schemas."""

from __future__ import annotations

import shutil
import time

from support.workflow import REPO, run_snakemake

DEPLOYED = """from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


module prefpipe:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from prefpipe
"""


def test_a_deployed_copy_dry_runs_and_runs_the_test_config_to_the_end(tmp_path):
    deploy = tmp_path / "deployed"
    (deploy / "workflow").mkdir(parents=True)
    (deploy / "workflow" / "Snakefile").write_text(
        DEPLOYED.format(snakefile=REPO / "workflow" / "Snakefile"), encoding="utf-8"
    )
    shutil.copytree(REPO / "config", deploy / "config")
    tiny = shutil.copy2(REPO / ".test" / "config" / "tiny.yaml", deploy / "config" / "tiny.yaml")

    dry = run_snakemake(deploy, "-n", "--cores", "1")
    assert dry.returncode == 0, dry.output[-4000:]
    assert "results/synthetic-default/report/report.html" in dry.output

    start = time.monotonic()
    run = run_snakemake(deploy, "--cores", "2", "--configfile", str(tiny), timeout=900)
    print(f"\ndeployed .test run: {time.monotonic() - start:.1f} s")
    assert run.returncode == 0, run.output[-6000:]
    results = deploy / "results" / "ci-tiny"
    for rel in ("report/report.html", "ablation/summary.json", "policy_eval/gpm/summary.json"):
        assert (results / rel).is_file(), rel
    assert not (REPO / "results" / "ci-tiny").exists()  # everything under the deployment's own folder
    again = run_snakemake(deploy, "-n", "--cores", "1", "--configfile", str(tiny))
    assert again.returncode == 0 and "Nothing to be done" in again.output, again.output[-3000:]
