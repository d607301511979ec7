"""The ablation explorer's model: our finetuning runs beside the paper's reported results.

The model is a function from a *selection* (games, our methods, paper configurations, metrics)
to tidy data, and from that to figures:

* `sgi_lab.analysis.run_scores.load_run_scores` reads the ``eval.json`` of finetuning run
  folders into one row per run, and `run_aggregates` there turns them into aggregate HNS with
  stratified bootstrap CIs;
* `paper_aggregate_rows` gives the paper's rows (``"SGI-M (paper)"``, ``"Frozen (paper)"``, ...):
  as printed (tab:IQMs with its CIs first) when all 26 games are selected, else recomputed from
  the paper's per-game means over the selected games (no CI: the paper gives no per-seed scores);
* `sgi_lab.analysis.ablation_probes` gives the probe F1 of the encoders behind each method
  (linear probes of game state, ``sgi-lab probe``), shown beside the scores;
* `AblationModel.select` joins them; `sgi_lab.analysis.ablation_explorer.AblationExplorer` puts
  ipywidgets on top, and its callbacks can be driven from code (set a widget's ``value``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sgi_lab.analysis.ablation_probes import (
    load_probe_scores,
    probe_summary,
)
from sgi_lab.analysis.paper_column import PaperColumn
from sgi_lab.analysis.run_scores import (
    DEFAULT_EXPLORER_METRICS,
    capped_label,
    improvement_over,
    load_run_scores,
    method_protocols,
    run_aggregates,
    scores_protocol_note,
    selection_normalization,
)
from sgi_lab.base.paths import close_names
from sgi_lab.envs import canonical_env_game
from sgi_lab.envs.games import ATARI_100K_GAMES, canonical_game
from sgi_lab.envs.minatar import MINATAR_GAMES
from sgi_lab.metrics import (
    aggregate_scores,
    human_normalized_score,
    normalization_name,
    paper_aggregates,
    paper_configs,
    paper_per_game,
)

__all__ = [
    "PAPER_OBJECTIVE_ABLATIONS",
    "PAPER_SUFFIX",
    "AblationModel",
    "AblationView",
    "paper_aggregate_rows",
    "paper_method",
]

PAPER_SUFFIX = " (paper)"
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
