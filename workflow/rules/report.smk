rule report:
    input:
        data=rules.prep_data.output.summary,
        base=base_summary(),
        ablation=ablation_summary(),
        active_learning=active_learning_summary(),
        reward=expand(
            rules.train_reward_model.output.summary, variant=reward_variants()
        ),
        reward_metrics=expand(
            rules.train_reward_model.output.metrics, variant=reward_variants()
        ),
        eval=expand(rules.eval_rewardbench.output.summary, variant=reward_variants()),
        eval_ensemble=ensemble_summaries(),
        grpo=expand(rules.train_grpo.output.summary, run=grpo_runs()),
        grpo_metrics=expand(rules.train_grpo.output.metrics, run=grpo_runs()),
        grpo_samples=expand(rules.train_grpo.output.samples, run=grpo_runs()),
        grpo_curve=expand(rules.train_grpo.output.curve, run=grpo_runs()),
        policy_eval=expand(rules.eval_policy.output.summary, run=grpo_runs()),
        policy_examples=expand(rules.eval_policy.output.per_example, run=grpo_runs()),
        grpo_hypotheses=hypotheses_summary(),
        compared=compared_files(),
    output:
        html=report(
            f"{RESULTS}/report/report.html",
            category="6. Comparison report",
            caption="../report/report.rst",
        ),
        markdown=report(
            f"{RESULTS}/report/report.md",
            category="6. Comparison report",
            caption="../report/report_md.rst",
        ),
        figures=report(
            directory(f"{RESULTS}/report/figures"),
            patterns=["{figure}.png"],
            category="6. Comparison report",
            subcategory="Figures",
            caption="../report/report_figures.rst",
        ),
    log:
        f"{RESULTS}/report/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv"
    conda:
        "../envs/prefpipe.yaml"
    threads: res("report", "threads")
    resources:
        **rule_resources("report"),
    params:
        **stage_params(lambda wildcards: SETTINGS.report, out_of="html"),
        results=lambda wildcards, input: os.path.dirname(os.path.dirname(input.data)),
        inputs=lambda wildcards, input: report_manifest(input),
    shell:
        stage_shell("report", "--results {params.results:q} --inputs {params.inputs:q}")
