#!/usr/bin/env bash
# System packages the full test tier needs, installed by CI (.ci/run) before the test suite and by people once
# with `sudo bash scripts/ci_system_deps.sh` (scripts/test.sh never installs them; their tests skip without):
#   slurmctld slurmd slurm-client munge   a real single-node SLURM for tests/test_slurm_cluster.py
#   chromium                              headless rendering check of the report (tests/test_report_chromium.py)
# Tolerant on purpose: without root or apt-get, or when apt fails (no network, no mirror), it prints why and
# exits 0; the tests that need the packages then skip with their own reason. PREFPIPE_NO_APT=1 skips it.
set -uo pipefail

# Each group is installed with its own apt-get call (a failed one does not cost the others); the SLURM group
# without recommended packages (as scripts/slurm/local_slurm.sh installs it), Chromium with them (fonts).
GROUPS_TO_INSTALL=(
    "slurmctld slurmd slurm-client munge"
    "chromium"
)
NO_RECOMMENDS=("slurmctld slurmd slurm-client munge")
LOG="${TMPDIR:-/tmp}/prefpipe-ci-apt.log"

say() { echo "[ci_system_deps] $*" >&2; }

if [[ "${PREFPIPE_NO_APT:-0}" == "1" ]]; then
    say "PREFPIPE_NO_APT=1: not installing system packages"
    exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
    say "not root: not installing system packages (tests needing SLURM or Chromium will skip)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
    say "no apt-get/dpkg: not a Debian-like system; tests needing SLURM or Chromium will skip"
    exit 0
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing_groups=()
for group in "${GROUPS_TO_INSTALL[@]}"; do
    missing=()
    for package in $group; do
        installed "$package" || missing+=("$package")
    done
    [[ ${#missing[@]} -gt 0 ]] && missing_groups+=("${missing[*]}")
done
if [[ ${#missing_groups[@]} -eq 0 ]]; then
    say "all present: ${GROUPS_TO_INSTALL[*]}"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
if ! apt-get update -q >"$LOG" 2>&1; then
    say "apt-get update failed (tests needing ${missing_groups[*]} will skip); last lines of $LOG:"
    tail -n 5 "$LOG" >&2
    exit 0
fi
for group in "${missing_groups[@]}"; do
    flags=(-y -q)
    for package in $group; do
        [[ " ${NO_RECOMMENDS[*]} " == *" $package "* ]] && flags+=(--no-install-recommends) && break
    done
    # shellcheck disable=SC2086  # a group is a space-separated package list
    if apt-get install "${flags[@]}" $group >>"$LOG" 2>&1; then
        say "installed $group"
    else
        say "apt-get install $group failed (tests needing it will skip); last lines of $LOG:"
        tail -n 5 "$LOG" >&2
    fi
done
say "done in $((SECONDS - start)) s"
exit 0
