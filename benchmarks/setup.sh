#!/usr/bin/env bash
# A separate virtualenv for the benchmarks (.venv-bench): prefpipe plus the peer they time (the `bench` extra,
# TRL). The project's own .venv is left alone, so TRL never becomes part of what the tests run against.
#   benchmarks/setup.sh            full install through scripts/bootstrap.sh (pinned CPU torch)
#   PREFPIPE_BENCH_BASE=/path/to/venv benchmarks/setup.sh
#                                  fast: layer .venv-bench on an existing prefpipe venv (a .pth file points at
#                                  its site-packages) and add only TRL, with --no-deps (TRL 1.16 needs nothing
#                                  beyond transformers, accelerate and datasets, which prefpipe already has)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PREFPIPE_BENCH_BASE:-}" ]; then
    if [ ! -x .venv-bench/bin/python ]; then
        "$PREFPIPE_BENCH_BASE/bin/python" -c 'import sys; print(sys.executable)' >/dev/null
        py=$(readlink -f "$PREFPIPE_BENCH_BASE/bin/python")
        "$py" -m venv .venv-bench
        site=$("$PREFPIPE_BENCH_BASE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        own=$(.venv-bench/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$site" >"$own/_prefpipe_base_venv.pth"
    fi
    .venv-bench/bin/python -m pip install --quiet --no-deps "trl==1.16.0"
else
    PREFPIPE_VENV=.venv-bench scripts/bootstrap.sh "dev,bench"
fi
PYTHONPATH=src .venv-bench/bin/python -c 'import trl, prefpipe; print("benchmarks ready: trl", trl.__version__)'
