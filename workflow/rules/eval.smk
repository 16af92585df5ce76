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


wildcard_constraints:
    ensemble=name_pattern(ensembles(), "NO_ENSEMBLE"),


rule eval_ensemble:
    input:
        summaries=lambda wildcards: ensemble_inputs(wildcards.ensemble, "summary.json"),
        per_example=lambda wildcards: ensemble_inputs(
            wildcards.ensemble, "per_example.parquet"
        ),
    output:
        summary=report(
            f"{RESULTS}/eval_ensemble/{{ensemble}}/summary.json",
            category="4. RewardBench evaluation",
            subcategory="deep ensembles",
            caption="../report/eval_ensemble.rst",
        ),
    log:
        f"{RESULTS}/eval_ensemble/{{ensemble}}/eval_ensemble.log",
    benchmark:
        f"{RESULTS}/benchmarks/eval_ensemble_{{ensemble}}.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("eval_ensemble", "threads")
    resources:
        **rule_resources("eval_ensemble"),
    params:
        **stage_params(lambda wildcards: SETTINGS.eval),
        # results/eval, the folder above the members' folders
        eval=lambda wildcards, input: os.path.dirname(
            os.path.dirname(input.summaries[0])
        ),
    shell:
        stage_shell("eval_ensemble", "--eval {params.eval:q}")
