"""The ablation explorer's widgets: ipywidgets over an `sgi_lab.analysis.ablations.AblationModel`,
its figures and tables redrawn on every change of a control."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from sgi_lab.analysis.ablation_probes import (
    probe_figure,
    probe_table,
)
from sgi_lab.analysis.ablations import AblationModel, AblationView
from sgi_lab.analysis.run_scores import DEFAULT_EXPLORER_METRICS, improvement_frame
from sgi_lab.metrics import (
    METRICS,
)
from sgi_lab.viz.ablations import ablation_figures
from sgi_lab.viz.live import LiveFigure
from sgi_lab.viz.tables import LiveTable, aggregate_frame

__all__ = ["AblationExplorer"]

PROBE_TABLE_TITLE = (
    "probe F1 of the encoders behind each method: test F1 of linear probes of game state, "
    "mean over seeds (95% CI); none yet: sgi-lab probe PRETRAINING_RUN --data STORE"
)
AGGREGATE_TABLE_TITLE = {
    "HNS": "aggregate human-normalized scores (95% CI)",
    "MinAtar score": "aggregate MinAtar scores (0 random, 1 DQN; 95% CI)",
}
IMPROVEMENT_TITLE = (
    "probability of improvement over the baseline: a run of the method beats a run of the "
    "baseline on a random selected game (ties half; 95% stratified bootstrap CI); and each "
    "run against the baseline's run of the same game and seed (two-sided sign test)"
)


class AblationExplorer:
    """ipywidgets over an `AblationModel`: pick games, our methods, paper rows, metrics and a
    baseline; see an interval plot, a table and per-game normalised scores (HNS, or the MinAtar
    score for MinAtar games, named in every title), and each method's probability of
    improvement over the baseline, updated on every change.

    The current data is ``explorer.view``, the figures are ``explorer.interval.figure`` and
    ``explorer.per_game.figure``, and the table (HTML: one column per chosen metric, one row
    per method) is ``explorer.table.frame``; the probe F1 of the chosen methods' encoders over
    the chosen games is ``explorer.probe_table.frame`` and ``explorer.probe_bars.figure``
    (`sgi_lab.analysis.ablation_probes`); the probability of improvement of each chosen
    method over ``explorer.baseline.value`` (one of our methods, or None) is
    ``explorer.improvement.frame`` (`improvement_over`); setting any control's ``value``
    (``explorer.paper.value = ("SGI-M", "Frozen")``) runs the same callback as a click.

    Args:
        model: the data.
        games, methods, paper, metrics: initial selections (None: the model's defaults).
        baseline: the method the others' probability of improvement is measured against (None:
            none until one is picked).
    """

    def __init__(
        self,
        model: AblationModel,
        games: Sequence[str] | None = None,
        methods: Sequence[str] | None = None,
        paper: Sequence[str] | None = None,
        metrics: Sequence[str] = DEFAULT_EXPLORER_METRICS,
        baseline: str | None = None,
    ) -> None:
        import ipywidgets as widgets

        self.model = model
        layout = widgets.Layout(width="240px", height="160px")
        self.games = widgets.SelectMultiple(
            options=model.games,
            value=tuple(games or model.default_games()),
            description="games",
            layout=layout,
        )
        self.methods = widgets.SelectMultiple(
            options=model.methods,
            value=tuple(model.methods if methods is None else methods),
            description="our runs",
            layout=layout,
        )
        self.paper = widgets.SelectMultiple(
            options=model.paper_configs,
            value=tuple(model.default_paper() if paper is None else paper),
            description="paper",
            layout=layout,
        )
        self.metrics = widgets.SelectMultiple(
            options=list(METRICS), value=tuple(metrics), description="metrics", layout=layout
        )
        model.check_baseline(baseline)
        scored = list(dict.fromkeys(model.scores["method"]))
        self.baseline = widgets.Dropdown(
            options=[("none", None), *[(m, m) for m in scored]],
            value=baseline,
            description="baseline",
        )
        self.notes = widgets.HTML()
        self.interval = LiveFigure(widget=False)
        self.table = LiveTable(
            title=AGGREGATE_TABLE_TITLE["HNS"],
            empty="no aggregate to show: select at least one game and one metric",
        )
        self.improvement = LiveTable(
            title=IMPROVEMENT_TITLE,
            empty="pick a baseline to see each method's probability of improvement over it",
        )
        self.per_game = LiveFigure(widget=False)
        self.probe_table = LiveTable(
            title=PROBE_TABLE_TITLE,
            empty="no probe results for these runs' encoders (sgi-lab probe PRETRAINING_RUN "
            "--data STORE, or probe_runs: a probe study's folder)",
        )
        self.probe_bars = LiveFigure(widget=False)
        for control in (self.games, self.methods, self.paper, self.metrics, self.baseline):
            control.observe(self._on_change, names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.games, self.methods, self.paper, self.metrics]),
                self.baseline,
                self.notes,
            ]
        )
        self.update()

    def _on_change(self, _change: dict[str, Any]) -> None:
        self.update()

    def update(self) -> None:
        """Recompute the view from the controls and redraw the figures."""
        if not self.games.value or not self.metrics.value:
            message = "select at least one game and one metric"
            self.notes.value = f"<b>{message}</b>"
            # nothing stale under the message: every figure and table says it too
            blank = AblationView(pd.DataFrame(), pd.DataFrame(), [], [], [message])
            figures = ablation_figures(blank)
            self.interval.replace(figures["interval"])
            self.table.replace(pd.DataFrame())
            self.per_game.replace(figures["per_game"])
            self.probe_table.replace(pd.DataFrame())
            self.probe_bars.replace(probe_figure(pd.DataFrame(), empty=message))
            self.improvement.replace(pd.DataFrame())
            return
        self.view = self.model.select(
            self.games.value,
            self.methods.value,
            self.paper.value,
            self.metrics.value,
            baseline=self.baseline.value,
        )
        figures = ablation_figures(self.view)
        self.interval.replace(figures["interval"])
        score = self.view.normalization
        self.table.replace(
            aggregate_frame(self.view.aggregates, self.view.metrics, self.view.methods, 3, score),
            title=AGGREGATE_TABLE_TITLE[score],
        )
        improvement = self.view.improvement
        self.improvement.replace(
            improvement_frame(improvement) if len(improvement) else pd.DataFrame(),
            title=f"{IMPROVEMENT_TITLE}, on the {score}",
        )
        self.per_game.replace(figures["per_game"])
        probed = list(dict.fromkeys(self.view.probes["method"]))
        self.probe_table.replace(probe_table(self.view.probes, probed))
        self.probe_bars.replace(probe_figure(self.view.probes))
        games = len(self.games.value)
        self.notes.value = "<br>".join(
            [
                f"{games} game{'s' * (games != 1)} selected",
                *self.view.notes,
                *([f"our runs: {self.view.protocol_note}"] if self.view.protocol_note else []),
            ]
        )

    def _ipython_display_(self) -> None:
        from IPython.display import display

        # The figures are shown one by one (display handles, or FigureWidgets when anywidget is
        # installed) rather than inside an ipywidgets.Output, which headless runs can hang on.
        display(self.widget)
        self.interval.show()
        self.table.show()
        self.improvement.show()
        self.per_game.show()
        self.probe_table.show()
        self.probe_bars.show()
