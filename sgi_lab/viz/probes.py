"""Plotly figures of linear-probe scores per objective with confidence intervals (the tidy
frame of `sgi_lab.analysis.probe_study.objective_summary`): F1 of the classified labels, held-out
R^2 of the labels read by regression (MinAtar's positions, counters and ramp: its headline) and
the collapse diagnostic's cosines, each in its own panel with its metric named on its axis (F1
and R^2 are never drawn on one axis)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from sgi_lab.viz.common import no_data_message

__all__ = [
    "COSINE_METRICS",
    "NO_PROBES",
    "PROBE_AXIS_UNITS",
    "PROBE_REFERENCES",
    "PROBE_UNITS",
    "R2_METRICS",
    "R2_REFERENCES",
    "fit_probe_panel",
    "probe_bars",
    "probe_curve_figure",
    "probe_panel_keys",
    "probe_panels",
    "reference_levels",
]

DEFAULT_METRICS = (
    "headline_f1",
    "overall",
    "agent_localization",
    "small_object_localization",
    "other_localization",
    "score_clock_lives_display",
    "miscellaneous",
    "reward_f1",
)
"""The F1 panel's metrics: the headline where it is an F1 (AtariARI's mean of category means, in
a result that names its headline), the mean over classified variables, per category, reward."""
R2_METRICS = ("headline_r2", "state_r2", "r2_coordinate", "r2_counter", "r2_ordinal")
"""The R^2 panel's metrics: the headline where it is an R^2 (``headline_r2``; ``state_r2`` is the
same mean held-out R^2 in a summary that does not split the headline), then per kind."""
COSINE_METRICS = ("cosine", "cosine_step0", "cosine_random_init")
"""The collapse panel's metrics: the encoder's mean pairwise cosine of the projection beside its
run's step 0 and a random encoder of the same architecture."""
LABELS = {
    "headline_f1": "headline: category mean",
    "headline_r2": "headline: mean R²",
    "state_r2": "mean R² (headline)",
    "r2_coordinate": "coordinates",
    "r2_counter": "counters",
    "r2_ordinal": "ordinal",
    "cosine": "encoder",
    "cosine_step0": "step 0",
    "cosine_random_init": "random init",
}
"""The x label of a metric (others: its name with spaces)."""
AXES = ("test F1", "held-out R²", "mean pairwise cosine")
"""The y-axis title of each panel: F1, R^2, collapse cosines."""
PANEL_TITLES = dict(
    zip(AXES, ("F1, classified labels", "R², labels read by regression", "collapse (projection)"))
)

PROBE_REFERENCES = {"random_init": "random init", "majority": "majority class"}
"""The baselines drawn as reference lines over the overall F1 (their ``metric`` in a summary,
their label): a randomly initialized encoder and the majority class, probed on the same split."""
R2_REFERENCES = {"random_init_r2": "random init R²"}
"""The baseline drawn over the R^2 headline: a random encoder's mean R^2 on the same split."""
_REFERENCE_STYLE = {
    "random_init": ("#d62728", "dash"),
    "majority": ("#7f7f7f", "dot"),
    "random_init_r2": ("#d62728", "dash"),
}
NO_PROBES = "no probe results yet: sgi-lab probe PRETRAINING_RUN --data STORE"

PROBE_UNITS = {"probe/r2": "held-out R² (linear probe)", "probe/cosine": "cosine similarity"}
"""The y-axis titles of pretraining's probe metrics that are no F1 (``probe/r2``,
``probe/r2_<kind>``, ``probe/cosine_<latent>``: `sgi_lab.viz.training` matches prefixes)."""
PROBE_AXIS_UNITS = {"probe/r2": "R²", "probe/cosine": "cosine"}
"""Their short y-axis titles (a live panel's)."""


def reference_levels(
    summary: pd.DataFrame, references: dict[str, str] = PROBE_REFERENCES
) -> dict[str, float]:
    """``{metric: value}`` of the ``references`` baselines in a summary: the mean over its
    objectives of each one's baseline (the same split's random-init and majority overall F1; with
    `R2_REFERENCES`, the random encoder's mean R^2)."""
    if summary.empty:
        return {}
    levels = {}
    for metric in references:
        values = summary.loc[summary["metric"] == metric, "value"].astype(float).dropna()
        if len(values):
            levels[metric] = float(values.mean())
    return levels


def probe_panels(
    summary: pd.DataFrame, metrics: Sequence[str] = DEFAULT_METRICS
) -> list[tuple[str, list[str]]]:
    """The panels a summary fills, as ``(y-axis title, metrics shown)``: F1 (of ``metrics``),
    R^2 (`R2_METRICS`), collapse cosines (`COSINE_METRICS`), each where the summary has one of
    its metrics (a result of probes.json format 1 fills the F1 panel alone)."""
    present = set() if summary.empty else set(summary["metric"])
    panels = zip(AXES, (metrics, R2_METRICS, COSINE_METRICS), strict=True)
    shown = [(axis, [m for m in chosen if m in present]) for axis, chosen in panels]
    return [(axis, names) for axis, names in shown if names]


def probe_bars(
    summary: pd.DataFrame,
    metrics: Sequence[str] = DEFAULT_METRICS,
    title: str | None = None,
    empty: str = NO_PROBES,
) -> go.Figure:
    """Grouped bars, one bar per objective with CI whiskers, in one panel per metric family
    (`probe_panels`): F1 per category with the random-init and majority-class overall F1
    (`reference_levels`) as lines across the overall group, so a bar is read against what an
    untrained encoder reaches; held-out R^2 (headline, then per kind) with the random encoder's
    R^2 across the headline; the collapse cosines (the encoder, its step 0, random init).

    Args:
        summary: ``objective, metric, value, lower, upper`` rows.
        metrics: the F1 panel's metrics, in order (those absent from ``summary`` are skipped).
        title: figure title (default: names what the panels show).
        empty: what the figure says when there are no results.
    """
    panels = probe_panels(summary, metrics)
    if not panels:
        return no_data_message(go.Figure(), empty)
    sizes = [len(names) for _, names in panels]
    fig = make_subplots(
        rows=1,
        cols=len(panels),
        column_widths=sizes,
        horizontal_spacing=0.08,
        subplot_titles=[PANEL_TITLES[axis] for axis, _ in panels] if len(panels) > 1 else None,
    )
    objectives = list(dict.fromkeys(summary["objective"]))
    for col, (axis, shown) in enumerate(panels, start=1):
        for objective, group in summary.groupby("objective", sort=False):
            rows = group.set_index("metric").reindex(shown)
            value = rows["value"].to_numpy(float)
            upper = np.nan_to_num(rows["upper"].to_numpy(float) - value)
            lower = np.nan_to_num(value - rows["lower"].to_numpy(float))
            index = objectives.index(objective)
            fig.add_bar(
                name=str(objective),
                x=[LABELS.get(m, m.replace("_", " ")) for m in shown],
                y=value,
                error_y={"type": "data", "symmetric": False, "array": upper, "arrayminus": lower},
                marker_color=qualitative.Plotly[index % len(qualitative.Plotly)],
                legendgroup=str(objective),
                showlegend=col == 1,
                row=1,
                col=col,
            )
        suffix = "" if col == 1 else str(col)
        if axis == AXES[0]:
            _reference_lines(fig, reference_levels(summary), shown, "overall", suffix)
        elif axis == AXES[1]:
            over = next((m for m in R2_METRICS[:2] if m in shown), None)
            _reference_lines(fig, reference_levels(summary, R2_REFERENCES), shown, over, suffix)
        range_ = [0, 1.05] if axis == AXES[0] else None
        fig.update_yaxes(title_text=axis, range=range_, row=1, col=col)
    if title is None:
        title = (
            "Probe F1 per category (95% CIs over seeds)"
            if [axis for axis, _ in panels] == [AXES[0]]
            else "Linear probes (95% CIs over seeds)<br><sup>F1 and R² never averaged together; "
            "a cosine near 1 is collapse, read beside random init</sup>"
        )
    fig.update_layout(title=title, barmode="group", height=420)
    return fig


def _reference_lines(
    fig: go.Figure, levels: dict[str, float], shown: list[str], over: str | None, suffix: str
) -> None:
    # Each baseline is of one metric (``over``): drawn over that group only (category i spans
    # i - 0.5 .. i + 0.5 on a categorical axis), across the whole panel without that group.
    at = shown.index(over) if over in shown else None
    x0, x1, xref = (at - 0.5, at + 0.5, "") if at is not None else (0, 1, " domain")
    for metric, level in levels.items():
        color, dash = _REFERENCE_STYLE[metric]
        label = {**PROBE_REFERENCES, **R2_REFERENCES}[metric]
        fig.add_shape(
            type="line",
            xref=f"x{suffix}{xref}",
            yref=f"y{suffix}",
            x0=x0,
            x1=x1,
            y0=level,
            y1=level,
            line={"color": color, "dash": dash, "width": 2},
            name=f"{label} {level:.3f}",
            showlegend=True,
            legendgroup="references",
        )


def probe_curve_figure(
    curves: pd.DataFrame, metric: str | None = None, empty: str | None = None
) -> go.Figure:
    """A probe score against pretraining step, one line per (run, game) (`probe_curves` rows),
    its metric named on the axis; with none, ``empty`` (what would draw them) across the figure.

    Args:
        curves: ``run, game, step`` and metric columns.
        metric: the column drawn (default: the headline, ``state_r2``, where the curves have a
            held-out R^2, as MinAtar's probes do; else ``overall`` F1).
        empty: what the figure says without curves.
    """
    fig = go.Figure()
    if curves.empty:
        text = empty or "no checkpoint probes yet: sgi-lab probe RUN/checkpoints/*.pt --data STORE"
        return no_data_message(fig, text).update_layout(height=300)
    if metric is None:
        has_r2 = "state_r2" in curves and curves["state_r2"].notna().any()
        metric = "state_r2" if has_r2 else "overall"
    for (run, game), group in curves.groupby(["run", "game"], sort=False, dropna=False):
        fig.add_scatter(
            x=group["step"], y=group[metric], mode="lines+markers", name=f"{run} ({game})"
        )
    axis = _axis_of(metric)
    name = {AXES[0]: "F1", AXES[1]: "R²"}.get(axis, "cosine")
    fig.update_layout(
        title=f"Probe {name} ({LABELS.get(metric, metric)}) over pretraining",
        xaxis_title="pretraining step",
        yaxis_title=axis,
        height=380,
    )
    return fig


def _axis_of(metric: str) -> str:
    """The y-axis title a metric's values are on: R^2, cosine, else F1."""
    if metric in R2_METRICS or "r2" in metric:
        return AXES[1]
    return AXES[2] if metric.startswith("cosine") else AXES[0]


def probe_panel_keys(keys: Sequence[str], logged: Collection[str]) -> list[str]:
    """The pretraining panels ``keys`` with the probe's fitted to what a run ``logged``: a run
    that logs a held-out R^2 (``probe/r2``: MinAtar's headline, its positions, counters and
    ramp) shows it where the probe F1 (``probe/f1``) was, with that F1 (of the classified labels
    only) beside it where logged, and no ``probe/headline`` panel (the same R^2, which would be
    drawn on an F1 axis); every other run's keys are as given (an Atari run's headline is F1)."""
    if "probe/r2" not in logged:
        return list(keys)
    keys = [k for k in keys if k != "probe/headline"]
    probe = [k for k in keys if k in ("probe/f1", "probe/r2")]
    if not probe:
        return keys
    at = keys.index(probe[0])
    rest = [k for k in keys if k not in probe]
    panel = ["probe/r2", *(["probe/f1"] if "probe/f1" in logged else [])]
    return [*rest[:at], *panel, *rest[at:]]


def fit_probe_panel(
    fig: go.Figure,
    keys: list[str],
    row: Mapping[str, object],
    title_of: Callable[[str], str],
    unit_of: Callable[[str], str],
) -> None:
    """A live figure's probe panel (``probe/f1`` among ``keys``, one panel each, titled by
    ``title_of`` with its y axis by ``unit_of``) turned into the held-out R^2's at the first
    ``row`` that logs one (``probe/r2``: a MinAtar run), so that its headline is drawn rather than
    the F1 of its few classified labels; ``keys`` is changed in place. Other rows: nothing."""
    if "probe/r2" not in row or "probe/f1" not in keys:
        return
    at = keys.index("probe/f1")
    keys[at] = "probe/r2"
    fig.data[at].name = "probe/r2"
    fig.layout[f"yaxis{at + 1 if at else ''}"].title.text = unit_of("probe/r2")
    for note in fig.layout.annotations:
        if note.text == title_of("probe/f1"):
            note.text = title_of("probe/r2")
        if note.name == "empty:probe/f1":  # removed at the panel's first value, by its new key
            note.name = "empty:probe/r2"
