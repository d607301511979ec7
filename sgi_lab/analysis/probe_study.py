"""Probe results as tables: one row per probed encoder and store, summaries per objective with
95% confidence intervals over seeds, and the rank correlation with the paper's finetuning scores.

`probe_frame` reads probes.json files (``sgi-lab report``, ``representations.ipynb``);
`experiment_probe_frame` reads an experiment's probe tasks (``params/experiments/probes.yaml``);
`sgi_lab.studies.probe_report` writes its report and the study's Markdown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.base.files import read_jsonl, read_mapping
from sgi_lab.data.store_format import read_manifest
from sgi_lab.metrics.aggregate import mean_ci
from sgi_lab.metrics.paper import paper_aggregates
from sgi_lab.probes.atariari import CATEGORIES
from sgi_lab.probes.encoder_probe import PROBES_FILE
from sgi_lab.probes.results import read_probes
from sgi_lab.runs.status import read_status, run_folders
from sgi_lab.viz.markdown import format_interval

__all__ = [
    "PAPER_CONFIGS",
    "entry_row",
    "experiment_probe_frame",
    "kind_columns",
    "load_probe_results",
    "objective_of",
    "objective_summary",
    "overall_by_objective",
    "paired_changes",
    "paper_rank_correlation",
    "probe_curves",
    "probe_folders",
    "probe_frame",
    "rank_correlation_with_paper",
    "reading_label",
    "reading_labels",
    "readout_groups",
    "training_probe_curves",
    "curve_summary",
    "summary_table",
]

METRICS = (
    "overall",
    "across_categories",
    *CATEGORIES,
    "state_r2",
    "coordinate_r2",
    "coordinate_within",
    "reward_f1",
    "majority",
    "cosine",
)
"""The summarised metrics: ``overall`` is the mean F1 over every classified variable,
``across_categories`` the mean of the category means (AtariARI's headline); ``state_r2`` the
mean held-out R^2 over the labels read by regression (`sgi_lab.probes.kinds`: MinAtar's
positions, counters and ramp; a MinAtar encoder's headline); ``coordinate_r2`` and
``coordinate_within`` the coordinates' ridge regressions (mean R^2, accuracy within +-2 units);
``cosine`` the collapse diagnostic (mean pairwise cosine of the projection). F1 and R^2 are
separate metrics, never averaged together."""
DEFAULT_READOUT = ("lstsq", "renormalized")
"""The readout and features of an entry that records neither (written before they were chosen),
and of the default `ProbeSettings`."""
PAPER_CONFIGS = {
    "none": "SGI-None",
    "random_init": "SGI-None",
    "s": "S",
    "g": "G",
    "i": "I",
    "s_g": "S+G",
    "s_i": "S+I",
    "g_i": "G+I",
    "sgi": "SGI-M",
    "sgi_m": "SGI-M",
}
"""Objective names of our runs -> the config keys of the paper's ``tab:controls_hns`` (which
pretrains on Mixed data; random init stands beside SGI-None, the agent without pretraining)."""


def objective_of(params: str | None) -> str | None:
    """The objective of a pretraining params name: ``s_g_seed2`` -> ``s_g``."""
    return None if params is None else re.sub(r"_seed\d+$", "", params)


def entry_row(entry: dict[str, Any], folder: str | os.PathLike | None = None) -> dict[str, Any]:
    """One probes.json entry as a flat row."""
    encoder = entry.get("encoder", {})
    row: dict[str, Any] = {
        "folder": str(folder) if folder is not None else None,
        "game": entry.get("store", {}).get("game"),
        "kind": encoder.get("kind"),
        "encoder": encoder.get("encoder"),
        "params": encoder.get("params"),
        "objective": "random_init"
        if encoder.get("kind") == "random_init"
        else objective_of(encoder.get("params")),
        "seed": encoder.get("seed"),
        # Entries written before the readouts were chosen used least squares on renormalized maps.
        "readout": entry.get("readout")
        or entry.get("settings", {}).get("readout", DEFAULT_READOUT[0]),
        "features": entry.get("features")
        or entry.get("settings", {}).get("features", DEFAULT_READOUT[1]),
        # the probe frames asked for (None: every frame of the store); with readout and
        # features, what makes two F1s one measurement (`reading_label`)
        "max_frames": entry.get("settings", {}).get("max_frames"),
        "overall": entry.get("overall"),
        "across_categories": entry.get("across_categories"),
        # Probed from a run that had not finished (`read_probes` flags it): every view marks it.
        "unfinished": bool(entry.get("unfinished") or encoder.get("unfinished")),
    }
    for category in CATEGORIES:
        row[category] = entry.get("categories", {}).get(category)
    majority = entry.get("majority", {})
    row["majority"] = majority.get("overall")
    # the majority-class baseline on the same split, per metric the tables read
    row["majority_across_categories"] = majority.get("across_categories")
    for category in CATEGORIES:
        row[f"majority_{category}"] = majority.get("categories", {}).get(category)
    regression = entry.get("regression") or {}
    row["coordinate_r2"] = regression.get("r2")
    row["coordinate_within"] = regression.get("within_accuracy")
    row["coordinate_f1"] = regression.get("f1")
    row["random_init"] = (entry.get("random_init") or {}).get("overall")
    row.update(kind_columns(entry))
    row["reward_f1"] = entry.get("reward", {}).get("f1")
    row["action_accuracy"] = entry.get("action", {}).get("accuracy")
    row["action_majority"] = entry.get("action", {}).get("majority_accuracy")
    row["frames"] = sum(entry.get("split", {}).get("rows", {}).values())
    row["seconds"] = entry.get("seconds", {}).get("total")
    row["store"] = entry.get("store", {}).get("path")
    return row


def kind_columns(entry: dict[str, Any]) -> dict[str, Any]:
    """What an entry holds beyond AtariARI's F1s (None in an entry made before it was recorded):
    its headline and the metric it is (``f1`` or ``r2``), the mean R^2 of the labels read by
    regression (``state_r2``, its per-kind means ``r2_<kind>``, the training-mean baseline's
    ``state_r2_baseline``) and the random encoder's, the collapse diagnostic on the projection
    (``cosine``, ``cosine_random_init``, ``cosine_step0``) and whether the test split held under
    1,000 rows (``small_test``, ``test_rows``)."""
    r2 = entry.get("r2") or {}
    headline = entry.get("headline") or {}
    random_init = entry.get("random_init") or {}
    collapse = entry.get("collapse") or {}
    split = entry.get("split") or {}
    row = {
        "headline_metric": headline.get("metric"),
        "headline": headline.get("value"),
        "state_r2": r2.get("mean"),
        "state_r2_baseline": r2.get("baseline"),
        "random_init_r2": (random_init.get("r2") or {}).get("mean"),
        "small_test": split.get("small_test"),
        "test_rows": (split.get("rows") or {}).get("test"),
    }
    for kind in ("coordinate", "counter", "ordinal"):
        row[f"r2_{kind}"] = (r2.get("kinds") or {}).get(kind)
    for name, column in (
        ("encoder", "cosine"),
        ("random_init", "cosine_random_init"),
        ("step0", "cosine_step0"),
    ):
        row[column] = (collapse.get(name) or {}).get("projection")
    return row


def probe_frame(
    folders: Iterable[str | os.PathLike],
    readout: str | None = None,
    features: str | None = None,
    current_only: bool = True,
) -> pd.DataFrame:
    """Every probes.json entry of ``folders`` (run folders or probes files), one row each; an
    entry without a seed (a pretraining run's) gets its run's (``config.yaml``). ``readout``
    and ``features``: only the entries made with them (None: every one); when both are given,
    one reading is asked for, so an encoder probed on the same store and split with several
    probe-frame budgets (a study's 10k-frame reading beside its all-frames one) keeps only the
    entry read on the most frames. ``current_only=False`` also reads the entries of models no
    longer there (an archived study keeps its runs' probes.json, not their model.pt:
    `read_probes`)."""
    rows, keys = [], []
    for folder in folders:
        path = Path(folder)
        for entry in read_probes(path, current_only):
            row = entry_row(entry, path)
            if readout is not None and row["readout"] != readout:
                continue
            if features is not None and row["features"] != features:
                continue
            if row["seed"] is None:  # a pretraining run's seed (a probes file sits in its run)
                row["seed"] = _config_seed(path if path.is_dir() else path.parent)
            rows.append(row)
            encoder, store = entry.get("encoder", {}), entry.get("store", {})
            keys.append(
                (
                    str(path),
                    encoder.get("source"),
                    encoder.get("step"),
                    encoder.get("seed"),
                    store.get("fingerprint") or store.get("path"),
                    entry.get("settings", {}).get("split_seed"),
                )
            )
    frame = pd.DataFrame(rows)
    if frame.empty or readout is None or features is None:
        return frame
    fullest = frame.assign(_key=keys).sort_values("frames", kind="stable")
    return fullest.drop_duplicates("_key", keep="last").drop(columns="_key").sort_index()


def _config_seed(folder: Path) -> int | None:
    seed = read_mapping(folder / "config.yaml").get("seed")
    return int(seed) if isinstance(seed, int) else None


def experiment_probe_frame(graph: Any) -> pd.DataFrame:
    """The result of each finished probe task of an experiment graph, one row each, with the
    objective (the pretraining config without ``_seedN``, or ``random_init``) and its seed."""

    rows = []
    for task in graph.tasks:
        if task.kind != "probe":
            continue
        manifest = read_manifest(task.probe["store"])
        if manifest is None:
            continue
        fingerprint = manifest.fingerprint or manifest.content_fingerprint()
        entries = [
            e
            for e in read_probes(task.folder)
            if e.get("store", {}).get("fingerprint") == fingerprint
            and e.get("settings", {}).get("split_seed") == task.probe["split_seed"]
            and e.get("settings", {}).get("max_frames") == task.probe["max_frames"]
            # the readout the task asked for (an experiment's probe tasks use the default)
            and e.get("settings", {}).get("readout", DEFAULT_READOUT[0])
            == task.probe.get("readout", DEFAULT_READOUT[0])
            and e.get("settings", {}).get("features", DEFAULT_READOUT[1])
            == task.probe.get("features", DEFAULT_READOUT[1])
        ]
        if not entries:
            continue
        row = entry_row(entries[-1], task.folder)
        row["max_frames"] = task.probe["max_frames"]
        base = task.probe["objective"]
        if base == "none":
            row["objective"], row["seed"] = "random_init", task.probe["seed"]
        else:
            row["objective"], row["seed"] = objective_of(base), _config_seed(task.folder)
        rows.append(row)
    return pd.DataFrame(rows)


def objective_summary(
    frame: pd.DataFrame, metrics: Iterable[str] = METRICS, by: str = "objective"
) -> pd.DataFrame:
    """Per objective (or other column ``by``, e.g. the ablation explorer's ``method``) and
    metric: the mean over seeds of each seed's mean over games, with a 95% t interval over
    seeds (``<by>, metric, value, lower, upper, seeds, games, unfinished``: rows of runs that
    had not finished)."""
    rows = []
    if frame.empty:
        return pd.DataFrame(
            columns=[by, "metric", "value", "lower", "upper", "seeds", "games", "unfinished"]
        )
    _check_one_readout(frame)
    for name, group in frame.groupby(by, sort=False):
        for metric in metrics:
            if metric not in group or group[metric].isna().all():
                continue
            per_seed = group.groupby("seed", dropna=False)[metric].mean()
            value, lower, upper = mean_ci(per_seed.to_numpy())
            rows.append(
                {
                    by: name,
                    "metric": metric,
                    "value": value,
                    "lower": lower,
                    "upper": upper,
                    "seeds": int(per_seed.notna().sum()),
                    "games": int(group["game"].nunique()),
                    # Rows probed from runs that had not finished: a summary says how many.
                    "unfinished": int(group["unfinished"].fillna(False).astype(bool).sum())
                    if "unfinished" in group
                    else 0,
                }
            )
    return pd.DataFrame(rows)


def _check_one_readout(frame: pd.DataFrame) -> None:
    """Refuse a frame whose rows come from several readings (readouts, feature choices or
    probe-frame budgets): their F1s are not one measurement, and a mean over them would mix
    them."""
    if "readout" not in frame or "features" not in frame:
        return
    labels = sorted(set(reading_labels(frame)))
    if len(labels) > 1:
        raise ValueError(
            f"probe results of several readings ({'; '.join(labels)}): summarise one at a time "
            "(readout_groups, or probe_frame(..., readout=..., features=...), which keeps each "
            "encoder's fullest reading)"
        )


def reading_label(readout: Any, features: Any, max_frames: Any = None) -> str:
    """How a probe F1 was read, as text: ``lstsq, renormalized`` (every probe frame of the
    store), ``lstsq, renormalized, 10000 frames``."""
    label = f"{readout}, {features}"
    if max_frames is not None and not (isinstance(max_frames, float) and np.isnan(max_frames)):
        label += f", {int(max_frames)} frames"
    return label


def reading_labels(frame: pd.DataFrame) -> pd.Series:
    """`reading_label` of each row of a probe frame (missing readout or features: the default)."""
    frames = frame["max_frames"] if "max_frames" in frame else pd.Series(None, index=frame.index)
    return pd.Series(
        [
            reading_label(r, f, m)
            for r, f, m in zip(
                frame["readout"].fillna(DEFAULT_READOUT[0]),
                frame["features"].fillna(DEFAULT_READOUT[1]),
                frames.astype(object),
                strict=True,
            )
        ],
        index=frame.index,
        dtype=object,
    )


def paper_rank_correlation(
    summary: pd.DataFrame, metric: str = "overall", paper_metric: str = "median"
) -> dict[str, Any]:
    """Spearman's rank correlation between the objectives' probe ``metric`` and the paper's
    ``tab:controls_hns`` aggregate (``paper_metric``) for the objectives both have."""
    ours = summary[summary["metric"] == metric].set_index("objective")["value"]
    return rank_correlation_with_paper(ours, paper_metric)


def rank_correlation_with_paper(values: pd.Series, paper_metric: str = "median") -> dict[str, Any]:
    """Spearman's rank correlation of ``values`` (indexed by our objective names, `PAPER_CONFIGS`)
    with the paper's ``tab:controls_hns`` ``paper_metric``: ``{rho, p, n, pairs}``, rho and p
    None under 3 objectives in common."""
    from scipy import stats

    paper = paper_aggregates("tab:controls_hns").set_index("config")[paper_metric]
    pairs = [
        (name, float(values[name]), float(paper[PAPER_CONFIGS[name]]))
        for name in values.index
        if name in PAPER_CONFIGS and PAPER_CONFIGS[name] in paper.index
    ]
    if len(pairs) < 3:
        return {"rho": None, "p": None, "n": len(pairs), "pairs": pairs}
    rho, p = stats.spearmanr([a for _, a, _ in pairs], [b for _, _, b in pairs])
    return {"rho": float(rho), "p": float(p), "n": len(pairs), "pairs": pairs}


def summary_table(summary: pd.DataFrame, metrics: Iterable[str] = METRICS) -> pd.DataFrame:
    """Objectives x metrics, each cell ``mean [lower, upper]`` (for reports)."""

    if summary.empty:
        return pd.DataFrame()
    cells = [format_interval(*v) for v in summary[["value", "lower", "upper"]].to_numpy()]
    shown = summary.assign(cell=cells)
    table = shown.pivot(index="objective", columns="metric", values="cell")
    order = list(dict.fromkeys(summary["objective"]))
    return table.reindex(index=order, columns=[m for m in metrics if m in table.columns])


def readout_groups(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``frame``'s rows split by reading (`reading_label`: readout, features and probe-frame
    budget), the default readout first, then in name order: each group is one measurement that
    `objective_summary` may average."""
    if frame.empty:
        return []
    labels = reading_labels(frame)
    default = reading_label(*DEFAULT_READOUT)
    order = sorted(set(labels), key=lambda label: (not label.startswith(default), label))
    return [(label, frame[labels == label]) for label in order]


def probe_folders(paths: Iterable[str | os.PathLike], current_only: bool = True) -> list[Path]:
    """Folders holding probe results under ``paths`` (glob patterns expanded), in order, each
    once: the runs at each path (`sgi_lab.runs.status.run_folders`: the path itself when it is a
    run, else every run below it, an experiment's pretraining runs among them); the random
    encoders' folders of an experiment (``probes/*``) or a random encoder's folder given itself
    (``sgi-lab probe --random-init --out DIR``: probe results, not a run); a probes file. Only
    those with probe results are kept (``current_only=False``: results of models no longer
    there count, as in an archived study)."""
    import glob

    folders: list[Path] = []
    for item in paths:
        text = str(item)
        matches = sorted(glob.glob(text)) if any(c in text for c in "*?[") else [text]
        for match in map(Path, matches):
            if match.is_file() or (match / PROBES_FILE).is_file():
                folders.append(match)
            folders += run_folders(match)
            if (match / "experiment.json").is_file():
                folders += sorted(match.glob("probes/*"))
    return [f for f in dict.fromkeys(folders) if read_probes(f, current_only)]


def load_probe_results(
    paths: Iterable[str | os.PathLike],
    readout: str = DEFAULT_READOUT[0],
    features: str = DEFAULT_READOUT[1],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(one row per probed encoder and store, objective summary with 95% CIs over seeds)`` of
    the probe results under ``paths`` (see `probe_folders`) made with ``readout`` on
    ``features``; empty frames when there are none."""
    frame = probe_frame(probe_folders(paths), readout, features)
    return frame, objective_summary(frame)


def probe_curves(runs: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Probe F1 over pretraining: for each run, its checkpoints' probe results
    (``RUN/probes_ckpt_N.json``, from ``sgi-lab probe RUN/checkpoints/*.pt --data STORE``) and
    the final model's (``RUN/probes.json``), one row per (run, store, step), by step."""
    rows = []
    for run in runs:
        run = Path(run)
        if not run.is_dir():
            continue
        for path in [*sorted(run.glob("probes_ckpt_*.json")), run / "probes.json"]:
            for entry in read_probes(path):
                row = entry_row(entry, run)
                row["run"] = run.name
                row["step"] = entry.get("encoder", {}).get("step")
                rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    keys = ["run", "store", "step"]
    return frame.drop_duplicates(keys, keep="last").sort_values(keys, ignore_index=True)


def training_probe_curves(runs: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """The probes a pretraining run made of its own encoder as it trained (``probe_every``:
    the ``probe/`` keys of its metrics.jsonl), one row per (run, step): ``run, objective, seed,
    game, step, readout, features, overall, state_r2 (MinAtar's labels read by R^2),
    across_categories, coordinate_r2, coordinate_within, reward_f1`` and the categories AtariARI's variables fall in (a row
    written before the readout was recorded takes the run's config, else the default)."""

    rows = []
    for run in runs:
        run = Path(run)
        status = read_status(run) or {}
        params = status.get("params") or run.name.split("__")[0]
        config = read_mapping(run / "config.yaml")
        for metrics in read_jsonl(run / "metrics.jsonl"):
            if "probe/f1" not in metrics and "probe/r2" not in metrics:
                continue  # a MinAtar game with no classified label logs R^2 only
            row = {
                "run": run.name,
                "objective": objective_of(params),
                "seed": _config_seed(run),
                "game": status.get("game"),
                "step": int(metrics["step"]),
                "readout": metrics.get("probe/readout")
                or config.get("probe_readout", DEFAULT_READOUT[0]),
                "features": metrics.get("probe/features")
                or config.get("probe_features", DEFAULT_READOUT[1]),
                "overall": metrics.get("probe/f1"),
                "state_r2": metrics.get("probe/r2"),
                "across_categories": metrics.get("probe/f1_across_categories"),
                "coordinate_r2": metrics.get("probe/coordinate_r2"),
                "coordinate_within": metrics.get("probe/coordinate_within"),
                "reward_f1": metrics.get("probe/reward_f1"),
            }
            for category in CATEGORIES:
                row[category] = metrics.get(f"probe/f1_{category}")
            rows.append(row)
    return pd.DataFrame(rows)


def curve_summary(curves: pd.DataFrame, metric: str = "overall") -> pd.DataFrame:
    """Per objective and step of `training_probe_curves`: the mean over seeds of each seed's
    mean over games, with its 95% t interval (``objective, step, value, lower, upper, seeds``)."""
    rows = []
    for step, group in curves.groupby("step"):
        summary = objective_summary(group, [metric])
        for record in summary.to_dict("records"):
            rows.append({"step": int(step), **record})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    columns = ["objective", "step", "value", "lower", "upper", "seeds"]
    return frame[columns].sort_values(["objective", "step"], ignore_index=True)


def paired_changes(curves: pd.DataFrame, metric: str = "overall") -> pd.DataFrame:
    """Each run's change from its own step-0 probe (its initialisation, `probe_every`), per
    objective and later step: the mean over seeds of each seed's change (mean over games),
    with its 95% t interval (``objective, step, value, lower, upper, seeds``). Pairing every
    run with its own starting point takes the spread between initialisations out of the
    comparison: a change whose interval excludes 0 moved the probe, whatever the start.

    Raises:
        ValueError: runs without a step-0 probe, named (trained before step 0 was probed).
    """
    start = curves[curves["step"] == 0].set_index("run")[metric]
    missing = sorted(set(curves["run"]) - set(start.index))
    if missing:
        raise ValueError(
            f"no step-0 probe in {', '.join(missing)}: a paired change needs each run's own "
            "start (pretraining probes step 0 since 2026-11-26; probe_every > 0)"
        )
    later = curves[curves["step"] > 0].copy()
    later[metric] = later[metric].to_numpy() - later["run"].map(start).to_numpy()
    return curve_summary(later, metric)


def overall_by_objective(summary: pd.DataFrame, metric: str = "overall") -> dict[str, float]:
    """``{objective: mean F1}`` of an `objective_summary` ({} when it is empty)."""
    if summary.empty:
        return {}
    rows = summary[summary["metric"] == metric]
    return {str(k): float(v) for k, v in zip(rows["objective"], rows["value"], strict=True)}
