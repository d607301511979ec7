"""Training figures: static curves from metrics.jsonl, finetuning learning curves, a key/value
summary table, and what the live curves (`sgi_lab.viz.live`) draw with.

`sgi_lab.viz.live.LiveCurves` is the callback a notebook hands to `sgi_lab.train.pretrain.pretrain`::

    curves = viz.LiveCurves(viz.PRETRAIN_CURVES)
    curves.show()
    pretrain(config, data, out, callback=curves.update)
    curves.finish()

The figure is re-rendered through an IPython display handle (at most every
``min_interval_s``), never a ``FigureWidget`` (anywidget gives one 2 s to load plotly's bundle:
blank on a loaded machine); the handle also leaves the final curves in a notebook executed by
papermill.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sgi_lab.base.files import read_jsonl
from sgi_lab.viz.common import no_data_message, title_above_panels
from sgi_lab.viz.probes import PROBE_AXIS_UNITS, PROBE_UNITS, probe_panel_keys

__all__ = [
    "FINETUNE_CURVES",
    "PRETRAIN_CURVES",
    "compare_runs",
    "FIGURE_MAX_WIDTH",
    "FULL_WIDTH_FROM_COLUMNS",
    "figure_widget_available",
    "figure_width",
    "widget_width",
    "runs_metrics",
    "summary_table",
    "training_curves",
    "wrap_title",
]

PRETRAIN_CURVES: tuple[str, ...] = (
    "losses/total",
    "losses/spr",
    "losses/goal",
    "losses/inverse",
    "charts/inverse_accuracy",
    "charts/goal_reward_mean",
    "charts/cosine_similarity",
    "probe/f1",
    "charts/samples_per_s",
)
"""The pretraining metrics shown by default (those a run did not log are skipped): the probe F1
(``probe_every``; R^2 where logged: `probe_panel_keys`) beside the latent similarity (Fig. 4)."""

FINETUNE_CURVES: tuple[str, ...] = (
    "episode/return",
    "episode/clipped_return",
    "losses/total",
    "losses/rl",
    "losses/spr",
    "charts/q_mean",
    "charts/epsilon",
    "charts/sps",
)
"""The finetuning metrics shown by default (`sgi_lab.train.finetune`'s metrics.jsonl keys)."""


METRIC_UNITS: dict[str, str] = {
    "losses/": "loss",
    "episode/return": "episode return (raw score)",
    "episode/clipped_return": "episode return (clipped rewards)",
    "episode/length": "episode length (agent steps)",
    "charts/inverse_accuracy": "accuracy (fraction)",
    "charts/goal_reward_mean": "goal reward (mean)",
    "charts/cosine_similarity": "cosine similarity",
    "probe/": "F1 (linear probe)",
    **PROBE_UNITS,
    "charts/samples_per_s": "samples / s",
    "charts/sps": "agent steps / s",
    "charts/q_mean": "Q value (mean)",
    "charts/epsilon": "epsilon",
}
"""The y-axis title of a metric key (a key, or the longest prefix of it); others show the key."""

X_TITLES: dict[str, str] = {
    "step": "step",
    "update": "gradient updates",
    "epoch": "epoch",
    "samples": "samples",
}


EMPTY_PANEL_TEXT = {
    "probe/f1": "no probe yet (probing is off unless probe_every > 0)",
    "episode/return": "no episode has finished yet",
    "episode/length": "no episode has finished yet",
}
"""What an empty live panel says until its first value (default: "nothing logged yet")."""

FIGURE_MAX_WIDTH = 960
"""Pixels: the widest a figure of a set width is drawn, so that a JupyterLab cell in a 1,400 px
window shows it whole; a live FigureWidget's width (`widget_width`)."""

FULL_WIDTH_FROM_COLUMNS = 4
"""Figures with this many panels side by side or more take the cell's whole width (no set
width: plotly sizes a static figure to its cell); narrower ones keep a set width, at which a
panel or two stay readable rather than stretched across a wide screen. A 4-column figure at
960 px filled only 60% of a cell in a 1,920 px window."""


def figure_width(
    columns: int, per_column: int = 250, extra: int = 100, least: int = 0
) -> dict[str, Any]:
    """The layout keys that size a figure of ``columns`` panels side by side: ``autosize``
    and no width (the whole cell) from `FULL_WIDTH_FROM_COLUMNS` columns, else a set width of
    ``per_column`` px a panel plus ``extra``, at least ``least`` and at most
    `FIGURE_MAX_WIDTH`."""
    if columns >= FULL_WIDTH_FROM_COLUMNS:
        return {"autosize": True, "width": None}
    return {"width": min(FIGURE_MAX_WIDTH, max(least, per_column * columns + extra))}


def widget_width(fig: go.Figure) -> go.Figure:
    """``fig`` with a set width for a FigureWidget: a widget sizes itself before its cell has a
    width and would take 700 px (half the cell) without one. `FIGURE_MAX_WIDTH` when the figure
    has none; a static figure of the same layout (what `LiveCurves.finish` leaves) takes the
    whole cell."""
    if fig.layout.width is None:
        fig.update_layout(width=FIGURE_MAX_WIDTH)
    return fig


METRIC_TITLES: dict[str, str] = {
    "losses/total": "total loss",
    "losses/spr": "SPR loss (−Σ cos, min −K)",
    "losses/goal": "goal-RL loss",
    "losses/inverse": "inverse-dynamics loss",
    "losses/rl": "RL (C51) loss",
    "losses/atc": "ATC loss",
    "losses/bc": "behavioural-cloning loss",
    "episode/return": "episode return",
    "episode/clipped_return": "episode return, clipped",
    "episode/length": "episode length (steps)",
    "charts/inverse_accuracy": "inverse-dynamics accuracy",
    "charts/goal_reward_mean": "goal reward (mean)",
    "charts/cosine_similarity": "latent cosine similarity",
    "probe/f1": "probe F1 (AtariARI state, overall)",
    "probe/reward_f1": "probe F1 (reward)",
    "probe/r2": "probe R² (state labels, headline)",
    "charts/samples_per_s": "throughput (samples/s)",
    "charts/sps": "speed (agent steps/s)",
    "charts/q_mean": "Q value (mean)",
    "charts/epsilon": "exploration epsilon",
}
"""A readable panel title for a metrics key (its unit in brackets where it has one)."""

AXIS_UNITS: dict[str, str] = {
    "losses/": "loss",
    "episode/return": "score",
    "episode/clipped_return": "score",
    "episode/length": "steps",
    "charts/inverse_accuracy": "fraction",
    "charts/goal_reward_mean": "reward",
    "charts/cosine_similarity": "cosine",
    "probe/": "F1",
    **PROBE_AXIS_UNITS,
    "charts/samples_per_s": "samples/s",
    "charts/sps": "steps/s",
    "charts/q_mean": "Q",
    "charts/epsilon": "epsilon",
}
"""The short y-axis title of a panel (the panel's title says what it is)."""


def metric_title(key: str) -> str:
    """The panel title for a metrics key (`METRIC_TITLES`); others: the key's last part, with
    underscores as spaces (``charts/grad_norm`` -> ``grad norm``)."""
    return METRIC_TITLES.get(key) or key.rsplit("/", 1)[-1].replace("_", " ")


def _by_longest_prefix(table: Mapping[str, str], key: str, default: str) -> str:
    prefixes = [prefix for prefix in table if key.startswith(prefix)]
    return table[max(prefixes, key=len)] if prefixes else default


def _axis_unit(key: str) -> str:
    return _by_longest_prefix(AXIS_UNITS, key, "")


PANEL_TITLE_SIZE = 13
"""The font size of a panel's title (one line, `metric_title`)."""


def _subplots(keys: Sequence[str], columns: int) -> go.Figure:
    """Panels for ``keys`` with readable titles, spaced so titles and axis labels do not
    overlap, at a width that fits ``columns`` panels side by side."""
    rows = max(1, math.ceil(len(keys) / columns))
    fig = make_subplots(
        rows=rows,
        cols=columns,
        subplot_titles=[metric_title(k) for k in keys],
        horizontal_spacing=0.3 / columns,
        vertical_spacing=min(0.35 / rows, 0.2),
    )
    fig.update_annotations(font_size=PANEL_TITLE_SIZE)
    # Four panels across or more: the cell's whole width; fewer: a set width (`figure_width`).
    fig.update_layout(**figure_width(columns), height=280 * rows + 70)
    return fig


def metric_axis_title(key: str) -> str:
    """The y-axis title for a metrics key: its unit (`METRIC_UNITS`), else the key itself."""
    return _by_longest_prefix(METRIC_UNITS, key, key)


def _title_axes(fig: go.Figure, keys: Sequence[str], columns: int, x_title: str) -> None:
    for i, key in enumerate(keys):
        row, col = i // columns + 1, i % columns + 1
        fig.update_xaxes(title_text=x_title, title_standoff=4, row=row, col=col)
        fig.update_yaxes(title_text=_axis_unit(key), title_standoff=2, row=row, col=col)


STATIC_FIGURES_ENV = "SGI_LAB_STATIC_FIGURES"
"""Set to 1 for static figures only: `sgi_lab.launch.notebook_runner` sets it for the kernels it
starts, so that executed notebooks and their HTML pages hold the figures themselves (a widget's
view needs a live kernel to render)."""


def figure_widget_available() -> bool:
    """Whether live figures use plotly's FigureWidget: it works here (plotly >= 6 needs
    ``anywidget``) and static figures were not asked for (:data:`STATIC_FIGURES_ENV`)."""
    if os.environ.get(STATIC_FIGURES_ENV) == "1":
        return False
    try:
        go.FigureWidget()
    except ImportError:
        return False
    return True


def _show(fig: go.Figure, handle: Any = None) -> Any:
    """Display ``fig`` with a display id, or redraw it in place through ``handle``.

    plotly's own ``_ipython_display_`` ignores display ids, so every update would add a new
    output; displaying its MIME bundle ourselves keeps one output that updates (in JupyterLab
    and in notebooks executed by papermill alike).

    The bundle is built for plotly's default renderers, as ``fig.show()`` does: those
    are activated once per kernel. ``fig._repr_mimebundle_()`` names the renderers explicitly,
    which re-activates them on every call, and the ``notebook`` renderer's activation emits a
    fresh 4.8 MB copy of plotly.js each time (22 copies in a pretraining notebook's live curves).
    """
    import plotly.io as pio
    from IPython.display import display

    bundle = pio.renderers._build_mime_bundle(fig.to_dict())
    if not bundle:  # no renderer here (a plain Python process)
        return handle
    if handle is None:
        return display(bundle, raw=True, display_id=True)
    handle.update(bundle, raw=True)
    return handle


def _as_frame(metrics: pd.DataFrame | Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    return metrics if isinstance(metrics, pd.DataFrame) else pd.DataFrame(list(metrics))


# -- static figures -----------------------------------------------------------------------------


def training_curves(
    metrics: pd.DataFrame | Iterable[Mapping[str, Any]],
    keys: Sequence[str] | None = None,
    columns: int = 4,
    title: str | None = None,
    x: str = "step",
    runs: str | None = None,
    x_title: str | None = None,
) -> go.Figure:
    """Metric curves from metrics.jsonl rows, one panel per key that has data.

    Args:
        metrics: rows (``RunDir.read_metrics()``) or a DataFrame.
        keys: metrics to show (default: every numeric column but ``x``).
        columns: panels per row.
        title: figure title.
        x: x-axis column.
        runs: a column naming the run of each row; one line per run per panel when given.
        x_title: the x axes' title (default: from ``x``).

    Returns:
        A figure with one ``Scatter`` per (panel, run), named ``<key>`` or ``<key> (<run>)``;
        axes titled with the metric's unit (`metric_axis_title`); without data, a message.
    """
    df = _as_frame(metrics)
    x_title = x_title or X_TITLES.get(x, x)
    if x not in df.columns:
        df = df.assign(**{x: np.arange(len(df))})
    if keys is None:
        keys = [
            c for c in df.columns if c not in (x, runs) and pd.api.types.is_numeric_dtype(df[c])
        ]
    asked = probe_panel_keys(keys, df.columns[df.notna().any()])  # R^2 where logged
    keys = [k for k in asked if k in df.columns and df[k].notna().any()]
    if not keys:
        fig = go.Figure().update_layout(title=title, template="plotly_white", height=260)
        return no_data_message(fig, "no metrics logged yet")
    missing = [metric_title(k) for k in asked if k not in keys]
    if missing and title:  # said in words, where an empty panel would have been drawn
        title = f"{title}<br><sup>not logged in this run: {', '.join(missing)}</sup>"
    fig = _subplots(keys, columns)
    groups = df.groupby(runs, sort=False) if runs else [(None, df)]
    palette = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692"]
    for j, (run, part) in enumerate(groups):
        for i, key in enumerate(keys):
            data = part[[x, key]].dropna()
            fig.add_trace(
                go.Scatter(
                    x=data[x],
                    y=data[key],
                    mode="lines",
                    name=key if run is None else f"{key} ({run})",
                    legendgroup=str(run),
                    showlegend=run is not None and i == 0,
                    line={"color": palette[j % len(palette)]},
                ),
                row=i // columns + 1,
                col=i % columns + 1,
            )
    _title_axes(fig, keys, columns, x_title)
    fig.update_layout(
        **title_above_panels(title, PANEL_TITLE_SIZE),
        template="plotly_white",
        showlegend=runs is not None,
    )
    return fig


def runs_metrics(
    run_dirs: Sequence[str | os.PathLike] | Mapping[str, str | os.PathLike],
) -> pd.DataFrame:
    """The metrics.jsonl rows of several runs in one frame, with a ``run`` column naming each
    row's run (its folder name, or the mapping's label); runs without metrics add nothing."""
    named = (
        dict(run_dirs)
        if isinstance(run_dirs, Mapping)
        else {_run_label(Path(p), run_dirs): p for p in run_dirs}
    )
    frames = [
        pd.DataFrame(rows).assign(run=label)
        for label, folder in named.items()
        if (rows := read_jsonl(Path(folder) / "metrics.jsonl"))
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run"])


def _run_label(path: Path, all_paths: Sequence[str | os.PathLike]) -> str:
    # agents of a population share their folder's name pattern (Pong__s0): name the parent too
    names = [Path(p).name for p in all_paths]
    return path.name if names.count(path.name) == 1 else f"{path.parent.name}/{path.name}"


def compare_runs(
    run_dirs: Sequence[str | os.PathLike] | Mapping[str, str | os.PathLike],
    keys: Sequence[str] | None = None,
    columns: int = 4,
    title: str | None = None,
) -> go.Figure:
    """Several runs' curves overlaid: one panel per metric, one colour per run (a legend entry
    each), from their metrics.jsonl (`runs_metrics`, `training_curves` with ``runs="run"``).

    Args:
        run_dirs: run folders (pretraining or finetuning), or ``{label: folder}``.
        keys: the metrics shown (default: every numeric one logged).
        columns: panels per row.
        title: figure title (default: how many runs).
    """
    df = runs_metrics(run_dirs)
    count = df["run"].nunique() if len(df) else 0
    title = title or f"{count} run{'s' * (count != 1)} side by side"
    if not count:
        fig = go.Figure().update_layout(title=title, template="plotly_white", height=260)
        return no_data_message(fig, "none of these runs has logged metrics yet")
    return training_curves(df, keys, columns, title, runs="run")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (np.floating, np.integer)):
        return _cell(value.item())
    return str(value)


def wrap_title(title: str | None, width: int = 70) -> str | None:
    """A title that fits a figure: past ``width`` characters, what follows its first ": " goes
    to a smaller second line, wrapped (plotly never wraps a title: it runs off the edge)."""
    import textwrap

    if not title or len(title) <= width or "<br>" in title:
        return title
    head, sep, rest = title.partition(": ")
    if not sep:  # no ": " to break at: the first line as wide as it may be
        head, *more = textwrap.wrap(title, width)
        rest = " ".join(more)
    lines = textwrap.wrap(rest.strip(), int(width * 1.3))
    return f"{head}<br><sup>{'<br>'.join(lines)}</sup>"


def summary_table(values: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """A two-column plotly Table of ``{name: value}`` (floats to 4 significant digits; metrics
    keys such as ``charts/cosine_similarity`` by their readable name, `metric_title`), as tall
    as its rows (plotly draws a cell 20 px high, the header 28 px)."""
    names = [metric_title(k) if "/" in str(k) else str(k) for k in values]
    title = wrap_title(title)
    fig = go.Figure(
        go.Table(
            header={"values": ["", "value"], "align": "left", "height": 28},
            cells={"values": [names, [_cell(v) for v in values.values()]], "align": "left"},
            columnwidth=[2, 3],
        )
    )
    top = 40 + 16 * (title or "").count("<br>") if title else 10
    fig.update_layout(
        title=title,
        template="plotly_white",
        height=top + 28 + 21 * len(values) + 16,
        margin={"l": 10, "r": 10, "t": top, "b": 4},
    )
    return fig
