"""Plotly figures used by the notebooks; each takes the frames that `sgi_lab.metrics` returns."""

from sgi_lab.viz.aggregates import aggregate_table, interval_plot, per_game_bar

__all__ = ["aggregate_table", "interval_plot", "per_game_bar"]
