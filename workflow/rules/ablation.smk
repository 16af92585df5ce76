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
        "../../envs/prefpipe.yaml"
    threads: res("ablation", "threads")
    resources:
        **placement("ablation"),
        mem_mb=lambda wildcards, attempt: res("ablation", "mem_mb") * attempt,
        runtime=lambda wildcards, attempt: res("ablation", "runtime") * attempt,
    params:
        src=SRC,
        cfg=lambda wildcards, threads: stage_config(SETTINGS.ablation, threads),
        provenance=lambda wildcards: stage_config(SETTINGS.ablation, None),
        eval=f"{RESULTS}/eval",
        out=lambda wildcards, output: os.path.dirname(output.summary),
    shell:
        "PYTHONPATH={params.src:q} OMP_NUM_THREADS={threads} python -m prefpipe.ablation"
        " --config {params.cfg:q} --eval {params.eval:q} --out {params.out:q} > {log:q} 2>&1"
