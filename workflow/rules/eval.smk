rule eval_rewardbench:
    input:
        model=rules.train_reward_model.output.model,
        pairs_test=rules.prep_data.output.pairs_test,
        benchmarks=lambda wildcards: benchmark_files(),
    output:
        per_example=f"{RESULTS}/eval/{{variant}}/per_example.parquet",
        summary=report(
            f"{RESULTS}/eval/{{variant}}/summary.json",
            category="4. RewardBench evaluation",
            subcategory="{variant}",
            caption="../report/eval.rst",
        ),
    log:
        f"{RESULTS}/eval/{{variant}}/eval_rewardbench.log",
    benchmark:
        f"{RESULTS}/benchmarks/eval_rewardbench_{{variant}}.tsv"
    conda:
        "../../envs/prefpipe.yaml"
    threads: res("eval_rewardbench", "threads")
    resources:
        **placement("eval_rewardbench"),
        mem_mb=lambda wildcards, attempt: res("eval_rewardbench", "mem_mb") * attempt,
        runtime=lambda wildcards, attempt: res("eval_rewardbench", "runtime") * attempt,
        gpu=res("eval_rewardbench", "gpu"),
    params:
        src=SRC,
        launch=lambda wildcards, resources: single_process(
            "eval_rewardbench", resources.gpu
        ),
        cfg=lambda wildcards, threads: stage_config(SETTINGS.eval, threads),
        provenance=lambda wildcards: stage_config(SETTINGS.eval, None),
        data=lambda wildcards, input: os.path.dirname(input.pairs_test),
        out=lambda wildcards, output: os.path.dirname(output.summary),
    shell:
        "PYTHONPATH={params.src:q} OMP_NUM_THREADS={threads} exec {params.launch} prefpipe.eval_rewardbench"
        " --config {params.cfg:q} --model {input.model:q} --data {params.data:q} --out {params.out:q}"
        " > {log:q} 2>&1"
