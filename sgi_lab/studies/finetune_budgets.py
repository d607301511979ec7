"""Budgets in a finetuning study: the pretraining-budget curve (the objectives named
``<objective>_<steps>``, `params/experiments/minatar_pretrain_budget.yaml`, joined with the study's
own ``none`` and SGI agents) and the same methods at several finetuning budgets (``{budget:
experiment folder}``: `params/experiments/minatar_objectives_2x.yaml` beside the study), as tables
and figures (`sgi_lab.viz.budget_figure`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from sgi_lab.base.files import check_ours
from sgi_lab.metrics.aggregate import seed_pairs
from sgi_lab.studies.finetune_study import (
    BUDGET_SUFFIX,
    check_readout,
    method_labels,
    normalization_of,
    objective_table,
    paired_table,
    per_game_returns,
    per_seed_markdown,
    readout_runs,
    study_runs,
    with_readouts,
)
from sgi_lab.viz.budget_figure import BUDGET_MARK, budget_svg, finetune_budget_svg
from sgi_lab.viz.markdown import format_interval, table_markdown
from sgi_lab.viz.study_tables import budget_markdown, over_note, paired_markdown, returns_markdown
from sgi_lab.viz.svg import write_svg

__all__ = [
    "budget_curve",
    "budget_runs",
    "budget_study_markdown",
    "finetune_budget_markdown",
    "finetune_budget_returns",
    "finetune_budget_returns_markdown",
    "finetune_budget_runs",
    "finetune_budget_table",
    "write_finetune_budget_figure",
]

SCHEME_WORDS = {
    "reduced_lr": "with reduced learning rates (the paper's scheme)",
    "naive": "naively (every rate the same)",
    "frozen": "with the encoder frozen",
}


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
    `budget_svg` wrote: it carries `BUDGET_MARK`) and linked from the section by its file name."""
    runs = budget_runs(folder, study)
    if runs.empty:
        return f"No finetuning agent under {folder}/finetune yet.\n"
    lines = [f"Finished agents: {int(runs['finished'].sum())} ({normalization_of(runs)}).", ""]
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
        lines += [over_note(table), "", budget_markdown(curve), ""]
    if figure is not None and drawn:
        path = write_svg(figure, budget_svg(drawn), BUDGET_MARK, "a budget figure")
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
    readouts = with_readouts(runs)  # each run's metrics read once, for the next two tables
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
    check_readout(readout)
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
        frames.append(runs.assign(method=method_labels(runs)))
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
    check_readout(readout)
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


def write_finetune_budget_figure(
    folders: Mapping[str, str | Path],
    path: str | Path,
    table: pd.DataFrame | None = None,
    reps: int = 2000,
    readout: str = "eval",
) -> Path:
    """`finetune_budget_svg` of ``folders`` (or of the caller's ``table``) written to ``path``
    atomically, only over a figure of ours (`BUDGET_MARK`).

    Raises:
        FileExistsError: ``path`` holds something else (it is left as it is).
        ValueError: no method besides scratch has finished a common game at every budget."""
    check_ours(path, BUDGET_MARK, "a budget figure")  # before the bootstrap, not after
    if table is None:
        table = finetune_budget_table(folders, reps=reps, readout=readout)
    if table.empty:
        raise ValueError("no method besides none has finished a common game at every budget yet")
    return write_svg(path, finetune_budget_svg(table), BUDGET_MARK, "a budget figure")
