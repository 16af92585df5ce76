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
        "../../envs/prefpipe.yaml"
    threads: res("train_reward_model", "threads")
    resources:
        **placement("train_reward_model"),
        mem_mb=lambda wildcards, attempt: res("train_reward_model", "mem_mb") * attempt,
        runtime=lambda wildcards, attempt: res("train_reward_model", "runtime")
        * attempt,
        gpu=res("train_reward_model", "gpu"),
        # accelerate launch runs every process on this node: one node, whatever the GPU count (--nodes=1).
        nodes=1,
    params:
        src=SRC,
        cfg=lambda wildcards, threads: stage_config(
            SETTINGS.reward[wildcards.variant], threads
        ),
        provenance=lambda wildcards: stage_config(
            SETTINGS.reward[wildcards.variant], None
        ),
        data=lambda wildcards, input: os.path.dirname(input.pairs_train),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        launch=lambda wildcards, resources: launcher(
            resources.gpu, SETTINGS.accelerate_config
        ),
        backbone=lambda wildcards, input: model_path(
            *reward_backbone_ref(wildcards.variant), input
        ),
    shell:
        "PYTHONPATH={params.src:q} OMP_NUM_THREADS={threads} exec {params.launch} prefpipe.train_reward"
        " --config {params.cfg:q} --data {params.data:q} --base {params.backbone:q} --out {params.out:q}"
        " > {log:q} 2>&1"


# Not in `all`: ask for it (snakemake results/.../reward/<variant>/export). A BT model whose head reads only
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
        "../../envs/prefpipe.yaml"
    threads: 1
    params:
        src=SRC,
        run=lambda wildcards, input: os.path.dirname(input.model),
    shell:
        "PYTHONPATH={params.src:q} OMP_NUM_THREADS={threads} exec python -m prefpipe.export_reward"
        " {params.run:q} {output:q} --eval-summary {input.eval_summary:q} > {log:q} 2>&1"
