"""prefpipe's commands for finished result folders (the workflow itself runs with Snakemake).

    prefpipe report RESULTS [--compare NAME=DIR ...] [--out DIR] [--config FILE]
    prefpipe inspect RUN --step N [...]
    prefpipe export RUN OUT [--format ...]

Each subcommand hands its work to the module that owns it (prefpipe.report, prefpipe.inspect_grpo,
prefpipe.export_reward), with that module's own arguments; nothing here decides anything they decide.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import sys
from pathlib import Path

from prefpipe.common.config import ConfigError, UserError, load_config_arg
from prefpipe.common.io import read_json
from prefpipe.common.results.folder_kind import require_results
from prefpipe.common.results.outputs import command_output, path_argument
from prefpipe.report.inputs import Manifest, compare_roots

REPORT_DIR = "report"  # the workflow's report folder under a results folder
DEFAULT_OUT = "prefpipe-report"

REPORT_HELP = """Build the comparison report (report.html, report.md, figures/) from a finished results folder,
optionally beside other results folders (other seeds, configurations or code versions). The report's settings
are the ones the workflow's report used (RESULTS/report/config.json) unless --config names others; --compare
replaces their report.compare. The files read are the ones that report declared (RESULTS/report/inputs.json),
else every reward variant and GRPO run with a summary.json under RESULTS."""


def compare_pair(text: str) -> tuple[str, str]:
    name, sep, folder = text.partition("=")
    if not sep or not name.strip() or not folder.strip():
        raise argparse.ArgumentTypeError(f"--compare {text!r}: expected NAME=DIR (e.g. seed7=results_seed7)")
    return name, folder


def add_report(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("report", help="build the comparison report", description=REPORT_HELP)
    p.add_argument("results", type=path_argument, help="a finished results folder (e.g. results)")
    p.add_argument(
        "--compare",
        type=compare_pair,
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another results folder to compare with, shown as NAME (repeat for more)",
    )
    p.add_argument(
        "--out", type=path_argument, default=Path(DEFAULT_OUT), help=f"output folder (default {DEFAULT_OUT})"
    )
    p.add_argument(
        "--config", help="report settings (JSON or YAML file, or inline JSON) instead of the recorded ones"
    )
    p.set_defaults(run=run_report)


def report_settings(args: argparse.Namespace) -> dict:
    """The report stage's --config mapping: given, or recorded by the workflow's report; --compare applied."""
    recorded = args.results / REPORT_DIR / "config.json"
    if args.config is not None:
        config = load_config_arg(args.config)
    elif recorded.is_file():
        config = with_new_report_keys(read_json(recorded)["config"], recorded)
    else:
        raise ConfigError(f"{recorded}: not found (run the workflow's report once, or pass --config FILE)")
    if args.compare:
        config["compare"] = dict(args.compare)
    return config


def with_new_report_keys(config: dict, recorded: Path) -> dict:
    """Report settings recorded by an older prefpipe lack the keys added since: those come from the current
    config/config.yaml (said on stderr), so results from before an upgrade still render."""
    from prefpipe.settings.pipeline import load_config

    defaults = {k: v for k, v in load_config()["report"].items() if k != "enabled"}
    added = sorted(set(defaults) - set(config))
    if added:
        print(
            f"{recorded}: recorded before report key(s) {', '.join(added)}: the current defaults are used",
            file=sys.stderr,
        )
    return {**{k: defaults[k] for k in added}, **config}


def report_manifest(results: Path) -> Manifest:
    from prefpipe.report.write import INPUTS_FILE

    recorded = results / REPORT_DIR / INPUTS_FILE
    if recorded.is_file():
        return Manifest.from_json(recorded.read_text(encoding="utf-8"))
    return Manifest.listed(results)


class StageFailed(Exception):
    """The stage a command ran exited non-zero (it has said why): its partial output is not kept."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def run_report(args: argparse.Namespace) -> int:
    """Build the report into a new folder (prefpipe.common.results.outputs: never a results tree's stage folder, an
    input, or a folder another command wrote); --compare goes through the workflow's own check."""
    from prefpipe.report.__main__ import main as report_main

    if not args.results.is_dir():
        print(f"prefpipe report: {args.results}: no such folder", file=sys.stderr)
        return 2
    try:
        require_results(args.results)
        config, manifest = report_settings(args), report_manifest(args.results)
        roots = compare_roots(config.get("compare") or {}, own=args.results)
        inputs = [args.results, *roots.values()]
        with command_output(args.out, "report", inputs) as tmp:
            argv = [
                "--config",
                json.dumps(config),
                "--results",
                str(args.results),
                "--inputs",
                manifest.to_json(),
            ]
            code = report_main([*argv, "--out", str(tmp)])
            if code != 0:  # the stage said why; nothing is renamed into place
                raise StageFailed(code)
    except UserError as err:
        print(f"prefpipe report: {err}", file=sys.stderr)
        return 2
    except StageFailed as failed:
        return failed.code
    print(f"{args.out / 'report.html'}")
    return 0


# name -> (module, summary): subcommands whose arguments are their module's own `parser()`. The modules load
# torch, so each is imported only when its subcommand runs (`prefpipe report` and `--help` stay light).
DELEGATES = {
    "inspect": ("prefpipe.inspect_grpo", "one GRPO step, token by token (a saved or a fresh batch)"),
    "export": ("prefpipe.export_reward", "a trained reward model as a folder other tools load"),
}


def run_delegate(name: str, argv: list[str]) -> int:
    module = importlib.import_module(DELEGATES[name][0])
    return module.run(module.parser(prog=f"prefpipe {name}").parse_args(argv))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prefpipe", description=__doc__.split("\n")[0])
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_report(commands)
    for name, (_module, summary) in DELEGATES.items():
        commands.add_parser(name, help=summary, add_help=False)
    return p


# What a path the user gave can make the system answer (a name too long, a link loop, a file where a folder
# belongs, no permission): one line naming the path, exit 2, whichever command met it. Other OSErrors propagate.
PATH_ERRNOS = frozenset(
    {errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENOENT, errno.EACCES, errno.EPERM}
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] in DELEGATES:
            return run_delegate(argv[0], argv[1:])
        args = parser().parse_args(argv)
        return args.run(args)
    except OSError as err:
        if err.errno not in PATH_ERRNOS:
            raise
        print(f"prefpipe {argv[0]}: {err.filename}: {err.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
