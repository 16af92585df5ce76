"""The one-step inspector's page (prefpipe.inspect_grpo; the table from grpo/inspector/table.py): the
step's loss recomputed from the table next to the trainer's, the group rewards and advantages, then one token
table per completion. Rendered with the report's own HTML and Markdown writers."""

from __future__ import annotations

from collections import defaultdict

from prefpipe.grpo.inspector.table import StepTable, TokenRow
from prefpipe.report.document import Document, Paragraph, Section, Table
from prefpipe.report.stats import NA, num


def _f(value: float | None, digits: int = 4) -> str:
    return NA if value is None else f"{value:.{digits}g}"


def _token(text: str) -> str:
    return repr(text)[1:-1] or "∅"


def _overview(table: StepTable, trainer_loss: float | None) -> Table:
    diff = None if trainer_loss is None else abs(table.table_loss - trainer_loss)
    return Table(
        "Loss of the step",
        ["Quantity", "Value"],
        [
            ["loss recomputed from the table (sum of contributions)", _f(table.table_loss, 8)],
            ["loss logged by the trainer (first pass)", _f(trainer_loss, 8)],
            ["|difference|", _f(diff, 3)],
            ["aggregation (grpo.loss_type)", table.loss_type],
            ["beta (KL weight)", num(table.beta)],
            ["loss tokens in the batch", str(table.num_tokens)],
            ["completions in the batch", str(table.num_sequences)],
        ],
        "Contribution of a token = d loss / d l_t * l_t, with l_t = -w_t min(rho A, clip(rho) A) + beta * KL_t (w_t: the sampler weight, 1 without an engine's correction); "
        "the aggregation is linear, so the contributions sum to the loss.",
        anchor="loss",
    )


def _groups(table: StepTable) -> Section:
    groups = [
        [
            g["prompt_id"],
            g["prompt"],
            NA if g["answer"] is None else str(g["answer"]),
            " ".join(f"{r:.3g}" for r in g["rewards"]),
            f"{g['mean']:.4g}",
            f"{g['std']:.4g}",
            " ".join(f"{a:+.3g}" for a in g["advantages"]),
        ]
        for g in table.groups
    ]
    return Section(
        "Groups",
        [
            Table(
                "Rewards and advantages per prompt group",
                ["Prompt id", "Prompt", "Answer", "Rewards", "Mean", "Std", "Advantages"],
                groups,
                "Advantage = (reward - group mean), divided by the group std + eps under scale_rewards group.",
                anchor="groups-table",
            )
        ],
        "groups",
    )


TOKEN_COLUMNS = [
    "Pos",
    "Token",
    "Role",
    "Mask",
    "log pi",
    "log ref",
    "Ratio",
    "Clipped",
    "A",
    "KL k3",
    "Sampler weight",
    "Contribution",
]


def _completion_table(row: int, tokens: list[TokenRow]) -> Table:
    total = sum(t.contribution for t in tokens)
    return Table(
        f"Completion {row} (advantage {tokens[0].advantage:+.4g}, contribution {total:.4g})",
        TOKEN_COLUMNS,
        [
            [
                str(t.position),
                _token(t.token),
                t.role,
                str(t.mask),
                f"{t.logp:.4f}",
                _f(t.ref_logp),
                f"{t.ratio:.4f}",
                t.clipped or "no",
                f"{t.advantage:+.4g}",
                _f(t.kl_k3),
                _f(t.sampler_weight),
                f"{t.contribution:.3e}",
            ]
            for t in tokens
        ],
        row_classes=["flag" if t.role == "prompt" and t.mask else "" for t in tokens],
    )


def build_page(
    table: StepTable, run: str, trainer_loss: float | None, source: str, limit: int | None
) -> Document:
    sections = [Section("Step", [Paragraph(source), _overview(table, trainer_loss)], "step"), _groups(table)]
    by_completion = defaultdict(list)
    for t in table.tokens:
        by_completion[t.completion].append(t)
    blocks = []
    for k, (row, tokens) in enumerate(sorted(by_completion.items())):
        if limit is not None and k >= limit:
            blocks.append(
                Paragraph(f"{len(by_completion) - limit} more completions left out (--completions).", "note")
            )
            break
        blocks.append(_completion_table(row, tokens))
    sections.append(Section("Tokens", blocks, "tokens"))
    return Document(f"GRPO step {table.step} of run {run}", source, sections)
