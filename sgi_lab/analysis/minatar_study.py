"""The MinAtar objective study's results (`params/experiments/minatar_objectives.yaml`,
docs/results/minatar.md): each finished agent's normalised score, the objectives' aggregates
with stratified bootstrap CIs, each one's probability of improvement over no pretraining, the
per-game table, the Spearman correlation of the objectives' ranking with the paper's
``tab:controls_hns``, and learning curves.

An experiment folder holds ``finetune/<label>/<game>__s<seed>/`` per agent (`sgi_lab.experiments`),
where ``<label>`` is ``<scheme>__<objective>`` for a pretrained start (``reduced_lr__s_g``,
``naive__sgi``) or the config alone from scratch (``sgi_none``). Only agents whose run finished
with an evaluation count; the tables say how many did of how many planned, so an interim
reading is never mistaken for the study's.

    from sgi_lab.analysis.minatar_study import study_markdown
    from sgi_lab.experiments import load_graph

    folder = "outputs/experiments/minatar_objectives"
    print(study_markdown(folder, planned=180, graph=load_graph(folder)))
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.analysis.minatar_probes import (
    PROBE_COLUMNS,
    PROBE_WORDS,
    probe_finetune_table,
    probe_metric,
)
from sgi_lab.analysis.probe_study import (
    experiment_probe_frame,
    format_interval,
    mean_ci,
    rank_correlation_with_paper,
)
from sgi_lab.analysis.report import read_run
from sgi_lab.base.files import atomic_write_text, check_ours, read_jsonl
from sgi_lab.metrics.aggregate import (
    aggregate_with_ci,
    probability_of_improvement_with_ci,
    seed_pairs,
)
from sgi_lab.metrics.minatar import normalized_score
from sgi_lab.runs.status import read_status
from sgi_lab.viz.method_curves import method_curves_svg

SCRATCH = {"sgi_none": "none", "sgi_none_2x": "none"}
"""Finetuning labels that start from scratch -> the objective name ``none``."""
METRICS = ("iqm", "mean", "median")
BUDGET_SUFFIX = r"_\d+x$"
"""A finetuning budget's mark on a scheme's name (``reduced_lr_2x``: twice the study's steps)."""
SVG_MARK = "sgi-lab minatar_study.budget_svg"
"""Inside every figure `budget_svg` draws: what `budget_study_markdown` may overwrite."""
SCHEME_WORDS = {
    "reduced_lr": "with reduced learning rates (the paper's scheme)",
    "naive": "naively (every rate the same)",
    "frozen": "with the encoder frozen",
}


def split_label(label: str) -> tuple[str, str]:
    """``(objective, scheme)`` of a finetuning folder's label: ``reduced_lr__s_g`` ->
    ``("s_g", "reduced_lr")``; ``sgi_none`` -> ``("none", "none")``."""
    if label in SCRATCH:
        return SCRATCH[label], "none"
    scheme, _, objective = label.partition("__")
    return (objective, scheme) if objective else (label, "none")


def study_runs(folder: str | Path) -> pd.DataFrame:
    """One row per agent folder under ``folder/finetune``: ``label, objective, scheme, game,
    seed, finished, score`` (the evaluation's mean return), ``normalized`` (its normalised
    score) and ``normalization`` (``MinAtar score`` or ``HNS``); unfinished agents have NaNs."""
    rows = []
    for label_dir in sorted((Path(folder) / "finetune").glob("*")):
        if not label_dir.is_dir():
            continue
        objective, scheme = split_label(label_dir.name)
        for agent in sorted(p for p in label_dir.iterdir() if (p / "status.json").exists()):
            run = read_run(agent)
            evaluation = run.evaluation
            finished = (read_status(agent) or {}).get("state") == "finished" and bool(evaluation)
            rows.append(
                {
                    "label": label_dir.name,
                    "objective": objective,
                    "scheme": scheme,
                    "game": run.game,
                    "seed": run.seed,
                    "finished": finished,
                    "score": evaluation.get("mean", np.nan) if finished else np.nan,
                    "normalized": _normalized(evaluation) if finished else np.nan,
                    # an unfinished agent has no evaluation to say which score it uses
                    "normalization": evaluation.get("normalization", "HNS") if finished else None,
                    "folder": str(agent),
                }
            )
    return pd.DataFrame(rows)


def _normalized(evaluation: dict[str, Any]) -> float:
    value = evaluation.get("normalized_score", evaluation.get("hns"))
    return np.nan if value is None else float(value)


def _scheme_agents(runs: pd.DataFrame, scheme: str | None) -> tuple[pd.DataFrame, list[str]]:
    """The finished agents of one scheme (plus ``none``), and the games every one of their
    objectives has finished on every seed: the games the aggregates are over."""
    done = runs[runs["finished"]]
    if scheme is not None:
        done = done[(done["scheme"] == scheme) | (done["objective"] == "none")]
    if done.empty:
        return done, []
    seeds = sorted(done["seed"].unique())
    full = done.groupby(["objective", "game"])["seed"].nunique() == len(seeds)
    games_of = full[full].reset_index().groupby("objective")["game"].apply(set)
    return done, sorted(set.intersection(*games_of)) if len(games_of) else []


def complete_objectives(runs: pd.DataFrame, scheme: str | None = "reduced_lr") -> list[str]:
    """The objectives of one scheme (and ``none``) that have finished every game of the study on
    every seed: every (game, seed) any agent of the study runs. The others are still running."""
    if runs.empty:
        return []
    planned = set(zip(runs["game"], runs["seed"], strict=True))
    done, _ = _scheme_agents(runs, scheme)
    finished = done.groupby("objective").apply(
        lambda part: set(zip(part["game"], part["seed"], strict=True)), include_groups=False
    )
    return sorted(o for o, pairs in finished.items() if pairs >= planned)


def score_matrices(runs: pd.DataFrame, scheme: str | None = "reduced_lr") -> dict[str, np.ndarray]:
    """``{objective: (seeds, games) normalised scores}`` over the finished agents of one scheme
    (plus ``none``), only games every included objective has finished on every seed of, so that
    every matrix has the same columns (rliable's stratified bootstrap needs that)."""
    done, common = _scheme_agents(runs, scheme)
    if not common:
        return {}
    out = {}
    for objective, part in done[done["game"].isin(common)].groupby("objective"):
        if set(part["game"]) != set(common):
            continue
        table = part.pivot_table(index="seed", columns="game", values="normalized")
        out[objective] = table[common].to_numpy()
    return out


def objective_table(
    runs: pd.DataFrame, scheme: str | None = "reduced_lr", reps: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Per objective: IQM, mean and median normalised score with 95% stratified bootstrap CIs,
    and the probability of improvement over no pretraining with its CI, over the games every
    objective finished (``games``) and the seeds (``runs``)."""
    matrices = score_matrices(runs, scheme)
    if not matrices:
        return pd.DataFrame()
    aggregates = aggregate_with_ci(matrices, metrics=METRICS, reps=reps, seed=seed)
    table = aggregates.pivot_table(index="method", columns="metric", values="value")
    for bound in ("lower", "upper"):
        wide = aggregates.pivot_table(index="method", columns="metric", values=bound)
        table = table.join(wide.add_suffix(f"_{bound}"))
    pairs = [(k, "none") for k in matrices if k != "none"] if "none" in matrices else []
    if pairs:  # none alone (a study of other names) has nothing to improve on
        poi = probability_of_improvement_with_ci(matrices, pairs, reps=reps, seed=seed)
        poi = poi.set_index("x")[["value", "lower", "upper"]].add_prefix("p_improve_")
        table = table.join(poi)
    first = next(iter(matrices.values()))
    table["runs"] = first.shape[0]
    table["games"] = first.shape[1]
    return table.sort_values("iqm", ascending=False)


def per_game_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean normalised score over finished seeds, objective/scheme x game (``n`` seeds each)."""
    done = runs[runs["finished"]]
    if done.empty:
        return pd.DataFrame()
    done = done.assign(method=_method(done))
    return done.pivot_table(index="method", columns="game", values="normalized", aggfunc="mean")


def per_seed_markdown(runs: pd.DataFrame, methods: Sequence[str] | None = None) -> str:
    """Each finished agent's final evaluation (mean raw return), a row per game and seed and a
    column per method (``none``, ``sgi``, ``sgi (naive)``; ``methods`` picks and orders them),
    so that each seed can be read beside the same seed from scratch."""
    done = runs[runs["finished"]]
    if done.empty:
        return ""
    done = done.assign(method=_method(done))
    table = done.pivot_table(index=["game", "seed"], columns="method", values="score")
    columns = [m for m in (methods or table.columns) if m in table.columns]
    lines = ["| game | seed | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for (game, seed), row in table[columns].iterrows():
        cells = ["-" if pd.isna(row[m]) else f"{row[m]:.2f}" for m in columns]
        lines.append(f"| {game} | {int(seed)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _method(frame: pd.DataFrame) -> pd.Series:
    return pd.Series(
        np.where(
            frame["scheme"].isin(["reduced_lr", "none"]),
            frame["objective"],
            frame["objective"] + " (" + frame["scheme"] + ")",
        ),
        index=frame.index,
    )


def _with_readouts(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished agents with their ``method`` and both readouts in raw returns: ``eval``
    (the final evaluation's mean) and ``training`` (the mean of every training episode, read
    from each run's metrics.jsonl; a frame that has them already is returned as it is)."""
    if "training" in runs.columns:
        return runs
    done = runs[runs["finished"]]
    if done.empty:
        return done
    training = {}
    for run in done.itertuples():
        returns = [
            row.get("episode/return", row.get("charts/episodic_return"))
            for row in read_jsonl(Path(run.folder) / "metrics.jsonl")
        ]
        returns = [float(r) for r in returns if r is not None]
        training[run.Index] = float(np.mean(returns)) if returns else np.nan
    return done.assign(method=_method(done), training=pd.Series(training), eval=done["score"])


READOUTS = ("eval", "training")
"""How a finished agent is scored: its final evaluation, or the mean of its training episodes."""


def _check_readout(readout: str) -> None:
    if readout not in READOUTS:
        raise ValueError(f"readout {readout!r}: not one of {', '.join(READOUTS)}")


def readout_runs(runs: pd.DataFrame, readout: str = "training") -> pd.DataFrame:
    """The finished agents of ``runs`` scored by ``readout`` (`READOUTS`, `_with_readouts`):
    ``score`` and ``normalized`` replaced by that readout's raw return and its normalised
    score, so every table built on them (`objective_table`, `sgi_lab.analysis.reruns`'
    baseline table) can be read a second way. An agent without a training episode is left
    out (``finished`` false) under ``training``.

    Raises:
        ValueError: an unknown ``readout`` (named, with the known ones).
    """
    _check_readout(readout)
    done = _with_readouts(runs)
    if done.empty:
        return done
    scores = done[readout].astype(float)
    normalized = normalized_score(list(done["game"]), scores.to_numpy())  # NaN stays NaN
    return done.assign(score=scores, normalized=normalized, finished=scores.notna())


def paired_table(
    runs: pd.DataFrame, reference: str = "none", readouts: Sequence[str] = ("eval", "training")
) -> pd.DataFrame:
    """Each method against ``reference`` seed by seed: over every (game, seed) both finished,
    under each readout (`_with_readouts`), how many pairs end ``above``, ``below`` and
    ``level`` (equal returns) and the two-sided sign test's ``p`` (level pairs left out), with
    the ``games`` and ``pairs`` counted. A row per method and readout; unlike the aggregates it
    uses every game a method finished, not only the games every method shares. ``runs``:
    `study_runs` rows, or `_with_readouts` of them (then read once for several tables)."""
    done = _with_readouts(runs)
    if done.empty or reference not in set(done["method"]):
        return pd.DataFrame()
    rows = []
    for readout in readouts:
        wide = done.pivot_table(index=["game", "seed"], columns="method", values=readout)
        for method in [m for m in wide.columns if m != reference]:
            both = wide[[method, reference]].dropna()
            if both.empty:
                continue
            games = both.index.get_level_values("game").nunique()
            rows.append(
                {"method": method, "readout": readout, "reference": reference, "games": games}
                | seed_pairs(both[method], both[reference])
            )
    return pd.DataFrame(rows)


def paired_markdown(table: pd.DataFrame, methods: Sequence[str] | None = None) -> str:
    """`paired_table` as Markdown: a row per method, per readout ``above / below / level`` and
    the sign test's p, and the games the pairs span (``methods`` picks and orders the rows)."""
    if table.empty:
        return ""
    readouts = list(dict.fromkeys(table["readout"]))
    names = {"eval": "final evaluation", "training": "training episodes"}
    header = ["method", "games", "pairs"]
    header += [f"{names.get(r, r)}: {c}" for r in readouts for c in ("above / below / level", "p")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    order = list(dict.fromkeys(table["method"]))
    if methods is not None:
        order = [m for m in methods if m in order] + [m for m in order if m not in methods]
    for method in order:
        part = table[table["method"] == method].set_index("readout")
        first = part.iloc[0]
        cells = [method, str(int(first["games"])), str(int(first["pairs"]))]
        for readout in readouts:
            if readout not in part.index:
                cells += ["-", "-"]
                continue
            r = part.loc[readout]
            cells += [f"{int(r['above'])} / {int(r['below'])} / {int(r['level'])}"]
            cells += [f"{r['sign_p']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_game_returns(runs: pd.DataFrame) -> pd.DataFrame:
    """Two readouts of each finished agent, in raw returns, per method and game: the final
    evaluation's mean return (``eval``) and the mean return of every training episode of the
    run (``training``: the area under its learning curve, which counts how soon it learned),
    each as the mean over seeds with a 95% t interval (``method, game, readout, value, lower,
    upper, seeds``). A conclusion the normalised aggregates draw should hold under both."""
    done = _with_readouts(runs)
    if done.empty:
        return pd.DataFrame()
    rows = []
    for (method, game), group in done.groupby(["method", "game"]):
        for readout in ("eval", "training"):
            value, lower, upper = mean_ci(group[readout])
            rows.append(
                {"method": method, "game": game, "readout": readout, "value": value}
                | {"lower": lower, "upper": upper, "seeds": int(group[readout].notna().sum())}
            )
    return pd.DataFrame(rows)


def returns_markdown(returns: pd.DataFrame) -> str:
    """`per_game_returns` as one Markdown table: a row per method, per game the evaluation
    and the training-episode mean, each ``value [lower, upper]`` over seeds."""
    games = sorted(returns["game"].unique())
    header = ["method"] + [f"{g.split('/')[-1]} {r}" for g in games for r in ("eval", "training")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, group in returns.groupby("method", sort=False):
        cells = [method]
        for game in games:
            for readout in ("eval", "training"):
                row = group[(group["game"] == game) & (group["readout"] == readout)]
                if row.empty:
                    cells.append("-")
                    continue
                r = row.iloc[0]
                cells.append(format_interval(r["value"], r["lower"], r["upper"], digits=2))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paper_rank_correlation(table: pd.DataFrame, metric: str = "iqm") -> dict[str, Any]:
    """Spearman's rank correlation of the objectives' ``metric`` with the paper's
    ``tab:controls_hns`` median HNS (pretraining on Mixed Atari data, the ResNet): the objectives
    both have (``none`` is SGI-None)."""
    return rank_correlation_with_paper(table[metric])


def _probe_lines(graph: Any, table: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """`probe_finetune_table`'s section of the study's Markdown ([] without probes)."""
    if graph is None or table.empty:
        return []
    _, games = _scheme_agents(runs, "reduced_lr")  # the games the IQMs are over
    probes = experiment_probe_frame(graph)
    metric = probe_metric(probes)  # the R^2 headline where the results have it, else F1
    frame, corr = probe_finetune_table(probes, table, metric, games=games)
    if frame.empty:
        return []
    rho = (
        "n/a (fewer than 3 objectives)"
        if corr["rho"] is None
        else (f"{corr['rho']:.2f} (p = {corr['p']:.2f}, {corr['n']} objectives)")
    )
    rows = frame.assign(
        probe=frame["probe"].map("{:.3f}".format), iqm=frame["iqm"].map("{:.3f}".format)
    ).rename(columns={"probe": PROBE_COLUMNS[metric]})
    return [
        "### Probes beside finetuning",
        "",
        f"Each encoder's linear probe on the game-state labels ({PROBE_WORDS[metric]}; random "
        "encoders for none), on the games the IQMs are over, beside its reduced-lr finetuning "
        f"IQM. Spearman rho between the two: {rho}.",
        "",
        _markdown(rows),
        "",
    ]


def learning_curves(runs: pd.DataFrame, bin_steps: int = 1000) -> pd.DataFrame:
    """Training episodes' returns, binned by agent step: ``objective, scheme, game, seed,
    step`` (the bin's end: an episode ending at step 2,000 is in the bin (1,000, 2,000]) and
    ``return`` (mean of the episodes ending in it), from each agent's ``metrics.jsonl`` (rows
    with ``episode/return``)."""
    rows = []
    for run in runs.itertuples():
        path = Path(run.folder) / "metrics.jsonl"
        if not path.exists():
            continue
        for row in read_jsonl(path):
            value = row.get("episode/return", row.get("charts/episodic_return"))
            if value is None:
                continue
            rows.append(
                {
                    "objective": run.objective,
                    "scheme": run.scheme,
                    "game": run.game,
                    "seed": run.seed,
                    "step": max(1, -(-int(row["step"]) // bin_steps)) * bin_steps,
                    "return": float(value),
                }
            )
    if not rows:
        return pd.DataFrame()
    keys = ["objective", "scheme", "game", "seed", "step"]
    return pd.DataFrame(rows).groupby(keys, as_index=False)["return"].mean()


def table_markdown(header: Sequence[str], rows: Sequence[Sequence[str]], note: str = "") -> str:
    """A Markdown table of string cells, after ``note`` (a paragraph) when there is one."""
    lines = [note, ""] if note else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def _markdown(frame: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table (index first), without the tabulate package."""
    header = [frame.index.name or "", *map(str, frame.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in frame.iterrows():
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join([str(name), *cells]) + " |")
    return "\n".join(lines)


def aggregates_markdown(table: pd.DataFrame) -> str:
    """`objective_table`'s rows as Markdown: IQM, mean, median and P(improvement over none)."""
    lines = [
        "| method | IQM | mean | median | P(improvement over none) |",
        "|---|---|---|---|---|",
    ]
    for name, row in table.iterrows():
        cells = [format_interval(row[m], row[f"{m}_lower"], row[f"{m}_upper"]) for m in METRICS]
        poi = [row.get(f"p_improve_{k}") for k in ("value", "lower", "upper")]
        lines.append(f"| {name} | " + " | ".join([*cells, format_interval(*poi, digits=2)]) + " |")
    return "\n".join(lines)


def _schemes(runs: pd.DataFrame) -> pd.DataFrame:
    """SGI's agents under each scheme as their own methods (``sgi (naive)``), with ``none``."""
    sgi = runs[runs["objective"].isin(["sgi", "none"])]
    suffix = sgi["scheme"].map(lambda s: "" if s in ("none", "reduced_lr") else f" ({s})")
    return sgi.assign(objective=sgi["objective"] + suffix)


def budget_curve(table: pd.DataFrame) -> pd.DataFrame:
    """The pretraining-budget curve in an `objective_table`: the objectives named
    ``<objective>_<steps>`` (``sgi_500``, ``sgi_8000``: `minatar_pretrain_budget.yaml`) with
    ``none`` at 0 steps, by objective and steps, with their IQM, mean and P(improvement over
    none) and CIs; empty unless some objective was pretrained at two budgets or more."""
    rows = []
    for name, row in table.iterrows():
        base, _, steps = str(name).rpartition("_")
        if base and steps.isdigit():
            rows.append({"objective": base, "steps": int(steps), "method": name, **row})
    curve = pd.DataFrame(rows)
    if curve.empty or curve.groupby("objective")["steps"].nunique().max() < 2:
        return pd.DataFrame()
    if "none" in table.index:
        zero = [
            {"objective": o, "steps": 0, "method": "none", **table.loc["none"]}
            for o in set(curve["objective"])
        ]
        curve = pd.concat([pd.DataFrame(zero), curve], ignore_index=True)
    return curve.sort_values(["objective", "steps"], ignore_index=True)


def budget_markdown(curve: pd.DataFrame) -> str:
    """`budget_curve` as Markdown: a row per objective and pretraining budget."""
    lines = [
        "| objective | pretraining steps | IQM | mean | P(improvement over none) |",
        "|---|---|---|---|---|",
    ]
    for row in curve.itertuples(index=False):
        row = row._asdict()
        cells = [
            format_interval(row[m], row[f"{m}_lower"], row[f"{m}_upper"]) for m in ("iqm", "mean")
        ]
        poi = [row.get(f"p_improve_{k}") for k in ("value", "lower", "upper")]
        poi_cell = "-" if row["steps"] == 0 else format_interval(*poi, digits=2)
        lines.append(
            f"| {row['objective']} | {row['steps']:,} | " + " | ".join([*cells, poi_cell]) + " |"
        )
    return "\n".join(lines)


def budget_runs(
    folder: str | Path, study: str | Path | None = None, objective: str = "sgi", steps: int = 2000
) -> pd.DataFrame:
    """The budget experiment's agents (`study_runs` of ``folder``) joined with the curve's 0 and
    ``steps`` points taken from the objective study at ``study``: its no-pretraining agents and
    its ``objective`` agents under the schemes the budget folder has, renamed
    ``<objective>_<steps>`` (the same data seed, params and
    seeds: rerunning them in the budget experiment would repeat the same numbers). An agent the
    budget folder has itself (an older budget experiment's ``sgi_none``) is kept, not doubled."""
    runs = study_runs(folder)
    if study is None:
        return runs
    extra = study_runs(study)
    if extra.empty:
        return runs
    # the budget experiment's own schemes only (its frozen-less curve gets no frozen point)
    schemes = set(runs["scheme"]) if not runs.empty else set()
    keep = (extra["objective"] == "none") | (
        (extra["objective"] == objective) & extra["scheme"].isin(schemes)
    )
    extra = extra[keep].copy()
    extra.loc[extra["objective"] == objective, "objective"] = f"{objective}_{steps}"
    if not runs.empty:
        key = ["objective", "scheme", "game", "seed"]
        have = set(map(tuple, runs[key].to_numpy().tolist()))
        extra = extra[[tuple(k) not in have for k in extra[key].to_numpy().tolist()]]
    return pd.concat([runs, extra], ignore_index=True)


def budget_study_markdown(
    folder: str | Path,
    study: str | Path | None = None,
    reps: int = 2000,
    figure: str | Path | None = None,
) -> str:
    """The pretraining-budget experiment's page section: for each finetuning scheme, the
    curve (`budget_curve`) over `budget_runs` of ``folder`` and the objective ``study``, then
    each seed by budget, each budget against scratch seed by seed (`paired_table`) and the
    per-game raw returns of every budget under both readouts. With ``figure`` (an .svg
    path), the curves drawn there too (`budget_svg`; written atomically, and only over a file
    `budget_svg` wrote: it carries `SVG_MARK`) and linked from the section by its file name."""
    runs = budget_runs(folder, study)
    if runs.empty:
        return f"No finetuning agent under {folder}/finetune yet.\n"
    lines = [f"Finished agents: {int(runs['finished'].sum())} ({_normalization(runs)}).", ""]
    schemes = [s for s in ("reduced_lr", "naive", "frozen") if (runs["scheme"] == s).any()]
    drawn: dict[str, pd.DataFrame] = {}
    for scheme in schemes:
        table = objective_table(runs, scheme, reps=reps)
        curve = budget_curve(table) if not table.empty else pd.DataFrame()
        if not curve.empty:
            drawn[scheme.replace("_", " ")] = curve
        lines += [f"### Finetuned {SCHEME_WORDS.get(scheme, scheme)}", ""]
        if curve.empty:
            lines += ["No two budgets have finished on every seed of a common game yet.", ""]
            continue
        lines += [_over(table), "", budget_markdown(curve), ""]
    if figure is not None and drawn:
        path = Path(figure)
        check_ours(path, SVG_MARK, "a budget figure")
        atomic_write_text(path, budget_svg(drawn))
        lines += [f"![IQM by SGI pretraining budget, each scheme]({path.name})", ""]
    done = runs[runs["finished"]]
    by_steps = sorted(
        {o for o in done["objective"] if o.rpartition("_")[2].isdigit()},
        key=lambda o: (o.rpartition("_")[0], int(o.rpartition("_")[2])),
    )  # sgi_500, sgi_2000, sgi_8000: the names `budget_curve` reads steps from
    for scheme in schemes:
        suffix = "" if scheme == "reduced_lr" else f" ({scheme})"
        methods = ["none"] + [f"{o}{suffix}" for o in by_steps]
        part = done[(done["scheme"] == scheme) | (done["objective"] == "none")]
        table = per_seed_markdown(part, methods=methods)
        if table:
            lines += [
                f"### Each seed, finetuned {SCHEME_WORDS.get(scheme, scheme)}: the final "
                "evaluation (mean raw return) by pretraining steps, beside the same seed from "
                "scratch",
                "",
                table,
                "",
            ]
    readouts = _with_readouts(runs)  # each run's metrics read once, for the next two tables
    order = [f"{o}{'' if s == 'reduced_lr' else f' ({s})'}" for s in schemes for o in by_steps]
    pairs = paired_markdown(paired_table(readouts), order)
    if pairs:
        lines += [
            "### Each budget against the same seed from scratch: pairs above / below / level "
            "under each readout, two-sided sign test p (level pairs left out)",
            "",
            pairs,
            "",
        ]
    returns = per_game_returns(readouts)
    if not returns.empty:
        lines += [
            "### Per game, raw returns: the final evaluation and the mean of every training "
            "episode; mean over seeds [95% t interval]",
            "",
            returns_markdown(returns),
            "",
        ]
    return "\n".join(lines)


def finetune_budget_runs(folders: Mapping[str, str | Path], readout: str = "eval") -> pd.DataFrame:
    """The agents of experiments that differ only in their finetuning budget, ``{budget:
    folder}`` (``{"10k steps": study, "20k steps": twice}``), as `study_runs` rows with a
    ``budget`` column and ``method`` (``sgi``, ``sgi (naive)``, ``none``: a scheme's budget
    mark dropped, so that a method has one name at every budget), scored by ``readout``
    (`readout_runs`: ``training`` reads each agent by its training episodes; only the finished
    agents then).

    Raises:
        ValueError: an unknown ``readout``."""
    _check_readout(readout)
    frames = []
    for budget, folder in folders.items():
        runs = study_runs(folder)
        if runs.empty:
            continue
        if readout != "eval":
            runs = readout_runs(runs, readout).drop(columns=["method"])
            if runs.empty:
                continue
        runs = runs.assign(
            budget=budget, scheme=runs["scheme"].str.replace(BUDGET_SUFFIX, "", regex=True)
        )
        frames.append(runs.assign(method=_method(runs)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def finetune_budget_table(
    folders: Mapping[str, str | Path],
    reps: int = 2000,
    seed: int = 0,
    readout: str = "eval",
    methods: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Each method at each finetuning budget (`finetune_budget_runs`): IQM and mean with 95%
    stratified bootstrap CIs, P(improvement over none) with its CI, and each (game, seed) pair
    against the same seed from scratch (`seed_pairs`: ``above_none``, ``below_none``,
    ``level_none`` of ``pairs``, and the two-sided sign test's ``sign_p``). Over the methods
    every budget has and the games where each of them finished every seed at every budget, so
    that the budgets are compared on the same games; empty until two budgets share a method
    besides none on a game. ``readout``: `finetune_budget_runs`'. ``methods``: only these
    (scratch always), so that the methods done first are compared on every game they share
    before the others catch up.

    Raises:
        ValueError: an unknown ``readout``, or a name in ``methods`` no budget has (named, with
            the methods there are)."""
    runs = finetune_budget_runs(folders, readout)
    if runs.empty:
        return pd.DataFrame()
    if methods is not None:
        unknown = sorted(set(methods) - set(runs["method"]))
        if unknown:
            known = ", ".join(sorted(set(runs["method"])))
            raise ValueError(f"methods {unknown}: not in these experiments (they have: {known})")
        runs = runs[runs["method"].isin({"none", *methods})]
    done = runs[runs["finished"]]
    seeds = sorted(done["seed"].unique())
    budgets = list(folders)
    full = done.groupby(["budget", "method", "game"])["seed"].nunique() == len(seeds)
    full = full[full].reset_index()
    methods = set.intersection(*(set(full.loc[full["budget"] == b, "method"]) for b in budgets))
    if "none" not in methods or len(methods) < 2:
        return pd.DataFrame()
    games_of = full[full["method"].isin(methods)].groupby(["budget", "method"])["game"].apply(set)
    games = sorted(set.intersection(*games_of)) if len(games_of) else []
    if not games:
        return pd.DataFrame()
    rows = []
    for budget in budgets:
        part = done[(done["budget"] == budget) & done["method"].isin(methods)]
        part = part[part["game"].isin(games)].assign(objective=lambda d: d["method"], scheme="all")
        table = objective_table(part, None, reps=reps, seed=seed)
        scores = part.pivot_table(index=["game", "seed"], columns="method", values="normalized")
        for method, row in table.iterrows():
            pairs = seed_pairs(scores[method], scores["none"]) if method != "none" else {}
            rows.append(
                {
                    "budget": budget,
                    "method": method,
                    **row,
                    "above_none": pairs.get("above"),
                    "below_none": pairs.get("below"),
                    "level_none": pairs.get("level"),
                    "sign_p": pairs.get("sign_p"),
                    "pairs": len(scores),
                }
            )
    return pd.DataFrame(rows)


def finetune_budget_markdown(
    folders: Mapping[str, str | Path],
    reps: int = 2000,
    table: pd.DataFrame | None = None,
    readout: str = "eval",
    methods: Sequence[str] | None = None,
) -> str:
    """`finetune_budget_table` as Markdown (``table``: the caller's, already computed): a row
    per method, per budget its IQM, its P(improvement over none) and its seed pairs against
    scratch (above / below / level, sign test p); ``readout`` and ``methods``:
    `finetune_budget_table`'s."""
    if table is None:
        table = finetune_budget_table(folders, reps=reps, readout=readout, methods=methods)
    if table.empty:
        return "No method besides none has finished a common game at every budget yet.\n"
    budgets = [b for b in folders if b in set(table["budget"])]
    header = ["method"] + [
        f"{b}: {c}"
        for b in budgets
        for c in ("IQM", "P(improvement over none)", "against none: above / below / level", "p")
    ]
    note = (
        f"Over {int(table['games'].iloc[0])} games x {int(table['runs'].iloc[0])} seeds at each "
        "budget (the same games); 95% stratified bootstrap CIs (rliable's method); against "
        "none: the (game, seed) pairs where the method scored above, below and level with the "
        "same seed from scratch at the same budget, and the two-sided sign test's p (level "
        "pairs left out)."
    )
    if readout == "training":
        note += " Each agent scored by the mean return of its training episodes."
    rows = []
    order = table.groupby("method")["iqm"].mean().sort_values(ascending=False).index
    for method in order:
        cells = [method]
        for budget in budgets:
            row = table[(table["budget"] == budget) & (table["method"] == method)].iloc[0]
            cells.append(format_interval(row["iqm"], row["iqm_lower"], row["iqm_upper"]))
            if method == "none":
                cells += ["-", "-", "-"]
                continue
            poi = [row[f"p_improve_{k}"] for k in ("value", "lower", "upper")]
            counts = (int(row[f"{k}_none"]) for k in ("above", "below", "level"))
            cells += [
                format_interval(*poi, digits=2),
                " / ".join(map(str, counts)),
                f"{row['sign_p']:.2f}",
            ]
        rows.append(cells)
    return table_markdown(header, rows, note)


def finetune_budget_returns(
    folders: Mapping[str, str | Path], readout: str = "eval"
) -> pd.DataFrame:
    """Each method's raw return on each game at each finetuning budget (`finetune_budget_runs`'
    ``{budget: folder}``), read by ``readout`` (`READOUTS`): the mean over the finished seeds
    with its 95% t interval (``budget, method, game, value, lower, upper, seeds``). Only the
    methods every budget has, but every game any agent finished, unlike the aggregates: where a
    budget has not reached a game yet the game is simply absent at that budget, so a reader sees
    per game where the budgets part. Empty until every budget has a finished agent.

    Raises:
        ValueError: an unknown ``readout``."""
    _check_readout(readout)
    parts = []
    for budget, folder in folders.items():
        runs = finetune_budget_runs({budget: folder})
        returns = per_game_returns(runs) if not runs.empty else pd.DataFrame()
        if returns.empty:
            return pd.DataFrame()
        returns = returns[returns["readout"] == readout].drop(columns="readout")
        parts.append(returns.assign(budget=budget))
    methods = set.intersection(*(set(part["method"]) for part in parts))
    table = pd.concat(parts, ignore_index=True)
    table = table[table["method"].isin(methods)]
    return table[["budget", "method", "game", "value", "lower", "upper", "seeds"]]


def finetune_budget_returns_markdown(
    folders: Mapping[str, str | Path], readout: str = "eval"
) -> str:
    """`finetune_budget_returns` as Markdown: a row per method and budget (scratch first, then
    the others by name: raw returns are on each game's own scale), a column per game, each cell
    ``mean [lower, upper]`` over seeds, with the number of seeds where it is fewer than the most
    any cell has."""
    table = finetune_budget_returns(folders, readout)
    if table.empty:
        return "No agent has finished at every budget yet.\n"
    games = sorted(table["game"].unique())
    budgets = [b for b in folders if b in set(table["budget"])]
    most = int(table["seeds"].max())
    methods = sorted(set(table["method"]), key=lambda m: (m != "none", m))
    header = ["method", "budget"] + [g.split("/")[-1] for g in games]
    rows = []
    for method in methods:
        for budget in budgets:
            cells = [method, budget]
            for game in games:
                cell = table[
                    (table["method"] == method)
                    & (table["budget"] == budget)
                    & (table["game"] == game)
                ]
                if cell.empty:
                    cells.append("-")
                    continue
                r = cell.iloc[0]
                text = format_interval(r["value"], r["lower"], r["upper"], digits=2)
                seeds = int(r["seeds"])
                text += f" ({seeds} seed{'s' * (seeds != 1)})" if seeds < most else ""
                cells.append(text)
            rows.append(cells)
    what = "the final evaluation" if readout == "eval" else "the mean of every training episode"
    note = (
        f"Raw returns, {what}: mean over seeds [95% t interval]; '-' where the budget has not "
        "finished the game yet."
    )
    return table_markdown(header, rows, note)


def budget_svg(
    curves: dict[str, pd.DataFrame],
    width: int = 520,
    height: int = 260,
    x_label: str = "SGI pretraining steps (batch 256; not to scale)",
    ticks: Mapping[int, str] | None = None,
) -> str:
    """Pretraining-budget curves (`budget_curve` per scheme: ``{"reduced lr": curve, ...}``) as
    a standalone SVG (GitHub shows it in a Markdown page): IQM against pretraining steps, one
    line per scheme with its 95% CI as error bars, the budgets equally spaced (0, 500, 2,000,
    8,000 are not to scale), the from-scratch IQM as a dashed line across. ``x_label`` and
    ``ticks`` (``{steps: label}``; the steps with thousands separators where absent) let it
    draw another budget (`finetune_budget_svg`)."""
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
    curves = {k: c for k, c in curves.items() if not c.empty}
    steps = sorted({int(s) for c in curves.values() for s in c["steps"]})
    if not steps:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>'
    highs = [v for c in curves.values() for v in c["iqm_upper"]]
    lows = [v for c in curves.values() for v in c["iqm_lower"]]
    y0, y1 = min(0.0, min(lows)), max(highs) * 1.1 if max(highs) > 0 else 1.0
    pad_l, pad_r, pad_t, pad_b = 48, 130, 12, 40

    def x_of(step: int) -> float:
        span = max(len(steps) - 1, 1)
        return pad_l + 20 + steps.index(step) / span * (width - pad_l - pad_r - 40)

    def y_of(value: float) -> float:
        return height - pad_b - (value - y0) / (y1 - y0) * (height - pad_t - pad_b)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-size="11" font-family="sans-serif">',
        f"<desc>{SVG_MARK}</desc>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<polyline points="{pad_l},{pad_t} {pad_l},{height - pad_b} '
        f'{width - pad_r},{height - pad_b}" fill="none" stroke="#888"/>',
        f'<text x="{(pad_l + width - pad_r) / 2:.0f}" y="{height - 6}" text-anchor="middle">'
        f"{html.escape(x_label)}</text>",
        f'<text x="{pad_l - 6}" y="{y_of(y1) + 4:.1f}" text-anchor="end">{y1:.2f}</text>',
        f'<text x="{pad_l - 6}" y="{y_of(y0) + 4:.1f}" text-anchor="end">{y0:.2f}</text>',
        f'<text x="12" y="{pad_t + 8}" transform="rotate(-90 12 {pad_t + 8})" '
        'text-anchor="end">IQM MinAtar score</text>',
    ]
    for step in steps:
        parts.append(
            f'<text x="{x_of(step):.1f}" y="{height - pad_b + 14}" text-anchor="middle">'
            f"{html.escape((ticks or {}).get(step, f'{step:,}'))}</text>"
        )
    scratch = next((c[c["steps"] == 0] for c in curves.values() if (c["steps"] == 0).any()), None)
    if scratch is not None and not scratch.empty:
        y = y_of(float(scratch["iqm"].iloc[0]))
        parts.append(
            f'<line x1="{pad_l}" y1="{y:.1f}" x2="{width - pad_r}" y2="{y:.1f}" stroke="#888" '
            f'stroke-dasharray="4 3"/><text x="{width - pad_r + 4}" y="{y + 4:.1f}">'
            "from scratch</text>"
        )
    for i, (label, curve) in enumerate(curves.items()):
        colour = colours[i % len(colours)]
        shift = (i - (len(curves) - 1) / 2) * 6  # side by side, so the error bars do not hide
        rows = curve.sort_values("steps")
        points = [(x_of(int(r.steps)) + shift, r) for r in rows.itertuples()]
        line = " ".join(f"{x:.1f},{y_of(r.iqm):.1f}" for x, r in points)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, r in points:
            parts.append(
                f'<line x1="{x:.1f}" y1="{y_of(r.iqm_lower):.1f}" x2="{x:.1f}" '
                f'y2="{y_of(r.iqm_upper):.1f}" stroke="{colour}"/>'
                f'<circle cx="{x:.1f}" cy="{y_of(r.iqm):.1f}" r="3" fill="{colour}"/>'
            )
        ly = pad_t + 14 + 16 * i
        parts.append(
            f'<line x1="{width - pad_r + 4}" y1="{ly - 4}" x2="{width - pad_r + 22}" '
            f'y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{width - pad_r + 26}" y="{ly}">{html.escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def finetune_budget_svg(table: pd.DataFrame) -> str:
    """`finetune_budget_table` as a figure (`budget_svg`): each method's IQM with its 95% CI at
    each finetuning budget, a line per method (scratch's too: its level moves with the budget),
    the budgets in the table's order and equally spaced."""
    budgets = list(dict.fromkeys(table["budget"]))
    curves = {
        method: rows.assign(steps=[budgets.index(b) + 1 for b in rows["budget"]])
        for method, rows in table.groupby("method", sort=False)
    }
    curves = dict(sorted(curves.items(), key=lambda item: item[0] != "none"))
    over = f"{int(table['games'].iloc[0])} games x {int(table['runs'].iloc[0])} seeds"
    ticks = {i + 1: b for i, b in enumerate(budgets)}
    return budget_svg(curves, x_label=f"finetuning budget ({over})", ticks=ticks)


def write_finetune_budget_figure(
    folders: Mapping[str, str | Path],
    path: str | Path,
    table: pd.DataFrame | None = None,
    reps: int = 2000,
    readout: str = "eval",
) -> Path:
    """`finetune_budget_svg` of ``folders`` (or of the caller's ``table``) written to ``path``
    atomically, only over a figure of ours (`SVG_MARK`).

    Raises:
        FileExistsError: ``path`` holds something else (it is left as it is).
        ValueError: no method besides scratch has finished a common game at every budget."""
    path = Path(path)
    check_ours(path, SVG_MARK, "a budget figure")
    if table is None:
        table = finetune_budget_table(folders, reps=reps, readout=readout)
    if table.empty:
        raise ValueError("no method besides none has finished a common game at every budget yet")
    atomic_write_text(path, finetune_budget_svg(table))
    return path


CURVES_MARK = "sgi-lab minatar_study.curves_svg"
"""Inside every figure `curves_svg` draws: what `study_markdown` may overwrite."""


def curves_svg(
    curves: pd.DataFrame,
    methods: Sequence[str] | None = None,
    panel: tuple[int, int] = (210, 150),
) -> str:
    """Learning curves (`learning_curves`) as a standalone SVG
    (`sgi_lab.viz.method_curves.method_curves_svg`): one panel per game, the training episodes'
    return against agent steps, one line (colour, then dash) per method, the mean over the seeds
    that have an episode in the bin; ``methods``: which, in that order, default all."""
    frame = curves.assign(method=_method(curves)) if len(curves) else curves
    return method_curves_svg(frame, methods, panel, CURVES_MARK)


def write_curves_figure(
    runs: pd.DataFrame,
    path: str | Path,
    methods: Sequence[str] | None = None,
    bin_steps: int = 2000,
) -> Path:
    """`curves_svg` of the finished agents of ``runs`` (binned every ``bin_steps`` agent
    steps) written to ``path`` atomically, only over a file `curves_svg` wrote.

    Raises:
        FileExistsError: ``path`` holds something else (it is left as it is).
    """
    path = Path(path)
    check_ours(path, CURVES_MARK, "a learning-curve figure")
    atomic_write_text(path, curves_svg(learning_curves(runs[runs["finished"]], bin_steps), methods))
    return path


def _over(table: pd.DataFrame) -> str:
    """What an `objective_table`'s aggregates are over, and how their CIs were made."""
    return (
        f"Over {int(table['games'].iloc[0])} games x {int(table['runs'].iloc[0])} seeds; "
        "95% stratified bootstrap CIs (rliable's method)."
    )


def _normalization(runs: pd.DataFrame) -> str:
    """The finished agents' normalisation (``MinAtar score``, ``HNS``), or both named."""
    names = sorted(runs.loc[runs["finished"], "normalization"].dropna().unique())
    return " and ".join(names) if names else "no agent finished yet"


def study_markdown(
    folder: str | Path,
    planned: int | None = None,
    reps: int = 2000,
    graph: Any = None,
    curves: str | Path | None = None,
    methods: Sequence[str] | None = None,
    per_seed: bool = False,
) -> str:
    """The study's tables as Markdown: how many agents finished (of ``planned``), the objectives'
    aggregates and probabilities of improvement over no pretraining, SGI's schemes, the
    per-game table and the correlation with the paper's ranking; with the experiment's
    ``graph`` (``sgi_lab.experiments.load_graph(folder)``), its encoders' probes beside their
    finetuning scores too; with ``curves`` (an .svg path), the finished agents' learning curves
    drawn there (`write_curves_figure`, ``methods`` in that order) and linked; each method
    against scratch seed by seed under both readouts (`paired_table`); with ``per_seed``, each
    agent's final evaluation beside the same seed's (`per_seed_markdown`)."""
    runs = study_runs(folder)
    if runs.empty:
        return f"No finetuning agent under {folder}/finetune yet.\n"
    # an experiment at another finetuning budget (``reduced_lr_2x``) reads as the study does
    runs = runs.assign(scheme=runs["scheme"].str.replace(BUDGET_SUFFIX, "", regex=True))
    lines = [
        f"Finished agents: {int(runs['finished'].sum())} of {planned or len(runs)} "
        f"({_normalization(runs)}: 0 = uniform random, 1 = the reference score).",
        "",
    ]
    sections = (
        ("Objectives (reduced-lr finetuning)", runs, "reduced_lr"),
        ("SGI's finetuning schemes", _schemes(runs), None),
    )
    for title, part, scheme in sections:
        running = pd.DataFrame()
        if scheme and not part.empty:
            # An objective still running would shrink every row to the games it has finished:
            # the complete ones are tabled over every game, the running ones beside them.
            complete = complete_objectives(part, scheme)
            if len(complete) >= 2 and set(complete) < set(
                _scheme_agents(part, scheme)[0]["objective"]
            ):
                running = objective_table(part, scheme, reps=reps)
                part = part[part["objective"].isin(complete)]
        table = objective_table(part, scheme, reps=reps) if not part.empty else pd.DataFrame()
        lines += [f"### {title}", ""]
        if table.empty:
            lines += ["No game has finished on every seed for every method yet.", ""]
            continue
        lines += [_over(table), "", aggregates_markdown(table), ""]
        if not running.empty:
            lines += [
                "With the objectives still running, over the games every objective in it has "
                "finished (" + ", ".join(sorted(set(running.index) - set(table.index))) + "):",
                "",
                _over(running),
                "",
                aggregates_markdown(running),
                "",
            ]
        curve = budget_curve(table) if scheme else pd.DataFrame()
        if not curve.empty:
            lines += [
                "Pretraining budget (the same agents, by steps):",
                "",
                budget_markdown(curve),
                "",
            ]
        if scheme:
            lines += _probe_lines(graph, table, part)
        correlation = paper_rank_correlation(table) if scheme else {"rho": None}
        if correlation["rho"] is not None:
            lines += [
                "Spearman correlation of the IQM ranking with the paper's tab:controls_hns "
                f"median HNS: rho = {correlation['rho']:.2f} (p = {correlation['p']:.2f}, "
                f"{correlation['n']} objectives).",
                "",
            ]
    readouts = _with_readouts(runs)  # each run's metrics read once, for two tables
    per_game = per_game_table(runs)
    if not per_game.empty:
        lines += ["### Per game (mean normalised score over finished seeds)", ""]
        lines += [_markdown(per_game), ""]
        lines += [
            "### Per game, raw returns: the final evaluation and the mean of every training "
            "episode (how soon it learned); mean over seeds [95% t interval]",
            "",
            returns_markdown(per_game_returns(readouts)),
            "",
        ]
    if curves is not None:
        path = write_curves_figure(runs, curves, methods)
        lines += [
            "### Learning curves: the return of the training episodes ending in each 2,000-step "
            "bin, mean over seeds",
            "",
            f"![Training returns against agent steps, per game and method]({Path(path).name})",
            "",
        ]
    pairs = paired_markdown(paired_table(readouts), methods)
    if pairs:
        lines += [
            "### Each method against the same seed from scratch",
            "",
            "Over every game and seed both finished: how many pairs end above, below and level "
            "with the agent of the same game and seed trained from scratch, under each readout "
            "(the final evaluation; the mean of every training episode), and the two-sided sign "
            "test's p (level pairs left out).",
            "",
            pairs,
            "",
        ]
    seeds = per_seed_markdown(runs, methods) if per_seed else ""
    if seeds:
        lines += [
            "### Each agent's final evaluation (mean raw return), each seed beside the same seed "
            "from scratch",
            "",
            seeds,
            "",
        ]
    return "\n".join(lines)


__all__ = [
    "aggregates_markdown",
    "budget_curve",
    "budget_markdown",
    "budget_runs",
    "budget_svg",
    "budget_study_markdown",
    "curves_svg",
    "finetune_budget_markdown",
    "finetune_budget_runs",
    "finetune_budget_table",
    "learning_curves",
    "objective_table",
    "paired_markdown",
    "paired_table",
    "paper_rank_correlation",
    "per_game_returns",
    "probe_finetune_table",
    "per_game_table",
    "per_seed_markdown",
    "returns_markdown",
    "score_matrices",
    "split_label",
    "study_markdown",
    "study_runs",
    "write_curves_figure",
]
