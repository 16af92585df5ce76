wildcard_constraints:
    variant=name_pattern(reward_variants(), "NO_VARIANT"),


rule train_reward_model:
    input:
        unpack(lambda wildcards: model_input(*reward_backbone_ref(wildcards.variant))),
        pairs_train=rules.prep_data.output.pairs_train,
        pairs_test=rules.prep_data.output.pairs_test,
    output:
        model=directory(f"{RESULTS}/reward/{{variant}}/model"),
        metrics=f"{RESULTS}/reward/{{variant}}/metrics.jsonl",
        summary=report(
            f"{RESULTS}/reward/{{variant}}/summary.json",
            category="3. Reward models",
            subcategory="{variant}",
            caption="../report/reward.rst",
        ),
    log:
        f"{RESULTS}/reward/{{variant}}/train_reward_model.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_reward_model_{{variant}}.tsv"
    priority: lambda wildcards: rl_priority(wildcards.variant)
    conda:
        "../envs/prefpipe.yaml"
    threads: res("train_reward_model", "threads")
    resources:
        **rule_resources("train_reward_model", gpu=True),
        # accelerate launch runs every process on this node: one node, whatever the GPU count (--nodes=1).
        nodes=1,
    params:
        **stage_params(lambda wildcards: SETTINGS.reward[wildcards.variant]),
        data=lambda wildcards, input: os.path.dirname(input.pairs_train),
        launch=lambda wildcards, resources: launcher(
            resources.gpu, SETTINGS.accelerate_config
        ),
        backbone=lambda wildcards, input: model_path(
            *reward_backbone_ref(wildcards.variant), input
        ),
    shell:
        stage_shell(
            "train_reward",
            "--data {params.data:q} --base {params.backbone:q}",
            launch="{params.launch}",
        )
