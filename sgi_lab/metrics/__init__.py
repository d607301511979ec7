"""Scores and their statistics: human-normalized scores and the comparison with the paper
(`hns`), the MinAtar score (`minatar`), aggregate metrics with bootstrap CIs, seed pairs and t
intervals (`aggregate`), the paper's own tables (`paper`), the evaluation protocol
(`protocol`), a study's pre-registered test (`hypothesis`) and its power (`power`).

Typical use: build a ``(num_runs, num_games)`` HNS matrix from raw returns with `hns_matrix`,
aggregate it with `aggregate_with_ci`, and set it beside the paper with `paper_aggregates` /
`compare_to_paper`.
"""

from sgi_lab.metrics.aggregate import (
    DEFAULT_METRICS,
    METRIC_LABELS,
    METRICS,
    aggregate_scores,
    aggregate_with_ci,
    games_above_human,
    games_above_zero,
    iqm,
    mean_hns,
    median_hns,
    metric_label,
    optimality_gap,
    probability_of_improvement,
    probability_of_improvement_with_ci,
    seed_pairs,
)
from sgi_lab.metrics.hns import (
    canonical_game,
    compare_to_paper,
    hns_matrix,
    human_normalized_score,
    human_score,
    per_game_hns,
    random_score,
)
from sgi_lab.metrics.minatar import (
    SCORE_TITLES,
    SCORE_TOP,
    minatar_normalized_score,
    minatar_random_score,
    minatar_reference_score,
    normalization_name,
    normalized_score,
    score_meaning,
    score_references,
)
from sgi_lab.metrics.paper import (
    paper_aggregates,
    paper_clique_scores,
    paper_column_for,
    paper_config_info,
    paper_configs,
    paper_notes,
    paper_per_game,
    paper_per_game_table,
    paper_tables,
)
from sgi_lab.metrics.protocol import (
    PAPER_PROTOCOL,
    EvalProtocol,
    comparability_note,
    protocol_of,
)

__all__ = [
    "DEFAULT_METRICS",
    "PAPER_PROTOCOL",
    "EvalProtocol",
    "comparability_note",
    "protocol_of",
    "METRICS",
    "METRIC_LABELS",
    "aggregate_scores",
    "aggregate_with_ci",
    "canonical_game",
    "compare_to_paper",
    "games_above_human",
    "games_above_zero",
    "hns_matrix",
    "human_normalized_score",
    "human_score",
    "iqm",
    "mean_hns",
    "minatar_normalized_score",
    "minatar_random_score",
    "minatar_reference_score",
    "normalization_name",
    "normalized_score",
    "score_meaning",
    "median_hns",
    "metric_label",
    "SCORE_TITLES",
    "SCORE_TOP",
    "optimality_gap",
    "paper_aggregates",
    "paper_clique_scores",
    "paper_column_for",
    "paper_config_info",
    "paper_configs",
    "paper_notes",
    "paper_per_game",
    "paper_per_game_table",
    "paper_tables",
    "per_game_hns",
    "probability_of_improvement",
    "probability_of_improvement_with_ci",
    "seed_pairs",
    "random_score",
    "score_references",
]
