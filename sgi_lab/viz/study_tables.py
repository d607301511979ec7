"""A finetuning study's tables as Markdown (`sgi_lab.studies.finetune_study` computes them): the
objectives' aggregates, each method against scratch seed by seed, raw returns per game under
both readouts, the pretraining-budget curve, each seed beside the same seed from scratch."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from sgi_lab.viz.markdown import format_interval

__all__ = [
    "aggregates_markdown",
    "budget_markdown",
    "over_note",
    "paired_markdown",
    "returns_markdown",
    "seed_table_markdown",
]

METRICS = ("iqm", "mean", "median")
"""The aggregates' columns, in the study's order."""


def aggregates_markdown(table: pd.DataFrame) -> str:
    """`objective_table`'s rows as Markdown: IQM, mean, median and P(improvement over none)."""
    lines = [
        "| method | IQM | mean | median | P(improvement over none) |",
        "|---|---|---|---|---|",
    ]
    for name, row in table.iterrows():
        cells = [format_interval(row[m], row[f"{m}_lower"], row[f"{m}_upper"]) for m in METRICS]
        poi = [row.get(f"p_improve_{k}") for k in ("value", "lower", "upper")]
        lines.append(f"| {name} | " + " | ".join([*cells, format_interval(*poi, digits=2)]) + " |")
    return "\n".join(lines)


def paired_markdown(table: pd.DataFrame, methods: Sequence[str] | None = None) -> str:
    """`paired_table` as Markdown: a row per method, per readout ``above / below / level`` and
    the sign test's p, and the games the pairs span (``methods`` picks and orders the rows)."""
    if table.empty:
        return ""
    readouts = list(dict.fromkeys(table["readout"]))
    names = {"eval": "final evaluation", "training": "training episodes"}
    header = ["method", "games", "pairs"]
    header += [f"{names.get(r, r)}: {c}" for r in readouts for c in ("above / below / level", "p")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    order = list(dict.fromkeys(table["method"]))
    if methods is not None:
        order = [m for m in methods if m in order] + [m for m in order if m not in methods]
    for method in order:
        part = table[table["method"] == method].set_index("readout")
        first = part.iloc[0]
        cells = [method, str(int(first["games"])), str(int(first["pairs"]))]
        for readout in readouts:
            if readout not in part.index:
                cells += ["-", "-"]
                continue
            r = part.loc[readout]
            cells += [f"{int(r['above'])} / {int(r['below'])} / {int(r['level'])}"]
            cells += [f"{r['sign_p']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def returns_markdown(returns: pd.DataFrame) -> str:
    """`per_game_returns` as one Markdown table: a row per method, per game the evaluation
    and the training-episode mean, each ``value [lower, upper]`` over seeds."""
    games = sorted(returns["game"].unique())
    header = ["method"] + [f"{g.split('/')[-1]} {r}" for g in games for r in ("eval", "training")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, group in returns.groupby("method", sort=False):
        cells = [method]
        for game in games:
            for readout in ("eval", "training"):
                row = group[(group["game"] == game) & (group["readout"] == readout)]
                if row.empty:
                    cells.append("-")
                    continue
                r = row.iloc[0]
                cells.append(format_interval(r["value"], r["lower"], r["upper"], digits=2))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def budget_markdown(curve: pd.DataFrame) -> str:
    """`budget_curve` as Markdown: a row per objective and pretraining budget."""
    lines = [
        "| objective | pretraining steps | IQM | mean | P(improvement over none) |",
        "|---|---|---|---|---|",
    ]
    for row in curve.itertuples(index=False):
        row = row._asdict()
        cells = [
            format_interval(row[m], row[f"{m}_lower"], row[f"{m}_upper"]) for m in ("iqm", "mean")
        ]
        poi = [row.get(f"p_improve_{k}") for k in ("value", "lower", "upper")]
        poi_cell = "-" if row["steps"] == 0 else format_interval(*poi, digits=2)
        lines.append(
            f"| {row['objective']} | {row['steps']:,} | " + " | ".join([*cells, poi_cell]) + " |"
        )
    return "\n".join(lines)


def over_note(table: pd.DataFrame) -> str:
    """What an `objective_table`'s aggregates are over, and how their CIs were made."""
    return (
        f"Over {int(table['games'].iloc[0])} games x {int(table['runs'].iloc[0])} seeds; "
        "95% stratified bootstrap CIs (rliable's method)."
    )


def seed_table_markdown(table: pd.DataFrame, methods: Sequence[str] | None = None) -> str:
    """Raw returns by (game, seed) rows and method columns as Markdown, two decimals, ``-``
    where a method has no agent (``methods`` picks and orders the columns)."""
    columns = [m for m in (methods or table.columns) if m in table.columns]
    lines = ["| game | seed | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for (game, seed), row in table[columns].iterrows():
        cells = ["-" if pd.isna(row[m]) else f"{row[m]:.2f}" for m in columns]
        lines.append(f"| {game} | {int(seed)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
