"""Report tables of finetuning runs: per-game scores and aggregate HNS with bootstrap CIs, beside
the paper's column for the same configuration (`sgi_lab.analysis.paper_column`).

`read_run` is the one reader of a finetuning run folder; `report` gives ``sgi-lab report``'s
tables; `compare_runs_to_paper` the finetune notebook's comparison.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.analysis.paper_column import MINATAR_REASON, PaperColumn, paper_column, run_label
from sgi_lab.base.files import read_mapping
from sgi_lab.envs import canonical_env_game
from sgi_lab.metrics import (
    aggregate_scores,
    aggregate_with_ci,
    compare_to_paper,
    human_normalized_score,
    metric_label,
    normalization_name,
    normalized_score,
    paper_aggregates,
    paper_config_info,
    paper_configs,
    paper_per_game,
    protocol_of,
    score_meaning,
)
from sgi_lab.metrics.paper import PER_GAME_TABLES
from sgi_lab.metrics.protocol import PAPER_PROTOCOL, EvalProtocol
from sgi_lab.runs.status import require_finished

__all__ = [
    "RunRecord",
    "aggregates_csv_path",
    "code_version",
    "columns_explained",
    "compare_runs_to_paper",
    "evaluation_protocol",
    "format_aggregates",
    "read_run",
    "report",
    "run_results",
    "scores_by_game",
]


@dataclass(frozen=True)
class RunRecord:
    """A finetuning run folder as the reports read it (`read_run`).

    Attributes:
        path: the run folder.
        label: its method label (`run_label`): what the notebook recorded in ``results.json``,
            else the params name, with ``@<pretraining params>`` for a pretrained run.
        params: the finetuning params name (``status.json``, else ``params.yaml``'s ``name``,
            else the ``<config>`` part of a ``<notebook>__<config>__<game>__s<seed>`` folder).
        pretrain_params: the params name of the pretraining run it started from, if known.
        pretrained: whether it started from a pretraining run.
        game: canonical game name (None if the run records none).
        seed: the run's seed, if recorded.
        evaluation, status, config, results: ``eval.json``, ``status.json``, ``config.yaml``,
            ``results.json`` (``{}`` when missing).
    """

    path: Path
    label: str
    params: str | None
    pretrain_params: str | None
    pretrained: bool
    game: str | None
    seed: int | None
    evaluation: dict[str, Any] = field(repr=False)
    status: dict[str, Any] = field(repr=False)
    config: dict[str, Any] = field(repr=False)
    results: dict[str, Any] = field(repr=False)

    @property
    def paper_column(self) -> PaperColumn:
        """The paper's column for this run and why (`paper_column`); what the finetune notebook
        compared it with when it recorded that (``results.json``'s ``paper_config`` and
        ``paper_column_reason``)."""
        reason = self.results.get("paper_column_reason")
        if reason:  # what the finetune notebook compared with (older notebooks: decided anew)
            return PaperColumn(self.results.get("paper_config"), str(reason))
        return paper_column(self.config, self.params, self.pretrain_params, self.pretrained)

    @property
    def paper_config(self) -> str | None:
        """The paper's config for this run (`paper_column`), None when it has none."""
        return self.paper_column.config


def scores_by_game(runs: Sequence[Any]) -> dict[str, list[float]]:
    """``{game: every evaluation episode's score}`` over finetuning runs (objects with an
    ``evaluation`` dict, e.g. `sgi_lab.runs.folder.FinetuneRun`), for `sgi_lab.metrics.compare_to_paper`:
    with the same episodes per run, their mean is the mean over runs of each run's mean."""
    out: dict[str, list[float]] = {}
    for run in runs:
        evaluation = run.evaluation or {}
        if evaluation.get("scores"):
            out.setdefault(evaluation["game"], []).extend(float(x) for x in evaluation["scores"])
    return out


def evaluation_protocol(runs: Sequence[Any]) -> EvalProtocol | None:
    """The evaluation protocol of finetuning runs (objects with an ``evaluation`` dict, e.g.
    `sgi_lab.runs.folder.FinetuneRun` or `RunRecord`): episodes and frame cap from their ``eval.json``,
    the weakest when they differ (`sgi_lab.metrics.protocol_of`); None when none records it.
    Pass it to `sgi_lab.metrics.compare_to_paper` so a comparison says whether it is fair."""
    return protocol_of([run.evaluation or {} for run in runs])


def read_run(run_dir: str | Path) -> RunRecord:
    """The one reader of a finetuning run folder's results (nothing is required to exist)."""
    path = Path(run_dir)
    evaluation = read_mapping(path / "eval.json")
    status = read_mapping(path / "status.json")
    config = read_mapping(path / "config.yaml")
    results = read_mapping(path / "results.json")
    params = status.get("params") or read_mapping(path / "params.yaml").get("name")
    if not params:
        parts = path.name.split("__")
        params = parts[1] if len(parts) >= 3 else path.name
    pretrain_params = status.get("pretrain_params")
    pretrained = bool(config.get("pretrained") or status.get("pretrained"))
    game = evaluation.get("game") or config.get("game") or status.get("game")
    seed = config.get("seed", status.get("seed", evaluation.get("seed")))
    return RunRecord(
        path=path,
        label=str(results.get("method") or run_label(params, pretrain_params, pretrained)),
        params=params,
        pretrain_params=pretrain_params,
        pretrained=pretrained,
        game=canonical_env_game(game) if game else None,
        seed=None if seed is None else int(seed),
        evaluation=evaluation,
        status=status,
        config=config,
        results=results,
    )


def code_version(status: dict[str, Any]) -> str:
    """The code that made a run, from its status' provenance: a short commit, ``+dirty`` when
    tracked files differed from it, ``A > B`` for a run resumed with other code; ``unknown``
    for runs older than provenance records."""
    labels = [
        (str(e.get("commit"))[:10] if e.get("commit") else "no commit")
        + ("+dirty" if e.get("dirty") else "")
        for e in status.get("provenance") or []
        if isinstance(e, dict)
    ]
    return " > ".join(dict.fromkeys(labels)) or "unknown"


def _codes(runs: pd.DataFrame) -> str:
    return ", ".join(sorted(set(runs["code"])))


def run_results(run_dirs: Sequence[str | Path], allow_unfinished: bool = False) -> pd.DataFrame:
    """One row per evaluated run: run, method, paper_config (`paper_column`), paper_reason (why
    that column, or why none), game, seed, score (mean raw return
    over its evaluation episodes), hns, episodes, max_frames (raw-frame cap of an evaluation
    episode, None: none), protocol (their label), step, finished, code (`code_version`).

    Args:
        run_dirs: finetuning run folders (read by `read_run`).
        allow_unfinished: include runs that never finished (``finished`` False); else they
            are refused.

    Raises:
        UnfinishedRunError: a run never finished and ``allow_unfinished`` is false.
        FileNotFoundError: a folder is missing or holds no ``eval.json`` (listed).
    """
    rows, missing = [], []
    for run_dir in run_dirs:
        path = Path(run_dir)
        finished = (
            require_finished(path, "report", allow_unfinished, results_only=True)
            if path.is_dir()
            else True
        )
        run = read_run(path)
        if not run.evaluation:
            missing.append(str(path))
            continue
        score = float(run.evaluation["mean"])
        protocol = protocol_of(run.evaluation)
        column = run.paper_column
        rows.append(
            {
                "run": str(path),
                "method": run.label,
                "paper_config": column.config,
                "paper_reason": column.reason,
                "game": run.game,
                "seed": run.seed,
                "score": score,
                # the game family's normalised score: HNS (Atari) or the MinAtar score
                "hns": normalized_score(run.game, score),
                "normalization": normalization_name(run.game),
                "episodes": run.evaluation.get("episodes"),
                "max_frames": run.evaluation.get("max_frames"),
                "protocol": protocol.label if protocol is not None else None,
                "step": run.evaluation.get("step"),
                "finished": finished,
                "code": code_version(run.status),
            }
        )
    if missing:
        raise FileNotFoundError(
            f"no eval.json (unfinished or not a finetuning run?) in: {', '.join(missing)}; "
            "finish them or run `sgi-lab evaluate RUN_DIR`"
        )
    if not rows:
        raise ValueError("no runs to report")
    return pd.DataFrame(rows)


def compare_runs_to_paper(runs: Sequence[Any], column: PaperColumn) -> pd.DataFrame:
    """`sgi_lab.metrics.compare_to_paper` of finetuning runs (objects with an ``evaluation``)
    against their `paper_column`, with the protocol of their evaluations. A run with no
    column, or one the paper prints only aggregates for, keeps its own scores beside NaN, and
    ``attrs["note"]`` says why there is nothing to compare with; so do MinAtar runs (the paper
    reports Atari only), whose ``ours_hns`` is the MinAtar score. ``attrs["normalization"]``
    names what ``ours_hns`` holds: ``"HNS"`` or ``"MinAtar score"``."""

    protocol = evaluation_protocol(runs)
    scores = scores_by_game(runs)
    families = {normalization_name(game) for game in scores}
    if families and families != {"HNS"}:
        return _minatar_beside_no_paper(scores, protocol, families)
    if column.config in paper_configs(per_game=True):
        df = compare_to_paper(scores, column.config, protocol=protocol)
        df.attrs.update(reason=column.reason, normalization="HNS")
        return df
    df = compare_to_paper(scores, "SGI-None", protocol=protocol)
    df[["paper", "paper_hns"]] = np.nan
    why = (
        f"the paper prints only aggregates for {column.config}"
        if column.config
        else f"no paper column: {column.reason}"
    )
    df.attrs.update(
        config=column.config or "none",
        reason=why,
        note=f"{why}; {df.attrs['note']}",
        normalization="HNS",
    )
    return df


def _minatar_beside_no_paper(
    scores: dict[str, list[float]], protocol: EvalProtocol | None, families: set[str]
) -> pd.DataFrame:
    """`compare_runs_to_paper`'s frame for MinAtar runs: our scores and MinAtar scores beside
    NaN, as the paper reports Atari only."""
    if len(families) > 1:
        raise ValueError(
            f"these runs mix normalisations ({', '.join(sorted(families))}): compare Atari and "
            "MinAtar runs separately"
        )
    games = sorted(scores)
    ours = [float(np.mean(scores[g])) for g in games]
    df = pd.DataFrame(
        {
            "game": games,
            "ours": ours,
            "paper": np.nan,
            "ours_hns": [normalized_score(g, x) for g, x in zip(games, ours)],
            "paper_hns": np.nan,
            "protocol": protocol.label if protocol is not None else None,
            "comparable": False,
        }
    )
    why = "no paper column: the paper reports Atari games only"
    df.attrs.update(
        config="none",
        reason=why,
        protocol=protocol.label if protocol is not None else None,
        comparable=False,
        note=f"{why}; scores are MinAtar scores (0 random, 1 DQN)",
        normalization="MinAtar score",
    )
    return df


def columns_explained(run_dirs: Sequence[str | Path]) -> dict[str, str]:
    """``{method: "SGI-M/S (why)"}`` for finetuning runs: the paper column each method is set
    beside and why (`paper_column`), or why it has none; for ``sgi-lab report``."""
    out: dict[str, str] = {}
    for run_dir in run_dirs:
        run = read_run(run_dir)
        if run.evaluation and run.label not in out:
            atari = run.game is None or normalization_name(run.game) == "HNS"
            why = f"the paper reports Atari only; MinAtar score: {score_meaning('MinAtar score')}"
            out[run.label] = str(run.paper_column) if atari else f"none ({why})"
    return out


def _hns_matrix(runs: pd.DataFrame, games: list[str]) -> np.ndarray:
    """(num_runs, num_games) HNS; every game keeps as many runs as the game with the fewest."""
    per_game = {g: runs[runs.game == g].sort_values("seed")["hns"].to_numpy() for g in games}
    counts = {g: len(v) for g, v in per_game.items()}
    n = min(counts.values())
    if len(set(counts.values())) > 1:
        warnings.warn(
            f"games have different numbers of runs {counts}; aggregates use the first {n} "
            "of each (by seed)",
            RuntimeWarning,
            stacklevel=4,
        )
    return np.stack([per_game[g][:n] for g in games], axis=1)


def _paper_reported(config: str) -> dict[str, float]:
    """The paper's printed 26-game aggregates of a config, by metric (empty if not printed)."""
    tables = list(PER_GAME_TABLES) + list(paper_config_info(config)["tables"])
    for table in dict.fromkeys(tables):
        try:
            df = paper_aggregates(table, tidy=True)
        except KeyError:
            continue
        df = df[df.method == config]
        if not df.empty:
            return dict(zip(df.metric, df.value))
    return {}


def report(
    run_dirs: Sequence[str | Path],
    csv: str | Path | None = None,
    reps: int = 5000,
    seed: int = 0,
    allow_unfinished: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-game and aggregate results of finetuning runs, beside the paper's.

    Args:
        run_dirs: finetuning run folders (each with ``eval.json``); runs of one method on one
            game are its seeds.
        csv: write the per-game table to this file and the aggregates beside it
            (``NAME.aggregates.csv``).
        reps: bootstrap resamples for the CIs (the paper's 5000).
        seed: bootstrap seed.
        allow_unfinished: include runs that never finished; both tables then count them in
            an ``unfinished`` column (else such runs are refused).

    Returns:
        ``(per_game, aggregates)``. per_game: method, paper_config, game, runs, score (mean raw
        return over runs), score_std, hns, paper_score, paper_hns. aggregates: method,
        paper_config, metric, value, lower, upper (stratified bootstrap over runs; no CI with
        one run per game), paper_same_games (the metric of the paper's per-game means over the
        same games), paper_reported (the paper's printed value over all 26 games). Both end
        with ``protocol`` (the runs' evaluation episodes and frame cap, the weakest of the
        method's runs), ``comparable`` (True only for the paper's 100 episodes capped at
        108,000 frames: otherwise the paper's columns are context, not a comparison) and
        ``code`` (the `code_version` values of the row's runs, comma-separated).
    """
    runs = run_results(run_dirs, allow_unfinished=allow_unfinished)
    per_game_rows, aggregate_rows = [], []
    for method, group in runs.groupby("method", sort=False):
        config = group["paper_config"].iloc[0]
        games = list(dict.fromkeys(group.sort_values("game")["game"]))
        # The paper reports Atari games only: MinAtar runs have no paper column to stand beside.
        atari = all(normalization_name(game) == "HNS" for game in games)
        paper = _paper_per_game(config) if atari else None
        config = config if atari else None
        stamp = _protocol_stamp(group)
        per_game_rows += _per_game_rows(method, config, group, games, paper, stamp)
        aggregate_rows += _aggregate_rows(method, config, group, games, paper, stamp, reps, seed)
    per_game = pd.DataFrame(per_game_rows)
    aggregates = pd.DataFrame(aggregate_rows)
    if csv is not None:
        csv = Path(csv)
        csv.parent.mkdir(parents=True, exist_ok=True)
        per_game.to_csv(csv, index=False)
        aggregates.to_csv(aggregates_csv_path(csv), index=False)
    return per_game, aggregates


def _paper_per_game(config: str | None) -> pd.Series | None:
    """The paper's per-game mean scores of ``config``; None for no column or one the paper
    prints only aggregates for."""
    try:
        return paper_per_game(config) if config else None
    except KeyError:
        return None


def _protocol_stamp(runs: pd.DataFrame) -> dict[str, Any]:
    """``protocol`` (the weakest evaluation protocol of ``runs``) and ``comparable`` (whether it
    is the paper's), for every row of a method."""
    protocol = protocol_of(
        [
            {"episodes": e, "max_frames": None if pd.isna(m) else int(m)}
            for e, m in zip(runs["episodes"], runs["max_frames"])
            if not pd.isna(e)
        ]
    )
    capped = protocol is not None and protocol.max_frames is not None
    return {
        "protocol": protocol.label if protocol is not None else "unknown",
        "comparable": protocol is not None and protocol.comparable,
        # episodes cut short score what they had when cut: never ranked with whole games
        "capped": capped and protocol.max_frames < PAPER_PROTOCOL.max_frames,
    }


def _per_game_rows(
    method: str,
    config: str | None,
    runs: pd.DataFrame,
    games: list[str],
    paper: pd.Series | None,
    stamp: dict[str, Any],
) -> list[dict[str, Any]]:
    """One row per game of a method: its runs' mean score and HNS beside the paper's."""
    rows = []
    for game in games:
        of_game = runs[runs.game == game]
        scores = of_game["score"]
        paper_score = float(paper[game]) if paper is not None else np.nan
        rows.append(
            {
                "method": method,
                "paper_config": config,
                "game": game,
                "runs": len(scores),
                "unfinished": int((~of_game["finished"]).sum()),
                "score": float(scores.mean()),
                "score_std": float(scores.std(ddof=0)),
                "hns": normalized_score(game, float(scores.mean())),
                "normalization": normalization_name(game),
                "paper_score": paper_score,
                "paper_hns": normalized_score(game, paper_score),
                **stamp,
                "code": _codes(of_game),
            }
        )
    return rows


def _aggregate_rows(
    method: str,
    config: str | None,
    runs: pd.DataFrame,
    games: list[str],
    paper: pd.Series | None,
    stamp: dict[str, Any],
    reps: int,
    seed: int,
) -> list[dict[str, Any]]:
    """One row per aggregate metric of a method: its value with a stratified bootstrap CI over
    runs (none with one run per game), the paper's over the same games and as printed."""
    families = sorted({normalization_name(game) for game in games})
    if len(families) > 1:
        raise ValueError(
            f"{method}: its games mix normalisations ({', '.join(families)}); report Atari and "
            "MinAtar runs separately"
        )
    matrix = _hns_matrix(runs, games)
    if matrix.shape[0] > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # degenerate resamples
            agg = aggregate_with_ci(matrix, reps=reps, seed=seed)
    else:
        agg = aggregate_scores(matrix).assign(lower=np.nan, upper=np.nan)
    same_games = {}
    if paper is not None:
        paper_hns = human_normalized_score(games, paper[games].to_numpy())[None, :]
        same_games = dict(aggregate_scores(paper_hns)[["metric", "value"]].values)
    reported = _paper_reported(config) if config else {}
    return [
        {
            "method": method,
            "paper_config": config,
            "metric": row["metric"],
            "value": float(row["value"]),
            "lower": float(row["lower"]),
            "upper": float(row["upper"]),
            "paper_same_games": float(same_games.get(row["metric"], np.nan)),
            "paper_reported": float(reported.get(row["metric"], np.nan)),
            "normalization": families[0] if families else "HNS",
            "unfinished": int((~runs["finished"]).sum()),
            **stamp,
            "code": _codes(runs),
        }
        for _, row in agg.iterrows()
    ]


def aggregates_csv_path(csv: str | Path) -> Path:
    """Where `report` writes the aggregates next to the per-game CSV: ``NAME.aggregates.csv``."""
    csv = Path(csv)
    return csv.with_name(f"{csv.stem}.aggregates{csv.suffix or '.csv'}")


def format_aggregates(aggregates: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """A printable aggregates table: one row per method and metric, ``value (lower, upper)``,
    and the evaluation protocol, with "not comparable" beside the paper's columns when it is
    not the paper's."""

    def fmt(x: float) -> str:
        return "-" if pd.isna(x) else f"{x:.{digits}f}"

    def fmt_row(metric: str, x: float) -> str:
        # Game counts are integers (their CI bounds too: percentiles of counts).
        return "-" if pd.isna(x) else (f"{x:.0f}" if metric.startswith("games_") else fmt(x))

    # Capped evaluations last, marked: a cut game's score is not ranked among whole games.
    out = aggregates.copy()
    if "capped" in out:
        out = out.sort_values("capped", kind="stable").reset_index(drop=True)
        out["method"] = [
            f"{m} (capped: {p})" if c else m
            for m, p, c in zip(out["method"], out["protocol"], out["capped"])
        ]
    out["ours"] = [
        fmt_row(m, v) if pd.isna(lo) else f"{fmt_row(m, v)} ({fmt_row(m, lo)}, {fmt_row(m, hi)})"
        for m, v, lo, hi in zip(out.metric, out.value, out.lower, out.upper)
    ]
    out["paper (same games)"] = [fmt_row(m, v) for m, v in zip(out.metric, out.paper_same_games)]
    out["paper (26 games)"] = [fmt_row(m, v) for m, v in zip(out.metric, out.paper_reported)]
    norms = out["normalization"] if "normalization" in out else ["HNS"] * len(out)
    out["metric"] = [metric_label(m, n) for m, n in zip(out.metric, norms, strict=True)]
    columns = ["method", "paper_config", "metric", "ours", "paper (same games)", "paper (26 games)"]
    if "protocol" in out:
        out["evaluation"] = [
            f"{p}: {MINATAR_REASON}"
            if n == "MinAtar score"
            else (p if ok else f"{p}: not comparable with the paper")
            for p, ok, n in zip(out["protocol"], out["comparable"], norms, strict=True)
        ]
        columns.append("evaluation")
    return out[columns]
