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
        "../envs/prefpipe.yaml"
    threads: res("eval_rewardbench", "threads")
    resources:
        **rule_resources("eval_rewardbench", gpu=True),
    params:
        **stage_params(lambda wildcards: SETTINGS.eval),
        launch=lambda wildcards, resources: single_process(
            "eval_rewardbench", resources.gpu
        ),
        data=lambda wildcards, input: os.path.dirname(input.pairs_test),
    shell:
        stage_shell(
            "eval_rewardbench",
            "--model {input.model:q} --data {params.data:q}",
            launch="{params.launch}",
        )
