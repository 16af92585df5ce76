#!/usr/bin/env bash
# Snakemake runs this once after creating workflow/envs/prefpipe.yaml's environment (--use-conda): the
# package itself, without its dependencies (the env file lists them), from the checkout that holds the
# workflow (PREFPIPE_SOURCE: the Snakefile sets it to workflow/..).
set -euo pipefail
python -m pip install --no-deps "${PREFPIPE_SOURCE:?the Snakefile sets PREFPIPE_SOURCE}"
