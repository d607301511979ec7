"""Live figures: a plotly figure redrawn in place as a run goes (`LiveFigure`), and training
curves fed row by row by a trainer's callback, with a progress line (`LiveCurves`)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from sgi_lab.base.files import read_jsonl
from sgi_lab.runs.status import read_status
from sgi_lab.viz.common import title_above_panels
from sgi_lab.viz.probes import fit_probe_panel
from sgi_lab.viz.training import (
    EMPTY_PANEL_TEXT,
    PANEL_TITLE_SIZE,
    PRETRAIN_CURVES,
    X_TITLES,
    _axis_unit,
    _show,
    _subplots,
    _title_axes,
    figure_widget_available,
    metric_title,
    training_curves,
    widget_width,
)

__all__ = ["LiveCurves", "LiveFigure"]


class LiveFigure:
    """A figure that callbacks can replace after it is shown.

    ``figure`` is a ``FigureWidget`` when anywidget is installed (changes show at once, and
    ``widget`` can sit in an ipywidgets layout); else a plain ``go.Figure`` shown through an
    IPython display handle that every `replace` updates (``widget`` is None). Either way
    ``figure.data`` always holds what is drawn, so tests can read it.

    Args:
        figure: the initial figure (default: empty).
        widget: False: always the display handle. plotly's FigureWidget sends its 5 MB
            plotly.js bundle as each widget's ESM, and anywidget (0.11) gives a model 2 s to
            load it (``AbortSignal.timeout(2000)``): on a loaded machine the figure stays
            blank ("[anywidget] Failed to initialize model"); a display handle does not.
    """

    def __init__(self, figure: go.Figure | None = None, widget: bool = True) -> None:
        figure = figure if figure is not None else go.Figure()
        if widget and figure_widget_available():
            self.figure = go.FigureWidget(widget_width(go.Figure(figure)))
            self.widget = self.figure
        else:
            self.figure = go.Figure(figure)
            self.widget = None
        self._handle = None
        self._shown = False

    def show(self) -> None:
        """Display the figure; later `replace` calls redraw it in place."""
        from IPython.display import display

        self._shown = True
        if self.widget is not None:
            display(self.widget)
        else:
            self._handle = _show(self.figure)

    def replace(self, figure: go.Figure) -> None:
        """Show ``figure`` instead, where the old one was."""
        if self.widget is not None and not self._shown:
            # Not on screen yet: a new widget starts from the whole figure as its state, rather
            # than from update messages sent before any view exists.
            self.figure = self.widget = go.FigureWidget(widget_width(go.Figure(figure)))
        elif self.widget is not None:
            figure = widget_width(go.Figure(figure))
            new_layout = figure.layout.to_plotly_json()
            # A relayout merges: keys the new layout lacks (shapes, annotations, extra axes)
            # would stay drawn unless cleared explicitly.
            # Cleared first, while the Python side still holds them: a relayout sent after the
            # new layout is assigned finds nothing to change and never reaches the browser
            # (a goal line stayed drawn after the goal moved to another episode).
            stale = {k: None for k in self.figure.layout.to_plotly_json() if k not in new_layout}
            if stale:
                self.figure.plotly_relayout(stale)
            with self.figure.batch_update():
                self.figure.data = []
                self.figure.layout = figure.layout
                self.figure.add_traces(list(figure.data))
        else:
            self.figure = go.Figure(figure)
            self.refresh()

    def refresh(self) -> None:
        """Redraw after ``figure`` was changed in place (a no-op for a FigureWidget)."""
        if self._handle is not None:
            _show(self.figure, self._handle)

    def _ipython_display_(self) -> None:
        self.show()


class LiveCurves:
    """Metric curves that grow while a trainer runs; pass :meth:`update` as its callback.

    The figure is a plain ``go.Figure`` shown through an IPython display handle, redrawn in
    place, never a FigureWidget: anywidget (0.11) gives a widget 2 s to load plotly's 5 MB
    bundle, and on a loaded machine the curves stayed blank (as `LiveFigure` with
    ``widget=False``, the explorers' figures).

    Args:
        keys: metrics to plot, one panel each; keys never seen stay out of the final figure.
        columns: panels per row.
        title: figure title.
        min_interval_s: the figure is redrawn at most this often.
        x: the row key on the x axis.
        x_title: the x axis's title (default: from ``x``, e.g. ``"step"``).
        total: the steps the trainer will run; with it a progress line above the figure says
            the step reached, of how many, and the rate (`progress_line`), updated in place,
            so a notebook saved by papermill shows where training ended, not a stale bar.
        label: what trains, at the start of the progress line (``"pretraining"``).
    """

    def __init__(
        self,
        keys: Sequence[str] = PRETRAIN_CURVES,
        columns: int = 4,
        title: str | None = None,
        min_interval_s: float = 2.0,
        x: str = "step",
        x_title: str | None = None,
        total: int | None = None,
        label: str = "training",
    ) -> None:
        self.keys = list(keys)
        self.columns = columns
        self.title = title
        self.x = x
        self.x_title = x_title or X_TITLES.get(x, x)
        self.min_interval_s = min_interval_s
        self.rows: list[dict[str, Any]] = []
        self._figure = self._empty_figure()
        self._handle = None
        self._last_draw = 0.0
        self._followed = 0
        self.total = total
        self.label = label
        self._started = time.monotonic()
        self._first: tuple[float, float] | None = None  # (time, step) of the first row seen
        self._progress_handle = None
        self._earlier = False

    @property
    def figure(self) -> go.Figure:
        """The live figure: one trace per key, in the order of ``keys``."""
        return self._figure

    def _empty_figure(self) -> go.Figure:
        fig = _subplots(self.keys, self.columns)
        for i, key in enumerate(self.keys):
            fig.add_trace(
                go.Scatter(x=[], y=[], mode="lines+markers", name=key, marker={"size": 4}),
                row=i // self.columns + 1,
                col=i % self.columns + 1,
            )
            # an empty panel says so in words (removed at its first value), not bare axes
            axis = "" if i == 0 else str(i + 1)
            fig.add_annotation(
                text=EMPTY_PANEL_TEXT.get(key, "nothing logged yet"),
                xref=f"x{axis} domain",
                yref=f"y{axis} domain",
                x=0.5,
                y=0.5,
                showarrow=False,
                font={"color": "gray"},
                name=f"empty:{key}",
            )
        _title_axes(fig, self.keys, self.columns, self.x_title)
        fig.update_layout(
            **title_above_panels(self.title, PANEL_TITLE_SIZE),
            showlegend=False,
            template="plotly_white",
        )
        return fig

    def progress_line(self, done: bool = False) -> str:
        """``"pretraining: step 120 of 200 (60%), 15.2 steps/s, 8 s"``; with ``done``,
        ``"pretraining: finished at step 200 of 200 in 13 s (15.3 steps/s)"``."""
        step = self.rows[-1].get(self.x) if self.rows else None
        of = f" of {self.total:,}" if self.total else ""
        elapsed = f"{time.monotonic() - self._started:,.0f} s"
        if step is None:
            steps = f", {self.total:,} steps" if self.total else ""
            return f"{self.label}: {'nothing logged' if done else 'starting'}{steps}"
        rate = ""
        if self._first is not None and step > self._first[1]:
            seconds = time.monotonic() - self._first[0]
            rate = f"{(step - self._first[1]) / max(seconds, 1e-9):,.1f} steps/s"
        if self._earlier:  # its rows were read back at once: no rate to tell
            return f"{self.label}: finished earlier at step {step:,}{of}; nothing trained now"
        if done:
            tail = f" ({rate})" if rate else ""
            return f"{self.label}: finished at step {step:,}{of} in {elapsed}{tail}"
        share = f" ({100 * step / self.total:.0f}%)" if self.total else ""
        return ", ".join(
            [f"{self.label}: step {step:,}{of}{share}", *([rate] if rate else []), elapsed]
        )

    def _show_progress(self, done: bool = False) -> None:
        if self.total is None:
            return
        bundle = {"text/plain": self.progress_line(done)}
        if self._progress_handle is None:
            from IPython.display import display

            self._progress_handle = display(bundle, raw=True, display_id=True)
        else:
            self._progress_handle.update(bundle, raw=True)

    def show(self) -> None:
        """Display the (empty) figure; later updates draw into it."""
        self._started = time.monotonic()
        self._show_progress()
        self._handle = _show(self._figure)
        self._last_draw = time.monotonic()

    def show_for(self, run_dir: str | os.PathLike) -> bool:
        """Display the figure for a trainer about to run into ``run_dir``. When that run
        finished earlier (the trainer will return at once, training nothing), say so in the
        title and draw its recorded curves from its metrics.jsonl instead of empty panels.

        Returns:
            True when the run had finished earlier.
        """

        path = Path(run_dir)
        status = read_status(path) or {}
        finished = status.get("state") == "finished"
        if finished:
            self._earlier = True
            note = "finished earlier: showing its recorded curves (nothing is trained now)"
            self.title = f"{self.title}<br><sup>{note}</sup>" if self.title else note
            self.figure.update_layout(**title_above_panels(self.title, PANEL_TITLE_SIZE))
            print(f"{path}: {note}; a new out_dir (or name) trains a new run")
        self.show()
        if finished:
            self.poll(path / "metrics.jsonl")
            self._draw()
        return finished

    def update(self, row: Mapping[str, Any]) -> None:
        """Add one metrics row (the trainer's callback)."""
        self.rows.append(dict(row))
        x = row.get(self.x, len(self.rows))
        if self._first is None and isinstance(x, (int, float)):
            self._first = (time.monotonic(), float(x))
        fig = self.figure
        fit_probe_panel(fig, self.keys, row, metric_title, _axis_unit)  # R^2 on MinAtar
        filled = []
        for trace, key in zip(fig.data, self.keys):
            value = row.get(key)
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                continue
            if not trace.x:
                filled.append(f"empty:{key}")
            trace.x = (*(trace.x or ()), x)
            trace.y = (*(trace.y or ()), value)
        if filled:
            fig.layout.annotations = [a for a in fig.layout.annotations if a.name not in filled]
        if time.monotonic() - self._last_draw >= self.min_interval_s:
            self._show_progress()
            if self._handle is not None:
                self._draw()
            self._last_draw = time.monotonic()

    def follow(self, metrics_path: str | os.PathLike, every: int = 100) -> Callable[..., None]:
        """A trainer callback (any signature) that feeds this figure the rows appended to
        ``metrics_path`` since the last look, reading the file every ``every`` calls.

        For trainers whose callback does not carry metrics rows, e.g.
        ``finetune(config, out, callback=curves.follow(out / "metrics.jsonl"))``.
        """
        path = Path(metrics_path)
        calls = 0

        def poll(*_args: Any, **_kwargs: Any) -> None:
            nonlocal calls
            calls += 1
            if calls % every == 0:
                self.poll(path)

        return poll

    def poll(self, metrics_path: str | os.PathLike) -> None:
        """Feed the rows of ``metrics_path`` not seen yet (a rewritten, shorter file restarts)."""

        rows = read_jsonl(metrics_path)
        if len(rows) < self._followed:  # the trainer resumed and dropped rows
            self._followed = 0
        for row in rows[self._followed :]:
            self.update(row)
        self._followed = len(rows)

    def _draw(self) -> None:
        if self._handle is not None:
            _show(self._figure, self._handle)
            self._last_draw = time.monotonic()

    def finish(self) -> go.Figure:
        """Draw the last rows and return the final figure (only panels that got data).

        The output is redrawn as the final figure, so that the curves stay in the notebook
        file (papermill runs included) after the kernel is gone.
        """
        self._show_progress(done=True)
        # What stays in the notebook: the panels that got data, and in words those that did
        # not (probe F1 with probing off), never an empty panel.
        final = training_curves(
            self.rows, self.keys, self.columns, self.title, x=self.x, x_title=self.x_title
        )
        if self._handle is not None:
            _show(final, self._handle)
        return final

    @property
    def frame(self) -> pd.DataFrame:
        """Every row received, as a DataFrame."""
        return pd.DataFrame(self.rows)
