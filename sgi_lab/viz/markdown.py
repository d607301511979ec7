"""Markdown tables for results pages (GitHub renders them; no tabulate package): the one cell
format of an interval, a table of string cells, and a DataFrame as a table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

__all__ = ["format_interval", "frame_markdown", "markdown_table", "table_markdown"]


def format_interval(
    value: Any, lower: Any, upper: Any, digits: int = 3, signed: bool = False
) -> str:
    """``value [lower, upper]`` to ``digits`` decimals (``+``-signed for changes); the value
    alone without bounds (one seed), ``-`` without a value."""
    if value is None or pd.isna(value):
        return "-"
    sign = "+" if signed else ""
    text = f"{value:{sign}.{digits}f}"
    if lower is None or pd.isna(lower):
        return text
    return f"{text} [{lower:{sign}.{digits}f}, {upper:{sign}.{digits}f}]"


def table_markdown(header: Sequence[str], rows: Sequence[Sequence[str]], note: str = "") -> str:
    """A Markdown table of string cells, after ``note`` (a paragraph) when there is one."""
    lines = [note, ""] if note else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def markdown_table(frame: pd.DataFrame) -> str:
    """A DataFrame as a GitHub markdown table (index as the first column; ``-`` for NaN)."""
    frame = frame.reset_index()
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |"]
    lines.append("|" + "---|" * len(frame.columns))
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join("-" if pd.isna(v) else str(v) for v in row) + " |")
    return "\n".join(lines)


def frame_markdown(frame: pd.DataFrame) -> str:
    """A DataFrame of numbers as a Markdown table (index first, its name as the first header;
    floats to 3 decimals)."""
    header = [frame.index.name or "", *map(str, frame.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in frame.iterrows():
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join([str(name), *cells]) + " |")
    return "\n".join(lines)
