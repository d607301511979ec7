"""Tables as HTML: the ablation explorer's aggregates, a notebook's final results, and a table
that callbacks redraw in place.

A plotly ``Table`` inside a FigureWidget is unreliable in JupyterLab (blank headers on first
display, cells that keep their old values until the row count changes), and it reserves a fixed
height whatever its rows. These tables are plain HTML from pandas: they fit their content and a
display handle replaces them whole on every update.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.metrics.aggregate import metric_label
from sgi_lab.viz.training import metric_title

__all__ = ["LiveTable", "aggregate_frame", "format_number", "results_frame"]

_COUNT_METRICS = {"games_above_human", "games_above_zero", "games_above_spr"}


def format_number(value: Any, digits: int = 4) -> str:
    """A short, readable number: integers as they are, floats to ``digits`` significant digits,
    NaN/None as an empty string; anything else as ``str``."""
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return ""
        if value.is_integer() and abs(value) < 1e15:
            return format_number(int(value), digits)
        return f"{value:.{digits}g}"
    return str(value)


def aggregate_frame(
    df: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    digits: int = 3,
    normalization: str = "HNS",
) -> pd.DataFrame:
    """Tidy aggregates as a table: one row per method, one column per metric (its label).

    Args:
        df: ``method, metric, value`` and optionally ``lower, upper`` (a cell then reads
            ``value (lower, upper)``, like the paper's tab:IQMs).
        metrics: columns, in order (default: every metric in ``df``).
        methods: rows, in order (default: every method in ``df``).
        digits: decimals of non-count metrics.
        normalization: ``"HNS"`` or ``"MinAtar score"``: names the columns.

    Returns:
        A frame of strings with a ``Method`` column, then one column per metric, named by
        `sgi_lab.metrics.aggregate.metric_label` (``"IQM"``, ``"Optimality gap"``, ``"#Games >
        DQN"`` for the MinAtar score); a metric or method without a value gets an empty cell.
    """
    metrics = list(metrics) if metrics is not None else list(dict.fromkeys(df["metric"]))
    methods = list(methods) if methods is not None else list(dict.fromkeys(df["method"]))
    has_ci = {"lower", "upper"} <= set(df.columns)
    indexed = df.drop_duplicates(["method", "metric"]).set_index(["method", "metric"])

    def fmt(metric: str, x: float) -> str:
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return ""
        if metric in _COUNT_METRICS and float(x).is_integer():
            return str(int(x))
        return f"{x:.{digits}f}"

    columns: dict[str, list[str]] = {"Method": methods}
    for metric in metrics:
        cells = []
        for method in methods:
            if (method, metric) not in indexed.index:
                cells.append("")
                continue
            row = indexed.loc[(method, metric)]
            text = fmt(metric, float(row["value"]))
            if has_ci and not (pd.isna(row["lower"]) or pd.isna(row["upper"])):
                text += f" ({fmt(metric, float(row['lower']))}, {fmt(metric, float(row['upper']))})"
            cells.append(text)
        columns[metric_label(metric, normalization)] = cells
    return pd.DataFrame(columns)


def results_frame(results: Mapping[str, Any], max_items: int = 6, digits: int = 4) -> pd.DataFrame:
    """A notebook's recorded results (`sgi_lab.notebook.record_results`) as a short
    two-column table: numbers to ``digits`` significant digits, a list or mapping summarised
    (its length and first items) instead of dumped, nested mappings flattened one level, metrics
    keys by their readable names (``losses/total`` -> ``total loss``).

    Returns:
        A frame with columns ``result`` and ``value`` (strings).
    """
    rows: list[tuple[str, str]] = []

    def summarise(value: Any) -> str:
        if isinstance(value, Mapping):
            items = [f"{k}: {format_number(v, digits)}" for k, v in list(value.items())[:max_items]]
            more = len(value) - max_items
            return ", ".join(items) + (f", … ({more} more)" if more > 0 else "")
        if isinstance(value, (list, tuple)):
            if value and all(isinstance(v, Mapping) for v in value):
                return f"{len(value)} rows"
            items = [format_number(v, digits) for v in value[:max_items]]
            more = len(value) - max_items
            return ", ".join(items) + (f", … ({more} more)" if more > 0 else "")
        return format_number(value, digits)

    results = {(metric_title(k) if "/" in str(k) else k): v for k, v in results.items()}
    for key, value in results.items():
        if (
            isinstance(value, Mapping)
            and len(value) <= max_items
            and not any(isinstance(v, (Mapping, list, tuple)) for v in value.values())
        ):
            rows.extend((f"{key} / {k}", format_number(v, digits)) for k, v in value.items())
        else:
            rows.append((str(key), summarise(value)))
    return pd.DataFrame(rows, columns=["result", "value"])


def _html(frame: pd.DataFrame, title: str | None, empty: str | None = None) -> str:
    caption = f"<b>{html.escape(title)}</b>" if title else ""
    if frame.empty and empty is not None:  # a sentence, not a table without rows
        return f'<div class="sgi-lab-note">{caption}<p>{html.escape(empty)}</p></div>'
    table = frame.to_html(index=False, border=0, escape=True, na_rep="")
    return f'<div class="sgi-lab-table">{caption}{table}</div>'


class LiveTable:
    """A table shown once and redrawn in place by `replace` (an IPython display handle).

    ``frame`` is what is shown (tests read it); ``html`` its HTML. Without IPython (a plain
    process) nothing is displayed and both still update.

    Args:
        frame: the initial table (default: empty).
        title: a caption above the table.
        empty: what is said instead of a table while the frame has no rows (None: an empty
            table).
    """

    def __init__(
        self,
        frame: pd.DataFrame | None = None,
        title: str | None = None,
        empty: str | None = None,
    ) -> None:
        self.frame = frame if frame is not None else pd.DataFrame()
        self.title = title
        self.empty = empty
        self._handle: Any = None

    @property
    def html(self) -> str:
        """The table as HTML (a ``<table>`` whose header cells are the frame's columns), or the
        ``empty`` sentence while there are no rows."""
        return _html(self.frame, self.title, self.empty)

    @property
    def headers(self) -> list[str]:
        """The column headers shown."""
        return [str(c) for c in self.frame.columns]

    def _bundle(self) -> dict[str, str]:
        return {"text/html": self.html, "text/plain": self.frame.to_string(index=False)}

    def show(self) -> None:
        """Display the table; later `replace` calls redraw it where it is."""
        from IPython.display import display

        self._handle = display(self._bundle(), raw=True, display_id=True)

    def replace(self, frame: pd.DataFrame, title: str | None = None) -> None:
        """Show ``frame`` instead (and ``title`` when given)."""
        self.frame = frame
        if title is not None:
            self.title = title
        if self._handle is not None:
            self._handle.update(self._bundle(), raw=True)

    def _repr_html_(self) -> str:
        return self.html

    def _ipython_display_(self) -> None:
        self.show()
