wildcard_constraints:
    run=name_pattern(grpo_runs(), "NO_RUN"),


rule train_grpo:
    input:
        unpack(lambda wildcards: grpo_reward_input(wildcards.run)),
        unpack(lambda wildcards: run_prompts(wildcards.run)),
        policy=rules.build_base.output.model,
    output:
        policy=directory(f"{RESULTS}/grpo/{{run}}/policy"),
        metrics=f"{RESULTS}/grpo/{{run}}/metrics.jsonl",
        curve=f"{RESULTS}/grpo/{{run}}/curve.jsonl",
        samples=report(
            f"{RESULTS}/grpo/{{run}}/samples.jsonl",
            category="5. GRPO",
            subcategory="{run}",
            caption="../report/grpo_samples.rst",
        ),
        summary=report(
            f"{RESULTS}/grpo/{{run}}/summary.json",
            category="5. GRPO",
            subcategory="{run}",
            caption="../report/grpo.rst",
        ),
    log:
        f"{RESULTS}/grpo/{{run}}/train_grpo.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_grpo_{{run}}.tsv"
    priority: RL_PRIORITY
    conda:
        "../envs/prefpipe.yaml"
    threads: res("train_grpo", "threads")
    resources:
        **rule_resources("train_grpo", gpu=True),
        # data parallel over the GPUs of one node (accelerate launch, one process per GPU): --nodes=1.
        nodes=1,
    params:
        **stage_params(lambda wildcards: SETTINGS.grpo[wildcards.run]),
        launch=lambda wildcards, resources: launcher(resources.gpu),
        data=lambda wildcards, input: os.path.dirname(input.rl_train),
        reward_flag=lambda wildcards, input: reward_model_flag(input),
    shell:
        stage_shell(
            "train_grpo",
            "--data {params.data:q} --policy {input.policy:q} {params.reward_flag}",
            launch="{params.launch}",
        )


rule eval_policy:
    input:
        unpack(lambda wildcards: grpo_reward_input(wildcards.run)),
        unpack(lambda wildcards: run_prompts(wildcards.run)),
        base=rules.build_base.output.model,
        policy=rules.train_grpo.output.policy,
    output:
        summary=report(
            f"{RESULTS}/policy_eval/{{run}}/summary.json",
            category="5. GRPO",
            subcategory="{run}",
            caption="../report/policy_eval.rst",
        ),
        per_example=f"{RESULTS}/policy_eval/{{run}}/per_example.jsonl",
    log:
        f"{RESULTS}/policy_eval/{{run}}/eval_policy.log",
    benchmark:
        f"{RESULTS}/benchmarks/eval_policy_{{run}}.tsv"
    priority: RL_PRIORITY
    conda:
        "../envs/prefpipe.yaml"
    threads: res("eval_policy", "threads")
    resources:
        **rule_resources("eval_policy", gpu=True),
    params:
        **stage_params(lambda wildcards: SETTINGS.grpo[wildcards.run]),
        launch=lambda wildcards, resources: single_process("eval_policy", resources.gpu),
        data=lambda wildcards, input: os.path.dirname(input.rl_heldout),
        reward_flag=lambda wildcards, input: reward_model_flag(input),
    shell:
        stage_shell(
            "eval_policy",
            "--data {params.data:q} --base {input.base:q} --policy {input.policy:q}"
            " {params.reward_flag}",
            launch="{params.launch}",
        )


rule grpo_hypotheses:
    input:
        per_example=expand(rules.eval_policy.output.per_example, run=hypothesis_runs()),
        policy_eval=expand(rules.eval_policy.output.summary, run=hypothesis_runs()),
        metrics=expand(rules.train_grpo.output.metrics, run=hypothesis_runs()),
    output:
        summary=f"{RESULTS}/grpo_hypotheses/summary.json",
        markdown=f"{RESULTS}/grpo_hypotheses/summary.md",
    log:
        f"{RESULTS}/grpo_hypotheses/grpo_hypotheses.log",
    benchmark:
        f"{RESULTS}/benchmarks/grpo_hypotheses.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("grpo_hypotheses", "threads")
    resources:
        **rule_resources("grpo_hypotheses"),
    params:
        **stage_params(lambda wildcards: SETTINGS.hypotheses),
        results=lambda wildcards, output: os.path.dirname(
            os.path.dirname(output.summary)
        ),
    shell:
        stage_shell("grpo_hypotheses", "--results {params.results:q}")
