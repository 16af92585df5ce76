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


# Not in `all`: ask for it (snakemake results/<experiment>/reward/<variant>/export). A BT model whose head reads only
# the last token's state becomes an AutoModelForSequenceClassification folder, every other model its backbone,
# head and reward_loader.py; the card reads the variant's evaluation summary.
rule export_reward_model:
    input:
        model=rules.train_reward_model.output.model,
        eval_summary=f"{RESULTS}/eval/{{variant}}/summary.json",
    output:
        directory(f"{RESULTS}/reward/{{variant}}/export"),
    log:
        f"{RESULTS}/reward/{{variant}}/export_reward_model.log",
    benchmark:
        f"{RESULTS}/benchmarks/export_reward_model_{{variant}}.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("export_reward_model", "threads")
    resources:
        **rule_resources("export_reward_model"),
    params:
        run=lambda wildcards, input: os.path.dirname(input.model),
    shell:
        "OMP_NUM_THREADS={threads} exec python -m prefpipe.export_reward"
        " {params.run:q} {output:q} --eval-summary {input.eval_summary:q} > {log:q} 2>&1"
