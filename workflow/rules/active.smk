# Active learning (docs/findings/ACTIVE_LEARNING.md; config `active_learning`, layout prefpipe.active.layout): per strategy and
# seed, rounds of train -> score the pool -> add the most uncertain pairs -> retrain, then the curves.
wildcard_constraints:
    arm=name_pattern(
        [al_layout.INITIAL, *(AL.strategies if AL is not None else [])], "NO_ARM"
    ),
    seed=r"\d+",
    round=r"\d+",


rule al_initial:
    input:
        pairs_train=rules.prep_data.output.pairs_train,
        pairs_test=rules.prep_data.output.pairs_test,
    output:
        train=f"{AL_ROOT}/{al_layout.INITIAL}/seed{{seed}}/round0/data/pairs_train.jsonl",
        test=f"{AL_ROOT}/{al_layout.INITIAL}/seed{{seed}}/round0/data/pairs_test.jsonl",
        selection=f"{AL_ROOT}/{al_layout.INITIAL}/seed{{seed}}/round0/data/selection.json",
    log:
        f"{AL_ROOT}/{al_layout.INITIAL}/seed{{seed}}/round0/data/active_label.log",
    benchmark:
        f"{RESULTS}/benchmarks/al_initial_seed{{seed}}.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("al_initial", "threads")
    resources:
        **rule_resources("al_initial"),
    params:
        **al_params("selection", "initial_labels"),
        data=lambda wildcards, input: os.path.dirname(input.pairs_train),
    shell:
        stage_shell(
            "active_label",
            f"--data {{params.data:q}} --strategy {al_layout.INITIAL} --al-seed {{wildcards.seed}} --round 0",
        )


rule al_select:
    input:
        unpack(al_previous),
        pairs_train=rules.prep_data.output.pairs_train,
    output:
        train=f"{AL_ROUND}/data/pairs_train.jsonl",
        test=f"{AL_ROUND}/data/pairs_test.jsonl",
        selection=f"{AL_ROUND}/data/selection.json",
    log:
        f"{AL_ROUND}/data/active_label.log",
    benchmark:
        f"{RESULTS}/benchmarks/al_select_{{arm}}_seed{{seed}}_round{{round}}.tsv"
    wildcard_constraints:
        arm=name_pattern(AL.strategies if AL is not None else [], "NO_STRATEGY"),
        round=r"[1-9]\d*",
    conda:
        "../envs/prefpipe.yaml"
    threads: res("al_select", "threads")
    resources:
        **rule_resources("al_select"),
    params:
        **al_params("selection", "labels_per_round", "learner", "members"),
        data=lambda wildcards, input: os.path.dirname(input.pairs_train),
        previous=lambda wildcards, input: os.path.dirname(
            os.path.dirname(input.previous)
        ),
    shell:
        stage_shell(
            "active_label",
            "--data {params.data:q} --strategy {wildcards.arm} --al-seed {wildcards.seed}"
            " --round {wildcards.round} --previous {params.previous:q}",
        )


rule al_train:
    input:
        unpack(lambda wildcards: model_input(*reward_backbone_ref(wildcards.variant))),
        pairs_train=f"{AL_ROUND}/data/pairs_train.jsonl",
        pairs_test=f"{AL_ROUND}/data/pairs_test.jsonl",
        pairs_full=rules.prep_data.output.pairs_train,
    output:
        model=directory(f"{AL_ROUND}/reward/{{variant}}/model"),
        metrics=f"{AL_ROUND}/reward/{{variant}}/metrics.jsonl",
        summary=f"{AL_ROUND}/reward/{{variant}}/summary.json",
    log:
        f"{AL_ROUND}/reward/{{variant}}/train_reward_model.log",
    benchmark:
        f"{RESULTS}/benchmarks/al_train_{{arm}}_seed{{seed}}_round{{round}}_{{variant}}.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("al_train", "threads")
    resources:
        **rule_resources("al_train", gpu=True),
    params:
        **stage_params(
            lambda wildcards: al_reward_settings(wildcards.variant, wildcards.seed)
        ),
        data=lambda wildcards, input: os.path.dirname(input.pairs_train),
        launch=lambda wildcards, resources: single_process("al_train", resources.gpu),
        backbone=lambda wildcards, input: model_path(
            *reward_backbone_ref(wildcards.variant), input
        ),
        kl_weight=lambda wildcards: al_kl_weight(wildcards.variant),
        kl_reference=lambda wildcards, input: al_kl_reference(
            wildcards.variant, input.pairs_full
        ),
    shell:
        stage_shell(
            "active_train",
            "--data {params.data:q} --base {params.backbone:q} {params.kl_reference}",
            launch="{params.launch}",
        )


rule al_score:
    input:
        model=f"{AL_ROUND}/reward/{{variant}}/model",
        selection=f"{AL_ROUND}/data/selection.json",
        pairs_train=rules.prep_data.output.pairs_train,
        pairs_test=rules.prep_data.output.pairs_test,
    output:
        scores=f"{AL_ROUND}/scores/{{variant}}/scores.parquet",
    log:
        f"{AL_ROUND}/scores/{{variant}}/active_score.log",
    benchmark:
        f"{RESULTS}/benchmarks/al_score_{{arm}}_seed{{seed}}_round{{round}}_{{variant}}.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("al_score", "threads")
    resources:
        **rule_resources("al_score", gpu=True),
    params:
        **al_params("scores"),
        data=lambda wildcards, input: os.path.dirname(input.pairs_train),
        labelled=lambda wildcards, input: os.path.dirname(input.selection),
        pool=lambda wildcards: int(
            wildcards.variant
            in al_layout.pool_readers(AL, wildcards.arm, int(wildcards.round))
        ),
    shell:
        stage_shell(
            "active_score",
            "--model {input.model:q} --data {params.data:q} --labelled {params.labelled:q}"
            " --pool {params.pool}",
        )


rule al_curve:
    input:
        al_curve_inputs(),
        pairs_train=rules.prep_data.output.pairs_train,
    output:
        summary=report(
            f"{AL_ROOT}/summary.json",
            category="4. RewardBench evaluation",
            subcategory="active learning",
            caption="../report/active_learning.rst",
        ),
    log:
        f"{AL_ROOT}/active_curve.log",
    benchmark:
        f"{RESULTS}/benchmarks/al_curve.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("al_curve", "threads")
    resources:
        **rule_resources("al_curve"),
    params:
        **stage_params(lambda wildcards: AL),
        root=lambda wildcards, output: os.path.dirname(output.summary),
        data=lambda wildcards, input: os.path.dirname(input.pairs_train),
    shell:
        stage_shell("active_curve", "--root {params.root:q} --data {params.data:q}")
