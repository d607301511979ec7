"""Plotly figures of aggregate human-normalized scores: interval plots, per-game bars, tables.

All three take the tidy frames of `sgi_lab.metrics` (``method, metric, value, lower, upper`` from
`aggregate_with_ci` or ``paper_aggregates(..., tidy=True)``; ``game, ours, paper, ours_hns,
paper_hns`` from `compare_to_paper`), so notebooks only call them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from sgi_lab.metrics.aggregate import metric_label
from sgi_lab.metrics.minatar import SCORE_TITLES, SCORE_TOP
from sgi_lab.viz.common import finite_or_none, no_data_message
from sgi_lab.viz.tables import aggregate_frame
from sgi_lab.viz.training import figure_width

__all__ = ["aggregate_table", "interval_plot", "per_game_bar"]

_COUNT_METRICS = {"games_above_human", "games_above_zero", "games_above_spr"}


def _ordered(values: pd.Series, keep: Sequence[str] | None) -> list[str]:
    present = list(dict.fromkeys(values))
    if keep is None:
        return present
    missing = [v for v in keep if v not in present]
    if missing:
        raise KeyError(f"{missing} not in the data; present: {present}")
    return list(keep)


def _label(metric: str, normalization: str = "HNS") -> str:
    return metric_label(metric, normalization)


def _axis_title(metric: str, normalization: str = "HNS") -> str:
    return "games" if metric in _COUNT_METRICS else SCORE_TITLES[normalization]


def _colors(methods: Sequence[str]) -> dict[str, str]:
    palette = qualitative.Plotly
    return {m: palette[i % len(palette)] for i, m in enumerate(methods)}


def interval_plot(
    df: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    paper: pd.DataFrame | None = None,
    title: str | None = None,
    capped_from: str | None = None,
    normalization: str = "HNS",
) -> go.Figure:
    """rliable-style interval plot: one panel per metric, one row per method.

    Each method's confidence interval is a horizontal bar from ``lower`` to ``upper`` and its
    point estimate a vertical tick, as in rliable's ``plot_interval_estimates``.

    Args:
        df: Tidy aggregates with columns ``method, metric, value, lower, upper``.
        metrics: Metrics to show, one panel each, in this order; default: all in ``df``.
        methods: Methods to show, top to bottom; default: all in ``df``, in order.
        paper: Optional tidy paper aggregates (``paper_aggregates(table, tidy=True)``) drawn as
            diamonds (with the paper's CI as error bars where it has one) on the row of the
            method of the same name, for the metrics shown.
        title: Figure title.
        capped_from: the first of the rows (last in ``methods``) whose evaluations were capped:
            a line above it sets them apart, labelled not comparable with the rows above.
        normalization: the scores' normalisation, ``"HNS"`` or ``"MinAtar score"``: it names
            the x axes and the panel titles (`sgi_lab.metrics.metric_label`).

    Returns:
        A figure whose panel ``i`` holds a ``Bar`` trace (``base`` = lower bounds, ``x`` =
        interval widths) and a ``Scatter`` trace of point estimates, named ``"<metric> CI"`` and
        ``"<metric>"``, plus ``"<metric> (paper)"`` when ``paper`` is given; then one legend
        entry per method (a ``Scatter`` with no points, named after the method). x axes are
        titled "human-normalized score" or "MinAtar score (0 random, 1 DQN)" ("games" for
        counts); every method's name is a tick.
        NaN (a point without a CI) becomes a gap, never a number in the JSON. No rows: a message.
    """
    if df.empty:
        fig = go.Figure().update_layout(title=title, template="plotly_white", height=220)
        return no_data_message(fig, "no aggregate to show")
    metrics = _ordered(df["metric"], metrics)
    methods = _ordered(df["method"], methods)
    colors = _colors(methods)
    fig = make_subplots(
        rows=1,
        cols=len(metrics),
        shared_yaxes=True,
        subplot_titles=[_label(m, normalization) for m in metrics],
        horizontal_spacing=min(0.08, 0.5 / max(len(metrics), 1)),
    )
    for col, metric in enumerate(metrics, start=1):
        rows = df[df["metric"] == metric].set_index("method").reindex(methods)
        _add_intervals(fig, rows, metric, methods, colors, col, normalization)
        if paper is not None:
            _add_paper_values(fig, paper, metric, methods, col)
        fig.update_xaxes(
            title_text=_axis_title(metric, normalization), row=1, col=col, **_ticks(rows, metric)
        )
    _add_method_legend(fig, methods, colors)
    _lay_out_interval_plot(fig, metrics, methods, title)
    if capped_from is not None and capped_from in methods[1:]:
        _capped_divider(fig, methods.index(capped_from))
    return fig


def _ticks(rows: pd.DataFrame, metric: str) -> dict:
    """A few ticks per panel, so that neighbouring panels' labels do not run together; whole
    games for counts (a count has no half-game)."""
    if metric not in _COUNT_METRICS:
        return {"nticks": 5}
    values = rows[["value", "lower", "upper"]].to_numpy(float)
    span = float(pd.Series(values.ravel()).max() - pd.Series(values.ravel()).min())
    step = max(1, math.ceil((0 if math.isnan(span) else span) / 4))
    return {"tick0": 0, "dtick": step, "tickformat": "d"}


def _capped_divider(fig: go.Figure, row: int) -> None:
    """A line across every panel above category ``row`` (rows run top to bottom), naming what
    lies below it: capped evaluations, not ranked among the rows above."""
    fig.add_shape(
        type="line",
        xref="paper",
        yref="y",
        x0=0,
        x1=1,
        y0=row - 0.5,
        y1=row - 0.5,
        line={"color": "#d62728", "dash": "dash", "width": 1.5},
        name="capped evaluations below",
    )
    fig.add_annotation(
        text="below: capped evaluations, not comparable with the rows above",
        xref="paper",
        yref="y",
        x=1,
        y=row - 0.5,
        xanchor="right",
        yanchor="bottom",
        showarrow=False,
        font={"size": 11, "color": "#d62728"},
        name="capped",
    )


def _add_intervals(
    fig: go.Figure,
    rows: pd.DataFrame,
    metric: str,
    methods: Sequence[str],
    colors: dict[str, str],
    col: int,
    normalization: str = "HNS",
) -> None:
    """Panel ``col``: each method's CI as a bar from ``lower`` to ``upper`` (trace
    ``"<metric> CI"``) and its point estimate as a tick (trace ``"<metric>"``); ``rows`` holds
    the metric's ``value, lower, upper`` indexed by method in ``methods`` order."""
    lower = rows["lower"].to_numpy(float)
    upper = rows["upper"].to_numpy(float)
    value = rows["value"].to_numpy(float)
    fig.add_trace(
        go.Bar(
            name=f"{metric} CI",
            y=methods,
            x=finite_or_none(upper - lower),
            base=finite_or_none(lower),
            orientation="h",
            marker={"color": [colors[m] for m in methods], "opacity": 0.75},
            customdata=[finite_or_none(row) for row in zip(value, lower, upper)],
            hovertemplate="%{y}: %{customdata[0]:.3f} (%{customdata[1]:.3f}, "
            "%{customdata[2]:.3f})<extra>" + _label(metric, normalization) + "</extra>",
            showlegend=False,
        ),
        row=1,
        col=col,
    )
    fig.add_trace(
        go.Scatter(
            name=metric,
            y=methods,
            x=finite_or_none(value),
            mode="markers",
            # each tick in its method's colour, as the legend's squares promise
            marker={
                "symbol": "line-ns-open",
                "size": 18,
                "line": {"width": 3, "color": [colors[m] for m in methods]},
                "color": [colors[m] for m in methods],
            },
            hoverinfo="skip",
            showlegend=False,
        ),
        row=1,
        col=col,
    )


def _add_paper_values(
    fig: go.Figure, paper: pd.DataFrame, metric: str, methods: Sequence[str], col: int
) -> None:
    """Panel ``col``: the paper's ``metric`` for the methods shown, as diamonds with the
    paper's CI as error bars (trace ``"<metric> (paper)"``, in the legend from the first panel
    only); nothing when the paper has none of them."""
    ref = paper[(paper["metric"] == metric) & paper["method"].isin(methods)]
    if ref.empty:
        return
    ref_value = ref["value"].to_numpy(float)
    fig.add_trace(
        go.Scatter(
            name=f"{metric} (paper)",
            y=list(ref["method"]),
            x=finite_or_none(ref_value),
            mode="markers",
            marker={"symbol": "diamond", "size": 9, "color": "dimgray"},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": finite_or_none(ref["upper"].to_numpy(float) - ref_value),
                "arrayminus": finite_or_none(ref_value - ref["lower"].to_numpy(float)),
                "color": "dimgray",
            },
            hovertemplate="%{y} (paper): %{x:.3f}<extra></extra>",
            legendgroup="paper",
            showlegend=col == 1,
        ),
        row=1,
        col=col,
    )


def _add_method_legend(fig: go.Figure, methods: Sequence[str], colors: dict[str, str]) -> None:
    """One legend entry per method (a ``Scatter`` without points): the bars carry the
    per-method colours inside one trace per panel, so the colours' key needs traces of its own."""
    for method in methods:
        fig.add_trace(
            go.Scatter(
                name=method,
                x=[None],
                y=[None],
                mode="markers",
                marker={"symbol": "square", "size": 12, "color": colors[method]},
                legendgroup=method,
                hoverinfo="skip",
            ),
            row=1,
            col=1,
        )


def _lay_out_interval_plot(
    fig: go.Figure, metrics: Sequence[str], methods: Sequence[str], title: str | None
) -> None:
    """Axes, size and legend: every method a tick, the figure grown with methods and panels."""
    # Every method a tick: plotly thins category ticks on short axes, dropping method names.
    fig.update_yaxes(
        autorange="reversed", type="category", tickmode="array", tickvals=list(methods)
    )
    fig.update_xaxes(zeroline=False, showgrid=True)
    lines = (title or "").count("<br>")
    fig.update_layout(
        # the title from the top of the figure down, its subtitle lines above the panel titles
        title={"text": title, "y": 0.99, "yref": "container", "yanchor": "top"},
        barmode="overlay",
        bargap=0.45,
        template="plotly_white",
        height=max(300, 40 * len(methods) + 200),
        # four panels or more: the cell's whole width; fewer: 640 to 960 px
        **figure_width(len(metrics), per_column=260, extra=160, least=640),
        legend={"orientation": "h", "y": -0.3, "yanchor": "top"},
        margin={
            "b": 40 + 20 * math.ceil(len(methods) / 3),
            "t": 80 + 18 * lines,  # the title, each subtitle line, then the panel titles
        },
    )


def per_game_bar(compare_df: pd.DataFrame, title: str | None = None) -> go.Figure:
    """Grouped bars of our per-game HNS beside the paper's for the same configuration.

    Args:
        compare_df: The frame of `sgi_lab.metrics.compare_to_paper` (columns ``game, ours_hns,
            paper_hns``); ``compare_df.attrs["config"]`` names the paper column, and
            ``attrs["normalization"]`` what the scores are (default HNS; MinAtar runs, from
            `sgi_lab.analysis.report.compare_runs_to_paper`: the MinAtar score, no paper bar).
        title: Figure title; defaults to "Per-game HNS: ours vs paper (<config>)".

    Returns:
        A figure with two ``Bar`` traces named ``"ours"`` and ``"paper (<config>)"`` (x = games,
        y = HNS), and dotted lines at 0 (random) and 1 (human). The title's second line is our
        evaluation protocol and, unless it is the paper's, "not comparable"
        (``compare_df.attrs["note"]``). MinAtar scores: one ``"ours"`` trace, titled and
        labelled "MinAtar score", the line at 1 "DQN reference".
    """
    config = compare_df.attrs.get("config", "paper")
    normalization = compare_df.attrs.get("normalization", "HNS")
    if normalization != "HNS":
        return _minatar_bar(compare_df, title, normalization)
    games = list(compare_df["game"])
    fig = go.Figure(
        [
            go.Bar(
                name="ours",
                x=games,
                y=finite_or_none(compare_df["ours_hns"].to_numpy(float)),
            ),
            go.Bar(
                name=f"paper ({config})",
                x=games,
                y=finite_or_none(compare_df["paper_hns"].to_numpy(float)),
            ),
        ]
    )
    title = title or f"Per-game HNS: ours vs paper ({config})"
    note = compare_df.attrs.get("note")
    if note:
        title += f"<br><sup>{note}</sup>"
    if not games:
        no_data_message(fig, "no game to compare")
    fig.add_hline(y=0.0, line_dash="dot", line_color="gray", annotation_text="random")
    fig.add_hline(y=1.0, line_dash="dot", line_color="gray", annotation_text="human")
    fig.update_layout(
        title=title,
        barmode="group",
        template="plotly_white",
        yaxis_title="human-normalized score",
        xaxis_title="game",
        xaxis_tickangle=-45,
    )
    return fig


def _minatar_bar(compare_df: pd.DataFrame, title: str | None, normalization: str) -> go.Figure:
    """`per_game_bar` of MinAtar runs: their scores alone, the paper having none."""
    games = list(compare_df["game"])
    fig = go.Figure(
        go.Bar(name="ours", x=games, y=finite_or_none(compare_df["ours_hns"].to_numpy(float)))
    )
    title = title or f"Per-game {normalization}"
    note = compare_df.attrs.get("note")
    if note:
        title += f"<br><sup>{note}</sup>"
    if not games:
        no_data_message(fig, "no game to show")
    fig.add_hline(y=0.0, line_dash="dot", line_color="gray", annotation_text="random")
    fig.add_hline(
        y=1.0, line_dash="dot", line_color="gray", annotation_text=SCORE_TOP[normalization]
    )
    fig.update_layout(
        title=title,
        template="plotly_white",
        yaxis_title=SCORE_TITLES[normalization],
        xaxis_title="game",
    )
    return fig


def aggregate_table(
    df: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    digits: int = 3,
    normalization: str = "HNS",
) -> go.Figure:
    """The aggregates as a plotly Table: one row per method, one column per metric.

    Args:
        df: Tidy aggregates with columns ``method, metric, value`` and optionally ``lower,
            upper`` (a cell then reads ``value (lower, upper)``, like the paper's tab:IQMs).
        metrics: Columns to show, in order; default: all in ``df``.
        methods: Rows to show, in order; default: all in ``df``.
        digits: Decimals for non-count metrics.
        normalization: the scores' normalisation (names the count columns: "#Games > DQN"
            for the MinAtar score).

    Returns:
        A figure with one ``Table`` trace; ``cells.values[0]`` are the methods and
        ``cells.values[j]`` the formatted cells of metric ``j``.
    """
    metrics = _ordered(df["metric"], metrics)
    methods = _ordered(df["method"], methods)
    if df.duplicated(["method", "metric"]).any():
        raise ValueError("several rows share a (method, metric); rename methods, e.g. 'X (paper)'")
    has_ci = {"lower", "upper"} <= set(df.columns)
    # the cells as the explorer's HTML table formats them (one formatter for both)
    frame = aggregate_frame(df, metrics, methods, digits, normalization)
    columns = [frame[c].tolist() for c in frame.columns]
    header = ["Method", *[_label(m, normalization) + (" (CI)" if has_ci else "") for m in metrics]]
    fig = go.Figure(
        go.Table(
            header={"values": header, "align": "left", "font": {"size": 12}},
            cells={"values": columns, "align": "left"},
        )
    )
    # plotly's default height (450 px) leaves a blank gap under a few rows
    fig.update_layout(
        template="plotly_white",
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        height=30 + 28 + 22 * len(methods) + 20,  # header 28 px, a cell 20 px (+ slack)
    )
    return fig
