rule ablation:
    input:
        summaries=lambda wildcards: ablation_inputs("summary.json"),
        per_example=lambda wildcards: ablation_inputs("per_example.parquet"),
    output:
        summary=report(
            f"{RESULTS}/ablation/summary.json",
            category="4. RewardBench evaluation",
            subcategory="Bayesian GPM ablation",
            caption="../report/ablation.rst",
        ),
        markdown=f"{RESULTS}/ablation/summary.md",
    log:
        f"{RESULTS}/ablation/ablation.log",
    benchmark:
        f"{RESULTS}/benchmarks/ablation.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("ablation", "threads")
    resources:
        **rule_resources("ablation"),
    params:
        **stage_params(lambda wildcards: SETTINGS.ablation),
        eval=f"{RESULTS}/eval",
    shell:
        stage_shell("ablation", "--eval {params.eval:q}")
