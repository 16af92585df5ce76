rule prep_data:
    input:
        prompt_files(),
    output:
        **prep_data_outputs(),
        summary=report(
            f"{RESULTS}/data/summary.json",
            category="1. Data",
            caption="../report/data.rst",
        ),
    log:
        f"{RESULTS}/data/prep_data.log",
    benchmark:
        f"{RESULTS}/benchmarks/prep_data.tsv"
    conda:
        "../../envs/prefpipe.yaml"
    threads: res("prep_data", "threads")
    resources:
        **placement("prep_data"),
        mem_mb=lambda wildcards, attempt: res("prep_data", "mem_mb") * attempt,
        runtime=lambda wildcards, attempt: res("prep_data", "runtime") * attempt,
    params:
        src=SRC,
        cfg=lambda wildcards, threads: stage_config(SETTINGS.data, threads),
        provenance=lambda wildcards: stage_config(SETTINGS.data, None),
        out=lambda wildcards, output: os.path.dirname(output.summary),
    shell:
        "PYTHONPATH={params.src:q} OMP_NUM_THREADS={threads} exec python -m prefpipe.prep_data"
        " --config {params.cfg:q} --out {params.out:q} > {log:q} 2>&1"
