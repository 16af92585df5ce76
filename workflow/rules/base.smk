rule build_base:
    input:
        unpack(lambda wildcards: base_inputs()),
        pairs_train=rules.prep_data.output.pairs_train,
        rl_train=rules.prep_data.output.rl_train,
        rl_heldout=rules.prep_data.output.rl_heldout,
    output:
        model=directory(f"{RESULTS}/base/model"),
        summary=report(
            f"{RESULTS}/base/summary.json",
            category="2. Base model",
            caption="../report/base.rst",
        ),
    log:
        f"{RESULTS}/base/build_base.log",
    benchmark:
        f"{RESULTS}/benchmarks/build_base.tsv"
    priority: RL_PRIORITY if SETTINGS.grpo else 0
    conda:
        "../envs/prefpipe.yaml"
    threads: res("build_base", "threads")
    resources:
        **rule_resources("build_base", gpu=True),
    params:
        **stage_params(lambda wildcards: SETTINGS.base),
        launch=lambda wildcards, resources: single_process("build_base", resources.gpu),
        data=lambda wildcards, input: os.path.dirname(input.rl_heldout),
        pretrained=lambda wildcards, input: pretrained_flag(input),
    shell:
        stage_shell(
            "build_base",
            "--data {params.data:q} {params.pretrained}",
            launch="{params.launch}",
        )
