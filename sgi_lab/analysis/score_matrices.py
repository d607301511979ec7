"""Per-seed score matrices of finetuning runs, in rliable's shape, for anyone to redraw a figure.

rliable's metrics take ``{method: array(num_runs, num_games)}``; `score_matrices` builds that
from run folders (read by `sgi_lab.analysis.report.run_results`, the one run reader): raw
returns (each run's mean over its evaluation episodes) and normalised scores (HNS for Atari,
the MinAtar score for ``minatar/<game>``: `sgi_lab.metrics.normalized_score`), with one game
order for every method, the seed of every cell and the constants the scores were normalised
with. Row ``i`` of a method holds its ``i``-th run of each game by seed; a cell without a
run (a method with fewer runs of one game, or none) is NaN, its seed -1.

`write_score_matrices` saves them as ``.npz`` (plain arrays and a one-element string array of
JSON metadata: ``np.load(FILE, allow_pickle=False)`` reads it) or ``.json``; neither
overwrites a file. In the npz, ``raw/<method>``, ``normalized/<method>`` and
``seeds/<method>`` are the matrices, ``games`` and ``methods`` the orders::

    data = np.load("scores.npz", allow_pickle=False)
    scores = {m: data[f"normalized/{m}"] for m in data["methods"]}
    rliable.metrics.aggregate_iqm(scores["sgi_none"])
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.analysis.report import run_results
from sgi_lab.base.files import atomic_write, atomic_write_text
from sgi_lab.metrics import score_references

__all__ = [
    "FORMAT",
    "NORMALIZATION_SOURCES",
    "ScoreMatrices",
    "read_score_matrices",
    "score_matrices",
    "write_score_matrices",
    "write_study_scores",
]

FORMAT = "sgi-lab score matrices"
VERSION = 1
SUFFIXES = (".npz", ".json")
NORMALIZATION_SOURCES = {
    "HNS": "(score - random) / (human - random) with the random and human scores of the SGI "
    "paper's Atari 100k table (the same as SPR's and DER's; sgi_lab/envs/games.py)",
    "MinAtar score": "(score - random) / (reference - random): random measured by sgi-lab "
    "(the uniform policy over the minimal action set, MinAtar's default protocol), reference "
    "Young & Tian's (2019) DQN at 5M frames read off the authors' published curves "
    "(sgi_lab/metrics/data/minatar_scores.json)",
}


@dataclass(frozen=True)
class ScoreMatrices:
    """Per-seed scores of several methods over one game order.

    Attributes:
        games: the game order of every matrix's columns.
        raw: ``{method: (runs, games)}`` mean raw return of each run (NaN: no run there).
        normalized: the same, normalised (``normalization``).
        seeds: ``{method: (runs, games)}`` int64 seed of each cell (-1: no run there).
        runs: ``{method: [[run folder or None per game] per row]}``.
        normalization: ``"HNS"`` or ``"MinAtar score"``.
        references: ``{game: {"random": x, "human" or "DQN reference": y}}``, the raw returns
            the normalised score is 0 and 1 at.
        episodes: evaluation episodes behind each run's mean (the fewest of any run).
    """

    games: list[str]
    raw: dict[str, np.ndarray]
    normalized: dict[str, np.ndarray]
    seeds: dict[str, np.ndarray]
    runs: dict[str, list[list[str | None]]]
    normalization: str
    references: dict[str, dict[str, float]]
    episodes: int | None = None

    @property
    def methods(self) -> list[str]:
        return list(self.raw)

    def metadata(self) -> dict[str, Any]:
        """What the matrices are: everything but the score arrays, as JSON."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "shape": "{method: array(runs, games)}, rliable's score dictionaries",
            "games": self.games,
            "methods": self.methods,
            "score": "a run's mean raw return over its evaluation episodes (its eval.json mean)",
            "episodes": self.episodes,
            "normalization": self.normalization,
            "normalization_source": NORMALIZATION_SOURCES.get(self.normalization, ""),
            "references": self.references,
            "missing": "NaN score and seed -1: the method has no run for that row and game",
            "seeds": {m: s.tolist() for m, s in self.seeds.items()},
            "runs": self.runs,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }


def score_matrices(
    run_dirs: Sequence[str | os.PathLike],
    allow_unfinished: bool = False,
    root: str | os.PathLike | None = None,
) -> ScoreMatrices:
    """The per-seed score matrices of finetuning runs (each with ``eval.json``).

    Args:
        run_dirs: finetuning run folders; a method is a run's label (`report.read_run`).
        allow_unfinished: include runs that never finished (else they are refused).
        root: record the run folders relative to this folder (an experiment's), so that the
            file names them wherever the experiment is.

    Raises:
        ValueError: the runs mix normalisations (Atari and MinAtar games in one file).
    """
    runs = run_results(run_dirs, allow_unfinished=allow_unfinished)
    families = sorted(set(runs["normalization"]))
    if len(families) > 1:
        raise ValueError(
            f"these runs mix normalisations ({', '.join(families)}): export Atari and MinAtar "
            "runs to separate files"
        )
    games = sorted(set(runs["game"]))
    raw, normalized, seeds, folders = {}, {}, {}, {}
    for method, group in runs.groupby("method", sort=False):
        by_game = {g: group[group.game == g].sort_values(["seed", "run"]) for g in games}
        rows = max(len(cells) for cells in by_game.values())
        raw[method] = np.full((rows, len(games)), np.nan)
        normalized[method] = np.full((rows, len(games)), np.nan)
        seeds[method] = np.full((rows, len(games)), -1, dtype=np.int64)
        folders[method] = [[None] * len(games) for _ in range(rows)]
        for j, game in enumerate(games):
            for i, cell in enumerate(by_game[game].itertuples()):
                raw[method][i, j] = cell.score
                normalized[method][i, j] = cell.hns
                seeds[method][i, j] = -1 if pd.isna(cell.seed) else int(cell.seed)
                folders[method][i][j] = _relative(cell.run, root)
    episodes = runs["episodes"].dropna()
    return ScoreMatrices(
        games=games,
        raw=raw,
        normalized=normalized,
        seeds=seeds,
        runs=folders,
        normalization=families[0],
        references={g: score_references(g) for g in games},
        episodes=int(episodes.min()) if len(episodes) else None,
    )


def _relative(run: str, root: str | os.PathLike | None) -> str:
    if root is None:
        return run
    try:
        return Path(run).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:  # not under root
        return run


def _nan_to_none(matrix: np.ndarray) -> list[list[float | None]]:
    return [[None if math.isnan(x) else float(x) for x in row] for row in matrix]


def write_score_matrices(
    matrices: ScoreMatrices, path: str | os.PathLike, replace: bool = False
) -> Path:
    """Write ``matrices`` to ``path`` (``.npz`` or ``.json``, by its suffix), atomically.

    Args:
        replace: replace a file there (an experiment's report regenerates its own files);
            else an existing file is refused.

    Raises:
        FileExistsError: ``path`` exists and ``replace`` is false (nothing is overwritten).
        ValueError: another suffix.
    """
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(f"{path}: a score matrix file ends in .npz or .json")
    if path.exists() and not replace:
        raise FileExistsError(f"{path} exists; name a new file (nothing is overwritten)")
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = matrices.metadata()
    if path.suffix.lower() == ".json":
        payload = {
            **meta,
            "raw": {m: _nan_to_none(a) for m, a in matrices.raw.items()},
            "normalized": {m: _nan_to_none(a) for m, a in matrices.normalized.items()},
        }
        atomic_write_text(path, json.dumps(payload, indent=1) + "\n")
        return path
    arrays: dict[str, np.ndarray] = {
        "games": np.array(matrices.games, dtype=str),
        "methods": np.array(matrices.methods, dtype=str),
        "metadata": np.array([json.dumps(meta)]),
    }
    for method in matrices.methods:
        arrays[f"raw/{method}"] = matrices.raw[method]
        arrays[f"normalized/{method}"] = matrices.normalized[method]
        arrays[f"seeds/{method}"] = matrices.seeds[method]
    atomic_write(path, lambda fh: np.savez(fh, **arrays), binary=True)
    return path


def write_study_scores(
    run_dirs: Sequence[str | os.PathLike], folder: str | os.PathLike
) -> list[Path]:
    """``scores.npz`` and ``scores.json`` of an experiment's finetuning runs in its folder,
    the runs named relative to it; the report's own files, replaced each time it is written."""
    matrices = score_matrices(run_dirs, root=folder)
    return [
        write_score_matrices(matrices, Path(folder) / name, replace=True)
        for name in ("scores.npz", "scores.json")
    ]


def read_score_matrices(path: str | os.PathLike) -> ScoreMatrices:
    """Read a file `write_score_matrices` wrote (``.npz`` without pickles, or ``.json``)."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        payload = json.loads(path.read_text())
        arrays = {
            kind: {m: np.array(v, dtype=float) for m, v in payload[kind].items()}
            for kind in ("raw", "normalized")
        }
        meta = payload
    else:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["metadata"][0]))
            arrays = {
                kind: {m: data[f"{kind}/{m}"] for m in meta["methods"]}
                for kind in ("raw", "normalized")
            }
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"{path}: not an sgi-lab score matrix file (format {meta.get('format')!r})"
        )
    return ScoreMatrices(
        games=list(meta["games"]),
        raw=arrays["raw"],
        normalized=arrays["normalized"],
        seeds={m: np.array(s, dtype=np.int64) for m, s in meta["seeds"].items()},
        runs=meta["runs"],
        normalization=meta["normalization"],
        references=meta["references"],
        episodes=meta.get("episodes"),
    )
