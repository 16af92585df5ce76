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
        "../../envs/prefpipe.yaml"
    threads: res("build_base", "threads")
    resources:
        **placement("build_base"),
        mem_mb=lambda wildcards, attempt: res("build_base", "mem_mb") * attempt,
        runtime=lambda wildcards, attempt: res("build_base", "runtime") * attempt,
        gpu=res("build_base", "gpu"),
    params:
        src=SRC,
        launch=lambda wildcards, resources: single_process("build_base", resources.gpu),
        cfg=lambda wildcards, threads: stage_config(SETTINGS.base, threads),
        provenance=lambda wildcards: stage_config(SETTINGS.base, None),
        data=lambda wildcards, input: os.path.dirname(input.rl_heldout),
        pretrained=lambda wildcards, input: pretrained_flag(input),
        out=lambda wildcards, output: os.path.dirname(output.summary),
    shell:
        "PYTHONPATH={params.src:q} OMP_NUM_THREADS={threads} exec {params.launch} prefpipe.build_base"
        " --config {params.cfg:q} --data {params.data:q} {params.pretrained} --out {params.out:q} > {log:q} 2>&1"
