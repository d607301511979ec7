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

Each name below loads its module when first used (`__getattr__`): importing one module, say
`tables`, loads that module's dependencies only, and the package itself loads none (plotly,
pandas and scipy wait for a figure).
"""

from sgi_lab.base.lazy import lazy_exports

# name -> the module that defines it, imported on first use
_HOMES = {
    "ablation_figures": "ablations",
    "per_game_hns_figure": "ablations",
    "aggregate_table": "aggregates",
    "interval_plot": "aggregates",
    "per_game_bar": "aggregates",
    "chance_lines": "common",
    "coverage_figure": "datasets",
    "frame_strip": "datasets",
    "store_summary_figure": "datasets",
    "frames_figure": "goal_rewards",
    "goal_trajectory_figure": "goal_rewards",
    "nearest_frames_figure": "goal_rewards",
    "compare_learning_curves": "learning",
    "learning_curve": "learning",
    "LiveCurves": "live",
    "LiveFigure": "live",
    "compare_stores_figure": "representations",
    "diversity_figure": "representations",
    "embedding_grid": "representations",
    "start_distance_figure": "representations",
    "stores_table": "representations",
    "LiveTable": "tables",
    "aggregate_frame": "tables",
    "results_frame": "tables",
    "FINETUNE_CURVES": "training",
    "PRETRAIN_CURVES": "training",
    "compare_runs": "training",
    "figure_widget_available": "training",
    "summary_table": "training",
    "training_curves": "training",
}

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


# NAME is imported from its module when first asked for (`sgi_lab.base.lazy`).
__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals(), __all__)
