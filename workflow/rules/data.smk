rule prep_data:
    input:
        data_files(),
    output:
        **prep_data_outputs(),
        summary=report(
            f"{RESULTS}/data/summary.json",
            category="1. Data",
            caption="../report/data.rst",
        ),
    log:
        f"{RESULTS}/data/prep_data.log",
    benchmark:
        f"{RESULTS}/benchmarks/prep_data.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("prep_data", "threads")
    resources:
        **rule_resources("prep_data"),
    params:
        **stage_params(lambda wildcards: SETTINGS.data),
    shell:
        stage_shell("prep_data")
