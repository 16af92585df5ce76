#!/usr/bin/env bash
# The packages the workflow needs on a GPU machine whose image has torch, transformers, accelerate, peft, pandas,
# pyarrow and numpy but not Snakemake (and maybe not matplotlib or jsonschema), and which has no network.
# Run here, where the package index is reachable:
#   bash benchmarks/gpu_workflow_wheels.sh
# It writes .whl-workflow/ (git-ignored): the whole dependency closure of snakemake, matplotlib, jsonschema and
# pyyaml as wheels for CPython 3.12 on manylinux x86_64 (pure-Python wheels as they are, compiled ones for cp312,
# the one sdist in the closure, connection_pool, built into a pure wheel here). benchmarks/gpu_workflow.sh installs
# the wheels whose distribution the image lacks (--no-deps: the folder is the closure). Left out: numpy (torch's own
# dependency, always in the image) and pulp (16 MiB; Snakemake falls back to its greedy scheduler without it).
# About 36 MiB: a device call carries 64 MiB in all, the repository about 4 of them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PREFPIPE_PYTHON:-python3}
WANT=(snakemake==9.27.1 matplotlib jsonschema pyyaml)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)
native=$(mktemp -d)
trap 'rm -rf "$native"' EXIT
"$PY" -m pip download --quiet -d "$native" "${WANT[@]}"
rm -rf .whl-workflow
mkdir -p .whl-workflow
for file in "$native"/*; do
    name=$(basename "$file")
    case "$name" in
    *-py3-none-any.whl | *-py2.py3-none-any.whl | *-abi3-*.whl) cp "$file" .whl-workflow/ ;;
    *.tar.gz | *.zip) "$PY" -m pip wheel --quiet --no-deps -w .whl-workflow "$file" ;;
    *.whl)
        # name-version-cpXY-...: the same release for CPython 3.12
        dist=${name%%-*}
        version=$(echo "$name" | cut -d- -f2)
        "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            "${PLATFORMS[@]}" -d .whl-workflow "$dist==$version"
        ;;
    esac
done
rm -f .whl-workflow/numpy-*.whl .whl-workflow/pulp-*.whl
ls .whl-workflow | wc -l
du -sh .whl-workflow
