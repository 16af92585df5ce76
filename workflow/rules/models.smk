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
        "../envs/prefpipe.yaml"
    threads: res("import_model", "threads")
    resources:
        **rule_resources("import_model"),
    params:
        **stage_params(lambda wildcards: SETTINGS.models[wildcards.model]),
    shell:
        stage_shell("import_model", "--gguf {input.gguf:q}")
