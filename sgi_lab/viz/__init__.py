"""Figures and tables, each a function of the frames that `sgi_lab` computes.

Plotly figures used by the notebooks: training curves from metrics.jsonl (`training`) or live
(`live`), finetuning learning curves (`learning`), aggregate scores (`aggregates`), the ablation
explorer's (`ablations`), stores (`datasets`), goal rewards (`goal_rewards`), representations
(`representations`), probe scores (`probes`), what they share (`common`), HTML tables
(`tables`) and a report's printable tables (`report_tables`). Standalone SVG figures that render
on GitHub beside a study's Markdown, each written by the one writer that replaces only a figure
of its own kind (`svg`): the forest plot of a study's contrasts (`forest`), learning curves per
method (`method_curves`), IQM by budget (`budget_figure`), a study run twice (`rerun_figure`),
the demo's curves (`episode_curves`). Markdown tables (`markdown`) and a finetuning study's
tables (`study_tables`).
"""

from sgi_lab.viz.ablations import ablation_figures, per_game_hns_figure
from sgi_lab.viz.aggregates import aggregate_table, interval_plot, per_game_bar
from sgi_lab.viz.common import chance_lines
from sgi_lab.viz.datasets import coverage_figure, frame_strip, store_summary_figure
from sgi_lab.viz.goal_rewards import frames_figure, goal_trajectory_figure, nearest_frames_figure
from sgi_lab.viz.learning import compare_learning_curves, learning_curve
from sgi_lab.viz.live import LiveCurves, LiveFigure
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
