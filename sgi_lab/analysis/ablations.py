"""The ablation explorer: our finetuning runs beside the paper's reported results.

The model is a function from a *selection* (games, our methods, paper configurations, metrics)
to tidy data, and from that to figures:

* `load_run_scores` reads the ``eval.json`` of finetuning run folders into one row per run;
* `run_aggregates` turns them into aggregate HNS with stratified bootstrap CIs;
* `paper_aggregate_rows` gives the paper's rows (``"SGI-M (paper)"``, ``"Frozen (paper)"``, ...):
  as printed (tab:IQMs with its CIs first) when all 26 games are selected, else recomputed from
  the paper's per-game means over the selected games (no CI: the paper gives no per-seed scores);
* `sgi_lab.analysis.ablation_probes` gives the probe F1 of the encoders behind each method
  (linear probes of game state, ``sgi-lab probe``), shown beside the scores;
* `AblationModel.select` joins them; `AblationExplorer` puts ipywidgets on top, and its callbacks
  can be driven from code (set a widget's ``value``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.analysis.ablation_probes import (
    load_probe_scores,
    probe_figure,
    probe_summary,
    probe_table,
)
from sgi_lab.analysis.paper_column import PaperColumn
from sgi_lab.analysis.report import read_run, scores_by_seed, seed_pair_cells
from sgi_lab.base.paths import close_names
from sgi_lab.envs import canonical_env_game
from sgi_lab.envs.games import ATARI_100K_GAMES, canonical_game
from sgi_lab.envs.minatar import MINATAR_GAMES
from sgi_lab.metrics import (
    METRICS,
    aggregate_scores,
    aggregate_with_ci,
    human_normalized_score,
    normalization_name,
    normalized_score,
    paper_aggregates,
    paper_configs,
    paper_per_game,
    probability_of_improvement_with_ci,
    protocol_of,
    seed_pairs,
)
from sgi_lab.metrics.protocol import FRAME_SKIP, PAPER_PROTOCOL, EvalProtocol, comparability_note
from sgi_lab.runs.status import run_folders
from sgi_lab.viz.ablations import ablation_figures
from sgi_lab.viz.tables import LiveTable, aggregate_frame
from sgi_lab.viz.training import LiveFigure

__all__ = [
    "DEFAULT_EXPLORER_METRICS",
    "PAPER_OBJECTIVE_ABLATIONS",
    "PAPER_SUFFIX",
    "AblationExplorer",
    "AblationModel",
    "AblationView",
    "experiment_finetune_folders",
    "find_runs",
    "load_run_scores",
    "paper_aggregate_rows",
    "paper_method",
    "run_aggregates",
    "capped_label",
    "capped_steps",
    "improvement_frame",
    "improvement_over",
    "method_protocols",
    "scores_protocol_note",
    "selection_normalization",
]

PAPER_SUFFIX = " (paper)"
PROBE_TABLE_TITLE = (
    "probe F1 of the encoders behind each method: test F1 of linear probes of game state, "
    "mean over seeds (95% CI); none yet: sgi-lab probe PRETRAINING_RUN --data STORE"
)
DEFAULT_EXPLORER_METRICS = ("iqm", "median", "mean")
AGGREGATE_TABLE_TITLE = {
    "HNS": "aggregate human-normalized scores (95% CI)",
    "MinAtar score": "aggregate MinAtar scores (0 random, 1 DQN; 95% CI)",
}
IMPROVEMENT_TITLE = (
    "probability of improvement over the baseline: a run of the method beats a run of the "
    "baseline on a random selected game (ties half; 95% stratified bootstrap CI); and each "
    "run against the baseline's run of the same game and seed (two-sided sign test)"
)
PAPER_OBJECTIVE_ABLATIONS = ("SGI-M", "S+I", "G+I", "S+G", "I", "G", "S", "SGI-None")
"""The paper's pretraining-objective ablation (tab:IQMs): SGI-M, each objective pair and single
objective, and no pretraining."""
# Where a printed aggregate is looked up first: tab:IQMs has CIs; then the main tables.
PAPER_TABLE_ORDER = (
    "tab:IQMs",
    "tab:HNS",
    "tab:controls_hns",
    "tab:finetune_controls_hns",
    "tab:ssl_ft",
    "tab:all_scores",
    "tab:all_ft_control_scores",
    "tab:all_abl_scores",
)


def paper_method(config: str) -> str:
    """How a paper configuration is named among our methods: ``"SGI-M (paper)"``."""
    return f"{config}{PAPER_SUFFIX}"


# -- our runs -----------------------------------------------------------------------------------


EXPERIMENT_STATE = "experiment.json"
"""The file that marks an experiment folder (``sgi-lab experiment``): its task states."""


def find_runs(root: str | os.PathLike = "outputs/runs", pattern: str = "*") -> list[Path]:
    """Evaluated runs under ``root``: its run folders (`sgi_lab.runs.status.run_folders`: ``root``
    itself when it is one, else every run below it) with an eval.json, whose folder name
    matches ``pattern``.

    ``root`` may be an experiment folder (``outputs/experiments/NAME``, written by
    ``sgi-lab experiment``): then only its finetuning agents are returned, those of the
    finetuning tasks its ``experiment.json`` lists (each ``<ft>__<pretraining>/<Game>__s<seed>``),
    and never a run copied beside them.
    """
    folders = experiment_finetune_folders(root)
    searched = folders if folders is not None else [Path(root)]
    return sorted(
        {
            run
            for folder in searched
            for run in run_folders(folder)
            if (run / "eval.json").is_file() and run.match(pattern)
        }
    )


def experiment_finetune_folders(root: str | os.PathLike) -> list[Path] | None:
    """The finetuning task folders of an experiment folder (from its ``experiment.json``), or
    None when ``root`` is not an experiment folder. Folders are taken relative to ``root``, so
    an experiment folder that was moved or copied still finds its runs."""
    root = Path(root)
    try:
        state = json.loads((root / EXPERIMENT_STATE).read_text())
    except (OSError, ValueError):
        return None
    tasks = state.get("tasks") if isinstance(state, dict) else None
    if not isinstance(tasks, dict):
        return None
    # A population split into parts (max_agents) has tasks ``finetune/X/part1of2``, ...: all of
    # them write into finetune/X.
    folders = [
        root / re.sub(r"/part\d+of\d+$", "", task_id)
        for task_id, task in tasks.items()
        if task.get("kind") == "finetune"
    ]
    return list(dict.fromkeys(folders))


def load_run_scores(
    run_dirs: Sequence[str | os.PathLike] | dict[str, Sequence[str | os.PathLike]],
) -> pd.DataFrame:
    """One row per evaluated run: ``method, run, game, seed, score, hns, normalization``.

    Args:
        run_dirs: finetuning run folders (labelled by `sgi_lab.analysis.report.read_run`), or
            ``{method: folders}``.

    Returns:
        ``score`` is the mean raw evaluation return (eval.json's ``mean``); ``hns`` its
        normalised score, named by ``normalization``: HNS for Atari, the MinAtar score
        (`sgi_lab.metrics.minatar`) for a MinAtar game; measured over
        ``episodes`` episodes capped at ``max_frames`` raw frames (None: no cap or not recorded);
        ``paper_config`` and ``paper_reason`` are the run's paper column and why
        (`sgi_lab.analysis.paper_column.paper_column`); folders without an eval.json are skipped.
    """
    if isinstance(run_dirs, dict):
        labelled = [(m, read_run(p)) for m, paths in run_dirs.items() for p in paths]
    else:
        labelled = [(run.label, run) for run in map(read_run, run_dirs)]
    records = []
    for method, run in labelled:
        if not run.evaluation:
            continue
        evaluation = run.evaluation
        score = float(evaluation["mean"] if "mean" in evaluation else np.mean(evaluation["scores"]))
        column = run.paper_column
        records.append(
            {
                "method": method,
                "run": run.path.name,
                "game": run.game,
                "seed": run.seed or 0,
                "score": score,
                "hns": float(normalized_score(run.game, score)),
                "normalization": normalization_name(run.game),
                "episodes": evaluation.get("episodes", len(evaluation.get("scores") or []) or None),
                "max_frames": evaluation.get("max_frames"),
                "paper_config": column.config,
                "paper_reason": column.reason,
            }
        )
    columns = ["method", "run", "game", "seed", "score", "hns", "normalization", "episodes"]
    columns += ["max_frames", "paper_config", "paper_reason"]
    return pd.DataFrame(records, columns=columns)


def scores_protocol_note(scores: pd.DataFrame) -> str | None:
    """The evaluation protocol of ``scores`` (`load_run_scores`) and whether the paper's
    numbers are comparable with it (`sgi_lab.metrics.comparability_note`); None without runs."""
    if scores.empty:
        return None
    evaluations = [
        {"episodes": e, "max_frames": None if pd.isna(m) else int(m)}
        for e, m in zip(scores["episodes"], scores["max_frames"])
        if not pd.isna(e)
    ]
    return comparability_note(protocol_of(evaluations))


CAPPED_MARK = "capped at"


def capped_steps(protocol: EvalProtocol | None) -> int | None:
    """The agent-step cap of an evaluation whose episodes were cut shorter than the paper's
    (108,000 frames), else None: a cut game scores what it had when it was cut (Pong: -13
    after 500 steps rather than -21), so such a score is no result beside uncut ones."""
    if protocol is None or protocol.max_frames is None:
        return None
    if protocol.max_frames >= PAPER_PROTOCOL.max_frames:
        return None
    return protocol.max_frames // FRAME_SKIP


def method_protocols(scores: pd.DataFrame) -> dict[str, EvalProtocol | None]:
    """``{method: the evaluation protocol of its runs}`` (the weakest when they differ)."""
    out: dict[str, EvalProtocol | None] = {}
    for method, part in scores.groupby("method", sort=False):
        out[str(method)] = protocol_of(
            [
                {"episodes": e, "max_frames": None if pd.isna(m) else int(m)}
                for e, m in zip(part["episodes"], part["max_frames"])
                if not pd.isna(e)
            ]
        )
    return out


def capped_label(method: str, protocol: EvalProtocol | None) -> str:
    """``method``, marked ``"<method> (capped at 500 steps)"`` when its evaluation was capped
    (`capped_steps`): the name every table and figure shows."""
    steps = capped_steps(protocol)
    return method if steps is None else f"{method} ({CAPPED_MARK} {steps:,} steps)"


def selection_normalization(games: Sequence[str]) -> str | None:
    """The normalised score an aggregate over ``games`` is in: ``"HNS"`` (Atari games) or
    ``"MinAtar score"`` (`sgi_lab.metrics.minatar`); None when they mix the two (no aggregate
    then) or there is no game."""
    families = {normalization_name(g) for g in games}
    return families.pop() if len(families) == 1 else None


def mixed_families_note(games: Sequence[str]) -> str:
    """Why nothing is aggregated over ``games`` that mix Atari and MinAtar games."""
    minatar = [g for g in games if normalization_name(g) != "HNS"]
    return (
        f"the selected games mix Atari (HNS) and MinAtar ({', '.join(minatar)}: the MinAtar "
        "score) games: one aggregate never mixes the two; select games of one family"
    )


def _method_matrix(scores: pd.DataFrame, games: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(runs, games) normalised-score matrix (HNS, or the MinAtar score) of one method over the
    selected games it has, runs trimmed to the smallest count per game (the stratified
    bootstrap needs a full matrix)."""
    present = [g for g in games if g in set(scores["game"])]
    if not present:
        return np.zeros((0, 0)), []
    per_game = {
        g: scores[scores["game"] == g].sort_values("seed")["score"].to_numpy() for g in present
    }
    runs = min(len(v) for v in per_game.values())
    raw = np.stack([per_game[g][:runs] for g in present], axis=1)
    return np.asarray(normalized_score(present, raw), dtype=float), present


def run_aggregates(
    scores: pd.DataFrame,
    games: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    metrics: Sequence[str] = DEFAULT_EXPLORER_METRICS,
    reps: int = 2_000,
    seed: int = 0,
) -> tuple[pd.DataFrame, list[str]]:
    """Aggregate normalised scores (HNS, or the MinAtar score: `selection_normalization`) of
    our methods with stratified bootstrap CIs over their runs; games mixing the two give no
    aggregate, and a note says why.

    Args:
        scores: `load_run_scores` output.
        games: games to aggregate over (default: all in ``scores``).
        methods: methods to keep (default: all).
        metrics: names from `sgi_lab.metrics.METRICS`.
        reps: bootstrap resamples.
        seed: bootstrap seed.

    Returns:
        ``(tidy frame with method, metric, value, lower, upper, runs, games, source; notes)``:
        a method without runs on every selected game is left out (a 1-game score is no
        26-game aggregate), and a note says which games it has.
    """
    columns = ["method", "metric", "value", "lower", "upper", "runs", "games", "source"]
    if scores.empty:
        return pd.DataFrame(columns=columns), []
    games = [canonical_env_game(g) for g in (games or list(dict.fromkeys(scores["game"])))]
    methods = list(methods) if methods is not None else list(dict.fromkeys(scores["method"]))
    frames, notes = [], []
    families = sorted({normalization_name(g) for g in games})
    if len(families) > 1:  # one aggregate never mixes HNS with the MinAtar score
        return pd.DataFrame(columns=columns), [mixed_families_note(games)]
    for method in methods:
        matrix, present = _method_matrix(scores[scores["method"] == method], games)
        if not present:
            notes.append(f"{method}: no run on the selected games")
            continue
        if len(present) < len(games):
            # An aggregate over fewer games is another number: never beside the others.
            notes.append(
                f"{method}: runs on {len(present)} of {len(games)} selected games "
                f"({', '.join(present)}): left out of the aggregates; select only its games "
                "to compare it"
            )
            continue
        if matrix.shape[0] > 1:
            df = aggregate_with_ci({method: matrix}, metrics, reps=reps, seed=seed)
        else:  # one run per game: a bootstrap over runs has nothing to resample
            df = aggregate_scores({method: matrix}, metrics).assign(lower=np.nan, upper=np.nan)
        frames.append(df.assign(runs=matrix.shape[0], games=len(present), source="ours"))
    if not frames:
        return pd.DataFrame(columns=columns), notes
    return pd.concat(frames, ignore_index=True)[columns], notes


IMPROVEMENT_COLUMNS = [
    "method", "baseline", "value", "lower", "upper", "runs", "games", "note",
    "pairs", "above", "below", "level", "sign_p",
]  # fmt: skip


def improvement_over(
    scores: pd.DataFrame,
    baseline: str,
    games: Sequence[str],
    methods: Sequence[str],
    reps: int = 2_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Each method's probability of improvement over ``baseline`` on the selected games
    (`sgi_lab.metrics.probability_of_improvement_with_ci`: a run of the method against a run
    of the baseline on a random game, ties half, with a stratified bootstrap CI).

    Args:
        scores: `load_run_scores` output.
        baseline: one of our methods.
        games: the games compared (one family: `selection_normalization`).
        methods: the methods set against the baseline (the baseline itself is skipped).
        reps: bootstrap resamples.
        seed: bootstrap seed.

    Returns:
        ``method, baseline, value, lower, upper, runs, games, note``: NaN with a note for a
        method (or a baseline) without runs on every selected game, or capped while the
        baseline is not (or the reverse).
    """
    rows = []
    protocols = method_protocols(scores)
    base, present = _method_matrix(scores[scores["method"] == baseline], games)
    base_missing = len(present) < len(games)
    for method in methods:
        if method == baseline:
            continue
        matrix, have = _method_matrix(scores[scores["method"] == method], games)
        row = {"method": method, "baseline": baseline, "runs": matrix.shape[0], "games": len(have)}
        capped = capped_steps(protocols.get(method)) is not None
        if base_missing:
            note = f"{baseline} has runs on {len(present)} of {len(games)} selected games"
        elif len(have) < len(games):
            note = f"runs on {len(have)} of {len(games)} selected games"
        elif capped != (capped_steps(protocols.get(baseline)) is not None):
            note = "one side's evaluation was capped: not compared with whole games"
        else:
            note = ""
        if note:
            rows.append({**row, "value": np.nan, "lower": np.nan, "upper": np.nan, "note": note})
            continue
        (poi,) = probability_of_improvement_with_ci(
            {method: matrix, baseline: base}, pairs=[(method, baseline)], reps=reps, seed=seed
        ).to_dict("records")
        own = scores_by_seed(scores[scores["method"] == method], games)
        rows.append(
            {**row, "note": "", **{k: poi[k] for k in ("value", "lower", "upper")}}
            | seed_pairs(own, scores_by_seed(scores[scores["method"] == baseline], games))
        )
    return pd.DataFrame(rows, columns=IMPROVEMENT_COLUMNS)


def improvement_frame(improvement: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """`improvement_over` as the explorer's table: ``Method``, ``P(> baseline)`` as ``value
    (lower, upper)``, runs and games, and the note."""
    baseline = improvement["baseline"].iloc[0] if len(improvement) else "baseline"
    cells = [
        "" if pd.isna(v) else f"{v:.{digits}f} ({lo:.{digits}f}, {hi:.{digits}f})"
        for v, lo, hi in zip(improvement["value"], improvement["lower"], improvement["upper"])
    ]
    return pd.DataFrame(
        {
            "Method": improvement["method"],
            f"P(> {baseline})": cells,
            "runs per game": improvement["runs"],
            "games": improvement["games"],
            "same seed: above / below / level (sign test p)": seed_pair_cells(improvement),
            "note": improvement["note"],
        }
    )


# -- the paper ----------------------------------------------------------------------------------


def _printed_aggregates() -> pd.DataFrame:
    frames = [paper_aggregates(t, tidy=True) for t in PAPER_TABLE_ORDER]
    df = pd.concat(frames, ignore_index=True).dropna(subset=["value"])
    return df.drop_duplicates(["method", "metric"], keep="first")


def paper_aggregate_rows(
    configs: Sequence[str],
    games: Sequence[str] | None = None,
    metrics: Sequence[str] = DEFAULT_EXPLORER_METRICS,
) -> tuple[pd.DataFrame, list[str]]:
    """The paper's aggregate rows for ``configs``, named ``"<config> (paper)"``.

    With all 26 games (``games`` None or all of them) the printed numbers are used (tab:IQMs
    first, with its 95% CIs), and a metric the paper never printed for a config is recomputed
    from its per-game means. With fewer games every value is recomputed from the per-game means
    over those games: the paper reports no per-seed scores, so these rows have no CI.

    Returns:
        ``(tidy frame with method, metric, value, lower, upper, runs, games, source; notes)``.
    """
    columns = ["method", "metric", "value", "lower", "upper", "runs", "games", "source"]
    games = list(ATARI_100K_GAMES) if not games else [canonical_game(g) for g in games]
    all_games = set(games) == set(ATARI_100K_GAMES)
    printed = _printed_aggregates() if all_games else None
    per_game = set(paper_configs(per_game=True))
    rows, notes = [], []
    for config in configs:
        computed = None
        if config in per_game:
            means = paper_per_game(config).loc[games].to_numpy()[None, :]
            hns = human_normalized_score(games, means)
            computed = aggregate_scores({config: hns}, metrics).set_index("metric")["value"]
        for metric in metrics:
            hit = None
            if printed is not None:
                found = printed[(printed["method"] == config) & (printed["metric"] == metric)]
                hit = None if found.empty else found.iloc[0]
            if hit is not None:
                rows.append(
                    {
                        "method": paper_method(config),
                        "metric": metric,
                        "value": float(hit["value"]),
                        "lower": float(hit["lower"]),
                        "upper": float(hit["upper"]),
                        "runs": 10,
                        "games": len(games),
                        "source": f"paper {hit['table']}",
                    }
                )
            elif computed is not None and metric in computed.index:
                rows.append(
                    {
                        "method": paper_method(config),
                        "metric": metric,
                        "value": float(computed[metric]),
                        "lower": np.nan,
                        "upper": np.nan,
                        "runs": 10,
                        "games": len(games),
                        "source": "paper per-game means",
                    }
                )
        if computed is None and not all_games:
            notes.append(f"{config}: the paper prints only 26-game aggregates for it")
    return pd.DataFrame(rows, columns=columns), notes


# -- the explorer's model -----------------------------------------------------------------------


@dataclass
class AblationView:
    """What one selection shows.

    Attributes:
        aggregates: tidy ``method, metric, value, lower, upper, runs, games, source``.
        per_game: ``game, method, hns`` (ours: mean over runs; paper: its per-game mean).
        methods: the rows, in display order (ours first, then the paper's).
        metrics: the metrics shown.
        notes: what was left out and why (first: "no finetuning runs under ..." when none).
        protocol_note: our runs' evaluation protocol and whether it is the paper's.
        probes: probe F1 of the chosen methods' encoders over the chosen games
            (`sgi_lab.analysis.ablation_probes.probe_summary`: ``method, metric, value, lower,
            upper, seeds, games``; empty without probe results).
        games: the selected games.
        left_out: ``{method: games it has of the selected}`` for our methods left out of the
            aggregates because they lack some of the selected games.
        capped_from: the first row of the capped evaluations (`capped_label`), drawn below
            every uncapped row and apart from them; None when no row is capped or all are.
        normalization: the score every number is in: ``"HNS"`` (Atari games) or
            ``"MinAtar score"`` (`selection_normalization`; HNS when the games mix the two,
            which then have no aggregate).
        improvement: `improvement_over` the chosen baseline (empty without one).
    """

    aggregates: pd.DataFrame
    per_game: pd.DataFrame
    methods: list[str]
    metrics: list[str]
    notes: list[str] = field(default_factory=list)
    protocol_note: str | None = None
    probes: pd.DataFrame = field(default_factory=pd.DataFrame)
    games: list[str] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)
    capped_from: str | None = None
    normalization: str = "HNS"
    improvement: pd.DataFrame = field(default_factory=pd.DataFrame)


class AblationModel:
    """Selections of games, our methods, paper configurations and metrics -> `AblationView`.

    Args:
        scores: `load_run_scores` output (may be empty: then only the paper is shown).
        reps: bootstrap resamples for our CIs.
        seed: bootstrap seed.
        source: where the runs were searched (``runs_root``, or the folders searched for it),
            named in the note shown when there are none.
        probes: `sgi_lab.analysis.ablation_probes.load_probe_scores` output: probe F1 of the
            encoders behind the methods; a method with probe results only (a probe study's
            objective) is one of ours too, without scores.
    """

    def __init__(
        self,
        scores: pd.DataFrame | None = None,
        reps: int = 2_000,
        seed: int = 0,
        source: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        probes: pd.DataFrame | None = None,
    ):
        self.scores = scores if scores is not None else load_run_scores([])
        self.probes = probes if probes is not None and not probes.empty else load_probe_scores()
        self.reps = reps
        self.seed = seed
        if source is not None and not isinstance(source, (str, os.PathLike)):
            source = ", ".join(map(str, source))
        self.source = None if source is None else str(source)

    @property
    def games(self) -> list[str]:
        """Every Atari 100k game (paper order), then the MinAtar games when some run or probe
        result is on one (so "all games" means the paper's 26 when there is none)."""
        present = {*self.scores["game"], *self.probes["game"]}
        minatar = [g for g in MINATAR_GAMES if g in present]
        return [*ATARI_100K_GAMES, *(MINATAR_GAMES if minatar else ())]

    @property
    def paper_games(self) -> list[str]:
        """The 26 Atari 100k games the paper reports, its order."""
        return list(ATARI_100K_GAMES)

    @property
    def our_games(self) -> list[str]:
        """The games our runs cover, in `games` order."""
        present = set(self.scores["game"])
        return [g for g in self.games if g in present]

    @property
    def methods(self) -> list[str]:
        """Our methods: run labels, then the objectives with probe results only."""
        return list(dict.fromkeys([*self.scores["method"], *self.probes["method"]]))

    @property
    def paper_configs(self) -> list[str]:
        """Paper configurations with results (the reference rows Random/Human left out)."""
        return [c for c in paper_configs() if c not in ("Random", "Human")]

    def paper_columns(self) -> dict[str, PaperColumn]:
        """``{method: its paper column and why}`` (`sgi_lab.analysis.paper_column.paper_column`,
        the one decision the finetune notebook and ``sgi-lab report`` use too); a method whose runs
        have several gets the first."""
        out: dict[str, PaperColumn] = {}
        if "paper_config" not in self.scores:
            return out
        for method, part in self.scores.groupby("method", sort=False):
            row = part.iloc[0]
            config = None if pd.isna(row["paper_config"]) else str(row["paper_config"])
            out[str(method)] = PaperColumn(config, str(row["paper_reason"]))
        return out

    def default_paper(self) -> list[str]:
        """SGI-M and SGI-None, plus the paper's column of each of our methods where one fits."""
        chosen = ["SGI-M", "SGI-None"]
        for column in self.paper_columns().values():
            if column.config and column.config not in chosen:
                chosen.append(column.config)
        return chosen

    def column_notes(self, methods: Sequence[str] | None = None) -> list[str]:
        """One line per method: the paper column it is compared with and why, or why none."""
        columns = self.paper_columns()
        return [
            f"{m}: paper column {columns[m]}"
            if columns[m].config
            else f"{m}: no paper column: {columns[m].reason}"
            for m in (self.methods if methods is None else methods)
            if m in columns
        ]

    def default_games(self) -> list[str]:
        """The games every one of our methods has runs on (so each is aggregated, none left
        out), else the games our runs cover, else those our probe results cover, else the 26
        Atari games; of one family only (Atari or MinAtar, that of the first such game), as one
        aggregate never mixes HNS with the MinAtar score."""
        covered = [set(part) for _, part in self.scores.groupby("method")["game"]]
        common = set.intersection(*covered) if covered else set()
        probed = set(self.probes["game"])
        games = (
            [g for g in self.games if g in common]
            or self.our_games
            or [g for g in self.games if g in probed]
            or list(ATARI_100K_GAMES)
        )
        return [g for g in games if normalization_name(g) == normalization_name(games[0])]

    def select(
        self,
        games: Sequence[str] | None = None,
        methods: Sequence[str] | None = None,
        paper: Sequence[str] | None = None,
        metrics: Sequence[str] = DEFAULT_EXPLORER_METRICS,
        baseline: str | None = None,
    ) -> AblationView:
        """The data for one selection (None: the defaults); with a ``baseline`` (one of our
        methods), each chosen method's probability of improvement over it (`improvement_over`).
        The paper's rows are Atari's: none beside MinAtar games.

        Raises:
            ValueError: ``baseline`` is none of our scored methods (the closest are named).
        """
        self.check_baseline(baseline)
        games = [canonical_env_game(g) for g in (games or self.default_games())]
        normalization = selection_normalization(games)
        methods = self.methods if methods is None else list(methods)
        paper = self.default_paper() if paper is None else list(paper)
        metrics = list(metrics)
        scored = set(self.scores["method"])
        probe_only = [m for m in methods if m not in scored and m in set(self.probes["method"])]
        ours, notes = run_aggregates(
            self.scores,
            games,
            [m for m in methods if m not in probe_only],
            metrics,
            self.reps,
            self.seed,
        )
        if normalization == "HNS":
            theirs, paper_notes = paper_aggregate_rows(paper, games, metrics)
        else:  # the paper reports Atari only
            theirs, paper_notes = ours.iloc[0:0].copy(), []
            if paper and normalization == "MinAtar score":
                paper_notes = ["no paper row: the paper reports Atari games only"]
        labels = self.labels(methods)
        frames = [f for f in (ours.replace({"method": labels}), theirs) if not f.empty]
        aggregates = pd.concat(frames, ignore_index=True) if frames else ours.iloc[0:0].copy()
        # Capped evaluations are never ranked among uncapped rows: they come last, apart.
        capped = {label for method, label in labels.items() if label != method}
        rows = list(dict.fromkeys(aggregates["method"]))
        order = [m for m in rows if m not in capped] + [m for m in rows if m in capped]
        capped_from = next((m for m in order if m in capped), None)
        if self.scores.empty:
            where = f"under {self.source}" if self.source else "given"
            notes.insert(0, f"no finetuning runs {where}: only the paper's rows are shown")
        chosen = self.scores[self.scores["method"].isin(methods)]
        left_out = self.coverage(methods, games)
        improvement = pd.DataFrame()
        if baseline is not None and normalization is not None:
            scored_methods = [m for m in methods if m in scored]
            improvement = improvement_over(
                self.scores, baseline, games, scored_methods, self.reps, self.seed
            ).replace({"method": labels})
        per_game = self.per_game(games, methods, paper if normalization == "HNS" else [])
        if normalization is None:  # mixed families: no bar set beside another scale's
            per_game = per_game.iloc[0:0]
        # MinAtar runs have no paper column (the paper note above says why)
        columns = self.column_notes(methods) if normalization == "HNS" else []
        return AblationView(
            aggregates=aggregates,
            per_game=per_game.replace({"method": labels}),
            methods=order,
            metrics=metrics,
            notes=notes + paper_notes + columns + self.probe_notes(methods),
            protocol_note=scores_protocol_note(chosen),
            probes=probe_summary(self.probes, methods, games),
            games=games,
            left_out={labels.get(m, m): k for m, k in left_out.items()},
            capped_from=capped_from if order and capped_from != order[0] else None,
            normalization=normalization or "HNS",
            improvement=improvement,
        )

    def check_baseline(self, baseline: str | None) -> None:
        """Refuse a ``baseline`` that is none of our scored methods, naming the closest.

        Raises:
            ValueError: the one line that says so.
        """
        if baseline is None or baseline in set(self.scores["method"]):
            return
        known = list(dict.fromkeys(self.scores["method"]))
        close = close_names(baseline, known)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ValueError(
            f"baseline {baseline!r} is none of your methods: {hint}methods: "
            f"{', '.join(known) or 'none (no finetuning run)'}"
        )

    def labels(self, methods: Sequence[str]) -> dict[str, str]:
        """``{method: the name figures and tables show}``: marked when its evaluation was
        capped (`capped_label`)."""
        protocols = method_protocols(self.scores)
        return {m: capped_label(m, protocols.get(m)) for m in methods}

    def coverage(self, methods: Sequence[str], games: Sequence[str]) -> dict[str, int]:
        """``{method: how many of games it has}`` for the scored methods lacking some."""
        out = {}
        for method in methods:
            have = set(self.scores.loc[self.scores["method"] == method, "game"])
            if have and len(have & set(games)) < len(games):
                out[method] = len(have & set(games))
        return out

    def probe_notes(self, methods: Sequence[str]) -> list[str]:
        """Which chosen methods have no probe results (only when some method has them)."""
        probed = set(self.probes["method"])
        missing = [m for m in methods if m not in probed]
        if not probed or not missing:
            return []
        return [
            f"probe F1: no probe results for {', '.join(missing)} (probe the pretraining runs "
            "they start from: sgi-lab probe RUN --data STORE)"
        ]

    def per_game(
        self, games: Sequence[str], methods: Sequence[str], paper: Sequence[str]
    ) -> pd.DataFrame:
        """``game, method, hns`` for our methods (mean over runs; ``hns`` is the normalised
        score, HNS or the MinAtar score) and paper configs with per-game scores (Atari games)."""
        records = []
        chosen = self.scores[self.scores["method"].isin(methods) & self.scores["game"].isin(games)]
        for (method, game), part in chosen.groupby(["method", "game"], sort=False):
            records.append({"game": game, "method": method, "hns": float(part["hns"].mean())})
        with_scores = set(paper_configs(per_game=True))
        atari = [g for g in games if g in ATARI_100K_GAMES]  # the paper reports Atari only
        for config in paper:
            if config in with_scores:
                means = paper_per_game(config)
                for game in atari:
                    records.append(
                        {
                            "game": game,
                            "method": paper_method(config),
                            "hns": float(human_normalized_score(game, means[game])),
                        }
                    )
        return pd.DataFrame(records, columns=["game", "method", "hns"])


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
        self.interval = LiveFigure()
        self.table = LiveTable(
            title=AGGREGATE_TABLE_TITLE["HNS"],
            empty="no aggregate to show: select at least one game and one metric",
        )
        self.improvement = LiveTable(
            title=IMPROVEMENT_TITLE,
            empty="pick a baseline to see each method's probability of improvement over it",
        )
        self.per_game = LiveFigure()
        self.probe_table = LiveTable(
            title=PROBE_TABLE_TITLE,
            empty="no probe results for these runs' encoders (sgi-lab probe PRETRAINING_RUN "
            "--data STORE, or probe_runs: a probe study's folder)",
        )
        self.probe_bars = LiveFigure()
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
