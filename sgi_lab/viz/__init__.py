"""Plotly figures used by the notebooks; each takes the frames that `sgi_lab` computes."""

from sgi_lab.viz.ablations import ablation_figures, per_game_hns_figure
from sgi_lab.viz.aggregates import aggregate_table, interval_plot, per_game_bar
from sgi_lab.viz.common import chance_lines
from sgi_lab.viz.datasets import coverage_figure, frame_strip, store_summary_figure
from sgi_lab.viz.goal_rewards import frames_figure, goal_trajectory_figure, nearest_frames_figure
from sgi_lab.viz.learning import compare_learning_curves, learning_curve
from sgi_lab.viz.representations import (
    compare_stores_figure,
    diversity_figure,
    embedding_grid,
    start_distance_figure,
    stores_table,
)
from sgi_lab.viz.tables import LiveTable, aggregate_frame, results_frame
from sgi_lab.viz.training import (
    FINETUNE_CURVES,
    PRETRAIN_CURVES,
    LiveCurves,
    LiveFigure,
    compare_runs,
    figure_widget_available,
    summary_table,
    training_curves,
)

__all__ = [
    "FINETUNE_CURVES",
    "PRETRAIN_CURVES",
    "LiveCurves",
    "LiveFigure",
    "LiveTable",
    "ablation_figures",
    "aggregate_frame",
    "aggregate_table",
    "chance_lines",
    "compare_learning_curves",
    "compare_runs",
    "compare_stores_figure",
    "coverage_figure",
    "diversity_figure",
    "embedding_grid",
    "figure_widget_available",
    "frame_strip",
    "frames_figure",
    "goal_trajectory_figure",
    "interval_plot",
    "learning_curve",
    "nearest_frames_figure",
    "per_game_bar",
    "per_game_hns_figure",
    "results_frame",
    "start_distance_figure",
    "store_summary_figure",
    "stores_table",
    "summary_table",
    "training_curves",
]
