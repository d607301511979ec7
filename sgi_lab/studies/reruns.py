"""A study run twice: the same methods, games and seeds finetuned again, set beside the first.

RL at a small budget is noisy, and the study pairs each agent with the same seed from scratch
as if the seed pinned the run. A second run of the same commands says how far that holds: the
code moved at float-rounding level between the two (a vmapped population, a reordered sum), and
a rounding difference grows into another trajectory. So the second run is another draw of each
(method, game, seed), and the question is whether the first run's conclusions survive it.

`published_runs` reads a first run's final returns from a CSV (``objective, scheme, game, seed,
score``: a results page's per-seed table, the mean evaluation return to two decimals) as
`sgi_lab.studies.finetune_study.study_runs` rows; `rerun_table` compares the two runs method by
method; `rerun_markdown` writes it; `baseline_table` sets every method of one run against each
run's scratch agents (does a conclusion drawn against one draw of scratch survive another?);
`write_rerun_figure` draws each (method, game, seed) of the second run against the first
(`sgi_lab.viz.rerun_figure.rerun_svg`).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.metrics.aggregate import seed_pairs
from sgi_lab.metrics.minatar import normalization_name, normalized_score
from sgi_lab.studies.finetune_study import (
    method_labels,
    objective_table,
    readout_runs,
    study_runs,
)
from sgi_lab.viz.markdown import format_interval, table_markdown
from sgi_lab.viz.rerun_figure import RERUN_MARK, rerun_svg
from sgi_lab.viz.svg import write_svg

__all__ = [
    "baseline_markdown",
    "baseline_table",
    "compare_runs",
    "load_runs",
    "published_runs",
    "rerun_markdown",
    "rerun_table",
    "write_rerun_figure",
]

COLUMNS = ("objective", "scheme", "game", "seed", "score")


def published_runs(csv: str | Path) -> pd.DataFrame:
    """A first run's finished agents from a CSV of ``objective, scheme, game, seed, score``, as
    `study_runs` rows (``normalized``: the game's score, `normalized_score`), with
    ``decimals``: how many the CSV's returns have (a second run is rounded to them before the
    two are compared seed by seed, `rerun_table`).

    Raises:
        ValueError: a column missing (named), or a score that is not a number.
    """
    frame = pd.read_csv(csv, dtype={"score": str})
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{csv}: no column {', '.join(missing)} (needs {', '.join(COLUMNS)})")
    scores = pd.to_numeric(frame["score"], errors="coerce")
    if scores.isna().any():
        row = int(scores.isna().to_numpy().nonzero()[0][0]) + 2  # the header is line 1
        raise ValueError(
            f"{csv}: line {row}: score {frame['score'].iloc[row - 2]!r} is not a number"
        )
    decimals = int(frame["score"].str.strip().str.partition(".")[2].str.len().max())
    frame = frame.assign(score=scores, finished=True, folder="", decimals=decimals)
    frame["normalized"] = normalized_score(list(frame["game"]), frame["score"].to_numpy())
    frame["normalization"] = [normalization_name(g) for g in frame["game"]]
    frame["label"] = np.where(
        frame["objective"] == "none", "sgi_none", frame["scheme"] + "__" + frame["objective"]
    )
    return frame


def load_runs(source: str | Path) -> pd.DataFrame:
    """One run of a study: an experiment folder (or its archive) as `study_runs`, or a CSV of
    per-seed final returns as `published_runs`.

    Raises:
        ValueError: ``source`` is neither (named).
    """
    source = Path(source)
    if source.is_file() and source.suffix == ".csv":
        return published_runs(source)
    if source.is_dir() and (source / "finetune").is_dir():
        return study_runs(source)
    raise ValueError(
        f"{source}: neither an experiment folder (with finetune/) nor a CSV of per-seed returns "
        f"({', '.join(COLUMNS)})"
    )


def compare_runs(sources: dict[str, str | Path], reps: int = 2000) -> dict[str, Any]:
    """Two runs of one study, ``{name: experiment folder or per-seed CSV}`` (first, then
    second), compared: what the ablations notebook's section 7 shows.

    Returns:
        ``names``, ``runs`` (their `load_runs` frames), ``rerun`` (`rerun_table`),
        ``baselines`` (`baseline_table` of the first run against each run's scratch agents and
        both pooled), ``second_baselines`` (the second run's methods, likewise: those only it
        has, such as objectives the first never finished), ``training`` (the second run read by
        its training episodes against its own scratch agents, `readout_runs`; empty when it is
        a CSV, which keeps final returns only), ``pooled`` (every method, with both runs of it
        pooled where it has them, against both draws of scratch pooled) and ``markdown``
        (every table).

    Raises:
        ValueError: not exactly two sources, or one that is neither (named).
    """
    if len(sources) != 2:
        raise ValueError(
            f"rerun: give two runs of one study, {{first: folder or CSV, second: ...}}; got "
            f"{len(sources)}: {list(sources)}"
        )
    names = tuple(sources)
    first, second = (load_runs(s) for s in sources.values())
    rerun = rerun_table(first, second, reps=reps)
    both = pd.concat([first, second], ignore_index=True)
    baselines = {names[0]: first, names[1]: second, "both": both}
    pooled = baseline_table(first, baselines, reps=reps)
    own = {names[1]: second, names[0]: first, "both": both}
    second_pooled = baseline_table(second, own, reps=reps)
    everything = baseline_table(both, {"both": both}, reps=reps)
    training = pd.DataFrame()
    if (second["folder"] != "").all():  # run folders, with their training episodes
        by_episodes = readout_runs(second, "training")
        training = baseline_table(by_episodes, {names[1]: by_episodes}, reps=reps)
    text = [
        f"### The same agents in both runs: {names[1]} against {names[0]}",
        "",
        rerun_markdown(first, second, names, table=rerun),
        f"### Each method of {names[0]} against each draw of scratch",
        "",
        baseline_markdown(first, baselines, table=pooled),
        f"### Each method of {names[1]} against each draw of scratch",
        "",
        baseline_markdown(second, own, table=second_pooled),
        "### Both runs pooled: every method's runs against every scratch run",
        "",
        baseline_markdown(both, {"both": both}, table=everything),
    ]
    if not training.empty:
        text += [
            f"### {names[1]} read by its training episodes (how soon each agent learned)",
            "",
            baseline_markdown(by_episodes, {names[1]: by_episodes}, table=training),
        ]
    return {
        "names": names,
        "runs": (first, second),
        "rerun": rerun,
        "baselines": pooled,
        "second_baselines": second_pooled,
        "training": training,
        "pooled": everything,
        "markdown": "\n".join(text),
    }


def _complete(runs: pd.DataFrame, seeds: list[int]) -> dict[str, set[str]]:
    """{method: games where it finished every seed}."""
    done = runs[runs["finished"]]
    done = done.assign(method=method_labels(done))
    full = done[done["seed"].isin(seeds)].groupby(["method", "game"])["seed"].nunique()
    full = full[full == len(seeds)].reset_index()
    return full.groupby("method")["game"].apply(set).to_dict()


def _same_precision(first: pd.DataFrame, second: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both runs' returns rounded to the coarser one's ``decimals`` (a CSV's two), the scores
    recomputed: a run is not "above" itself for the digits a table dropped."""
    given = [int(x["decimals"].min()) for x in (first, second) if "decimals" in x and len(x)]
    if not given:
        return first, second

    def rounded(runs: pd.DataFrame) -> pd.DataFrame:
        score = runs["score"].round(min(given))
        normalized = normalized_score(list(runs["game"]), score.to_numpy(dtype=float))
        return runs.assign(score=score, normalized=normalized)

    return rounded(first), rounded(second)


def rerun_table(
    first: pd.DataFrame, second: pd.DataFrame, reps: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Each method both runs finished on some game with every seed, over those games (seed by
    seed, their returns at the coarser run's precision: `published_runs`' ``decimals``).

    Columns: ``method``, ``games``, ``seeds``; ``iqm_first`` and ``iqm_second`` with their 95%
    stratified bootstrap CIs (``_lower``, ``_upper``); ``gap_first`` and ``gap_second``, the
    method's IQM minus none's over the same games in the same run (NaN for none, or when none
    has not finished those games in both runs); ``above``, ``below``, ``level`` and ``sign_p``:
    the second run against the first at the same (game, seed); ``same_seed``, the mean absolute
    difference in normalised score between the two runs of one (game, seed), and
    ``other_seed``, between the first run of one seed and the second of another seed of the same
    game (if the seed pinned the run, ``same_seed`` would be far below ``other_seed``).
    """
    seeds = sorted(set(first["seed"]) & set(second["seed"]))
    if not seeds:
        return pd.DataFrame()
    rounded = dict(zip(("first", "second"), _same_precision(first, second), strict=True))
    a, b = _complete(first, seeds), _complete(second, seeds)
    rows = []
    for method in sorted(set(a) & set(b)):
        games = sorted(a[method] & b[method])
        if not games:
            continue
        with_none = "none" in a and "none" in b and set(games) <= a["none"] & b["none"]
        row = {"method": method, "games": len(games), "seeds": len(seeds)}
        scores = {}
        for name, runs in (("first", first), ("second", second)):
            done = runs[runs["finished"] & runs["game"].isin(games) & runs["seed"].isin(seeds)]
            done = done.assign(objective=method_labels(done), scheme="all")
            keep = [method, "none"] if with_none else [method]
            table = objective_table(done[done["objective"].isin(keep)], None, reps=reps, seed=seed)
            for k in ("", "_lower", "_upper"):
                row[f"iqm_{name}{k}"] = table.loc[method, f"iqm{k}"]
            none_iqm = table.loc["none", "iqm"] if with_none else np.nan
            row[f"gap_{name}"] = row[f"iqm_{name}"] - none_iqm if method != "none" else np.nan
            part = rounded[name]  # seed by seed at the coarser run's precision
            part = part[part["finished"] & part["game"].isin(games) & part["seed"].isin(seeds)]
            part = part[method_labels(part) == method]
            scores[name] = part.groupby(["game", "seed"])["normalized"].mean()
        pairs = seed_pairs(scores["second"], scores["first"])
        row.update({k: pairs[k] for k in ("above", "below", "level", "sign_p")})
        row["same_seed"] = float((scores["second"] - scores["first"]).abs().mean())
        other = [
            abs(scores["first"][g, s] - scores["second"][g, t])
            for g in games
            for s, t in itertools.permutations(seeds, 2)
        ]
        row["other_seed"] = float(np.mean(other)) if other else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def rerun_markdown(
    first: pd.DataFrame,
    second: pd.DataFrame,
    names: tuple[str, str] = ("first", "second"),
    reps: int = 2000,
    table: pd.DataFrame | None = None,
) -> str:
    """`rerun_table` as Markdown, ``names`` for the two runs' columns (``("first run (2026-11-26)",
    "restart (2026-11-27)")``)."""
    table = rerun_table(first, second, reps=reps) if table is None else table
    if table.empty:
        return "No method has finished a game on every seed in both runs yet.\n"
    one, two = names
    header = [
        "method",
        "games",
        f"IQM, {one}",
        f"IQM, {two}",
        f"IQM - none's, {one}",
        f"IQM - none's, {two}",
        f"{two} against {one}, same seed: above / below / level",
        "p",
        "mean abs difference: same seed / other seed",
    ]
    note = (
        f"Normalised scores over the games where a method finished all {int(table['seeds'].iloc[0])} "
        "seeds in both runs; 95% stratified bootstrap CIs; IQM - none's: over the same games, in "
        "the same run; same seed: each (game, seed) of the second run against the first, with "
        "the two-sided sign test's p (level pairs left out); mean abs difference: between the "
        "two runs of one seed, and between one seed's first run and another seed's second."
    )

    def gap(value: float) -> str:
        return "-" if pd.isna(value) else f"{value:+.3f}"

    rows = [
        [
            row.method,
            str(row.games),
            format_interval(row.iqm_first, row.iqm_first_lower, row.iqm_first_upper),
            format_interval(row.iqm_second, row.iqm_second_lower, row.iqm_second_upper),
            gap(row.gap_first),
            gap(row.gap_second),
            f"{row.above} / {row.below} / {row.level}",
            "-" if pd.isna(row.sign_p) else f"{row.sign_p:.2f}",
            f"{row.same_seed:.3f} / {row.other_seed:.3f}",
        ]
        for row in table.sort_values("iqm_first", ascending=False).itertuples()
    ]
    return table_markdown(header, rows, note)


def baseline_table(
    runs: pd.DataFrame, baselines: dict[str, pd.DataFrame], reps: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Every method of ``runs`` but none against each baseline's scratch agents (``{name:
    runs}``, their ``none`` rows: the first run's own, a second run's, both).

    Per method and baseline, over the games where the method and that baseline's none finished
    every seed: ``iqm`` (the method's) and ``none_iqm``, ``p_improve`` with its 95% CI
    (``_lower``, ``_upper``: rliable's probability of improvement over none, every run against
    every run, so a baseline with more runs is no problem), and ``above``, ``below``, ``level``,
    ``sign_p``: each (game, seed) against the same seed's scratch agents (their mean when a
    baseline has several runs of a seed). ``games`` and ``seeds`` say what it is over, ``runs``
    how many runs of each (game, seed) of the method count: ``runs`` may hold several draws of
    a method (two runs of a study concatenated), pooled like the baseline's (every run in the
    aggregates, a seed's mean in the seed pairs) as far as every (game, seed) has them.
    """
    seeds = sorted(set(runs["seed"]))
    methods = _complete(runs, seeds)
    rows = []
    for name, baseline in baselines.items():
        none = baseline[baseline["finished"] & (baseline["objective"] == "none")]
        none_games = _complete(none, sorted(set(none["seed"]))).get("none", set())
        if not none_games:
            continue
        # several runs of one seed (two draws pooled) become runs of their own for the
        # aggregates; the seed pairs average them
        none = none.assign(seed=none.groupby(["game", "seed"]).cumcount() * 1000 + none["seed"])
        for method, games in methods.items():
            games = sorted(games & none_games)
            if method == "none" or not games:
                continue
            done = runs[runs["finished"] & runs["game"].isin(games)]
            done = done[method_labels(done) == method].assign(objective=method, scheme="all")
            # each draw a run of its own, as many draws as it has on every (game, seed), so
            # that every game has the same runs
            draws = done.groupby(["game", "seed"]).cumcount()
            kept = int(done.groupby(["game", "seed"]).size().min())
            done = done.assign(seed=draws * 1000 + done["seed"])[(draws < kept).to_numpy()]
            both = pd.concat([done, none[none["game"].isin(games)].assign(scheme="all")])
            table = objective_table(both, None, reps=reps, seed=seed)
            pairs = seed_pairs(
                done.assign(seed=done["seed"] % 1000)
                .groupby(["game", "seed"])["normalized"]
                .mean(),
                none.assign(seed=none["seed"] % 1000)
                .groupby(["game", "seed"])["normalized"]
                .mean(),
            )
            rows.append(
                {
                    "method": method,
                    "baseline": name,
                    "games": len(games),
                    "seeds": len(seeds),
                    "runs": kept,
                    "iqm": table.loc[method, "iqm"],
                    "none_iqm": table.loc["none", "iqm"],
                    "p_improve": table.loc[method, "p_improve_value"],
                    "p_improve_lower": table.loc[method, "p_improve_lower"],
                    "p_improve_upper": table.loc[method, "p_improve_upper"],
                    **{k: pairs[k] for k in ("above", "below", "level", "sign_p")},
                }
            )
    return pd.DataFrame(rows)


def baseline_markdown(
    runs: pd.DataFrame,
    baselines: dict[str, pd.DataFrame],
    reps: int = 2000,
    table: pd.DataFrame | None = None,
) -> str:
    """`baseline_table` as Markdown: a row per method, per baseline its IQM beside none's, its
    probability of improvement and its seed pairs."""
    table = baseline_table(runs, baselines, reps=reps) if table is None else table
    if table.empty:
        return "No method and baseline have finished a common game on every seed yet.\n"
    names = [b for b in baselines if b in set(table["baseline"])]
    header = ["method", "games"] + [
        f"against {b}: {c}"
        for b in names
        for c in ("IQM / none's", "P(improvement over none)", "above / below / level", "p")
    ]
    note = (
        "Normalised scores; 95% stratified bootstrap CIs for the probability of improvement; "
        "above / below / level: each (game, seed) against the same seed's scratch agents (the "
        "mean of its runs), with the two-sided sign test's p (level pairs left out)."
    )
    rows = []
    order = table.groupby("method")["iqm"].mean().sort_values(ascending=False).index
    for method in order:
        part = table[table["method"] == method].set_index("baseline")
        games, runs = int(part["games"].iloc[0]), int(part["runs"].iloc[0])
        cells = [method, str(games) if runs == 1 else f"{games}, {runs} draws pooled"]
        for name in names:
            if name not in part.index:
                cells += ["-"] * 4
                continue
            r = part.loc[name]
            poi = (r["p_improve"], r["p_improve_lower"], r["p_improve_upper"])
            cells += [
                f"{r['iqm']:.3f} / {r['none_iqm']:.3f}",
                format_interval(*poi, digits=2),
                f"{int(r['above'])} / {int(r['below'])} / {int(r['level'])}",
                "-" if pd.isna(r["sign_p"]) else f"{r['sign_p']:.2f}",
            ]
        rows.append(cells)
    return table_markdown(header, rows, note)


def _pairs(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """Each (method, game, seed) both runs finished: ``first`` and ``second`` normalised."""
    first, second = _same_precision(first, second)
    frames = []
    for name, runs in (("first", first), ("second", second)):
        done = runs[runs["finished"]]
        done = done.assign(method=method_labels(done))
        frames.append(done.groupby(["method", "game", "seed"])["normalized"].mean().rename(name))
    return pd.concat(frames, axis=1, join="inner").dropna().reset_index()


def write_rerun_figure(
    first: pd.DataFrame,
    second: pd.DataFrame,
    path: str | Path,
    names: tuple[str, str] = ("first", "second"),
) -> Path:
    """`rerun_svg` written to ``path`` atomically, only over a file `rerun_svg` wrote.

    Raises:
        FileExistsError: ``path`` holds something else (it is left as it is).
    """
    return write_svg(path, rerun_svg(_pairs(first, second), names), RERUN_MARK, "a rerun figure")
