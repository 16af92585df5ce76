# prefpipe: preference data -> base model -> reward models -> RewardBench evaluation -> GRPO -> report.
# Run the embedded default with `bash scripts/run.sh` (see README); on a cluster: `snakemake --profile slurm`.
from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/config_files.smk"


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


rule all:
    default_target: True
    input:
        all_targets(),


include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/base.smk"
include: "workflow/rules/reward.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/ablation.smk"
include: "workflow/rules/grpo.smk"
include: "workflow/rules/report.smk"
