wildcard_constraints:
    model=name_pattern(imported_models(), "NO_MODEL"),


rule import_model:
    input:
        gguf=lambda wildcards: gguf_input(wildcards.model),
    output:
        model=directory(f"{RESULTS}/models/{{model}}/model"),
        summary=f"{RESULTS}/models/{{model}}/summary.json",
    log:
        f"{RESULTS}/models/{{model}}/import_model.log",
    benchmark:
        f"{RESULTS}/benchmarks/import_model_{{model}}.tsv"
    priority: RL_PRIORITY if SETTINGS.grpo else 0
    conda:
        "../../envs/prefpipe.yaml"
    threads: res("import_model", "threads")
    resources:
        **placement("import_model"),
        mem_mb=lambda wildcards, attempt: res("import_model", "mem_mb") * attempt,
        runtime=lambda wildcards, attempt: res("import_model", "runtime") * attempt,
    params:
        src=SRC,
        cfg=lambda wildcards, threads: stage_config(
            SETTINGS.models[wildcards.model], threads
        ),
        provenance=lambda wildcards: stage_config(
            SETTINGS.models[wildcards.model], None
        ),
        out=lambda wildcards, output: os.path.dirname(output.summary),
    shell:
        "PYTHONPATH={params.src:q} OMP_NUM_THREADS={threads} exec python -m prefpipe.import_model"
        " --config {params.cfg:q} --gguf {input.gguf:q} --out {params.out:q} > {log:q} 2>&1"
