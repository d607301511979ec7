"""The state-variable probes of one encoder's features, each label read by its kind
(`sgi_lab.probes.kinds`): ``category`` labels by a linear classifier (weighted F1, AtariARI's
summaries over them), ``ordinal``, ``counter`` and ``coordinate`` labels by a ridge regression
onto the value (held-out R^2, beside the R^2 of predicting the training mean). AtariARI's
coordinates (its localization categories, classified by its protocol) also get the ridge
regression beside their F1, as before.

A result holds both summaries and never averages F1 with R^2: ``overall``,
``across_categories`` and ``categories`` are F1 over the classified labels; ``r2`` the mean R^2
over the regressed ones (and per kind); ``regression`` the coordinates' ridge regressions;
``headline`` says which of them leads (`sgi_lab.probes.kinds.headline`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sgi_lab.probes.kinds import REGRESSION_KINDS, headline, metric_of
from sgi_lab.probes.linear import (
    ProbeSettings,
    accuracy,
    category_averages,
    f1_weighted,
    fit_probes,
    fit_ridge_regressions,
    label_entropy,
    majority_predictions,
    r_squared,
    train_design,
    within_accuracy,
)

__all__ = ["COORDINATE_CATEGORIES", "baseline_summary", "state_probes"]

COORDINATE_CATEGORIES = ("agent_localization", "small_object_localization", "other_localization")
"""AtariARI's categories whose variables are coordinates: classified by its protocol, with a
ridge regression beside."""


def _regressed(variable) -> bool:
    """Whether a variable gets a ridge regression: its kind asks for one, or it is one of
    AtariARI's coordinates (classified, with the regression beside)."""
    return variable.kind in REGRESSION_KINDS or variable.category in COORDINATE_CATEGORIES


def state_probes(
    features: np.ndarray,
    labels: np.ndarray,
    split: dict[str, np.ndarray],
    variables: tuple,
    settings: ProbeSettings,
) -> dict[str, Any]:
    """Fit and score the state-variable probes, each variable by its kind, with their
    baselines (the majority class for F1, the training mean for R^2).

    Args:
        features: (N, D) features of every row probed.
        labels: (N, V) integer labels of ``variables``.
        split: positions into ``features`` of the train, val and test rows.
        variables: `sgi_lab.probes.atariari.Variable` per label column.
        settings: the readouts' settings.

    Returns:
        ``variables`` (per label: kind, metric, score and the metric's details),
        ``dropped_low_entropy``, the F1 summaries (``categories``, ``overall``,
        ``across_categories``, ``majority``), ``r2``, ``regression`` and ``headline``.
    """
    train, val, test = (split[k] for k in ("train", "val", "test"))
    entropy = {v.name: label_entropy(labels[train, i]) for i, v in enumerate(variables)}
    keep = [i for i, v in enumerate(variables) if entropy[v.name] >= settings.entropy_threshold]
    dropped = [v.name for v in variables if entropy[v.name] < settings.entropy_threshold]
    kept = [variables[i] for i in keep]
    y = labels[:, keep].astype(np.int64)
    classified = [j for j, v in enumerate(kept) if v.kind == "category"]
    regressed = [j for j, v in enumerate(kept) if _regressed(v)]
    # One standardization and eigenbasis serves least squares and the ridge regressions.
    needs_design = (settings.readout == "lstsq" and classified) or regressed
    design = train_design(features[train]) if needs_design else None
    per_var = {v.name: _describe(v, entropy[v.name]) for v in kept}
    if classified:
        yc = y[:, classified]
        probes = fit_probes(features[train], yc[train], features[val], yc[val], settings, design)
        pred = probes.predict(features[test])
        majority = majority_predictions(yc[train], len(test))
        for c, j in enumerate(classified):
            per_var[kept[j].name].update(
                f1=f1_weighted(yc[test, c], pred[:, c]),
                accuracy=accuracy(yc[test, c], pred[:, c]),
                majority_f1=f1_weighted(yc[test, c], majority[:, c]),
                classes=len(probes.classes[c]),
                steps=probes.steps[c],
            )
    for j, scores in _ridge_scores(features, y, split, regressed, settings, design).items():
        per_var[kept[j].name].update(scores)
    for entry in per_var.values():
        entry["score"] = entry[entry["metric"]]
    return _summaries(per_var, dropped, {v.name: v.category for v in variables})


def _describe(variable, entropy: float) -> dict[str, Any]:
    """What a label's entry records before it is scored: where it is, its kind and metric."""
    return {
        "category": variable.category,
        "address": variable.address,
        "kind": variable.kind,
        "metric": metric_of(variable.kind),
        "entropy": entropy,
    }


def _ridge_scores(features, y, split, columns, settings, design) -> dict[int, dict[str, Any]]:
    """``{column: {"r2", "baseline_r2", "within_accuracy", "ridge_alpha", "values"}}``: each
    column's ridge regression onto its value, scored on the test split; ``baseline_r2`` is the
    R^2 of predicting the training mean (at most 0), ``values`` how many distinct values
    training saw."""
    if not columns:
        return {}
    train, val, test = (split[k] for k in ("train", "val", "test"))
    yc = y[:, columns].astype(np.float64)
    ridge = fit_ridge_regressions(
        features[train], yc[train], features[val], yc[val], settings, design
    )
    pred = ridge.predict(features[test])
    return {
        j: {
            "r2": r_squared(yc[test, c], pred[:, c]),
            "baseline_r2": r_squared(yc[test, c], np.full(len(test), yc[train, c].mean())),
            "within_accuracy": within_accuracy(yc[test, c], pred[:, c], settings.within),
            "ridge_alpha": ridge.alphas[c],
            "values": int(len(np.unique(yc[train, c]))),
        }
        for c, j in enumerate(columns)
    }


def _summaries(
    per_var: dict[str, dict[str, Any]], dropped: list[str], categories: dict[str, str | None]
) -> dict[str, Any]:
    """The result of `state_probes` from its per-label entries: F1 summaries over the
    classified labels, R^2 over the regressed ones, the coordinates' regressions, the
    headline."""
    f1s = {n: v["f1"] for n, v in per_var.items() if v["metric"] == "f1"}
    majority = {n: v["majority_f1"] for n, v in per_var.items() if v["metric"] == "f1"}
    result = {
        "variables": per_var,
        "dropped_low_entropy": dropped,
        **_f1_summary(f1s, categories),
        "majority": _f1_summary(majority, categories),
        "r2": r2_summary(per_var),
        "regression": _regression_summary(per_var),
    }
    result["headline"] = headline(result)
    return result


def _f1_summary(scores: dict[str, float], categories: dict[str, str | None]) -> dict[str, Any]:
    """`category_averages` of F1s, with None (not NaN) for a summary over no label."""
    summary = category_averages(scores, categories)
    if not scores:
        summary["overall"] = summary["across_categories"] = None
    return summary


def r2_summary(per_var: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The labels read by R^2: their mean R^2 and per kind, the mean R^2 of predicting the
    training mean (``baseline``) and the mean accuracy within the tolerance."""
    rows = {n: v for n, v in per_var.items() if v.get("metric") == "r2"}
    if not rows:
        return {"variables": 0}
    kinds: dict[str, list[float]] = {}
    for v in rows.values():
        kinds.setdefault(v["kind"], []).append(v["r2"])
    return {
        "variables": len(rows),
        "mean": float(np.mean([v["r2"] for v in rows.values()])),
        "kinds": {k: float(np.mean(s)) for k, s in kinds.items()},
        "baseline": float(np.mean([v["baseline_r2"] for v in rows.values()])),
        "within_accuracy": float(np.mean([v["within_accuracy"] for v in rows.values()])),
    }


def _regression_summary(per_var: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The coordinates' ridge regressions (AtariARI's localization variables, MinAtar's
    ``coordinate`` labels): mean R^2 and within-tolerance accuracy, and their mean F1 where
    they were also classified."""
    rows = [
        v
        for v in per_var.values()
        if "r2" in v and (v["kind"] == "coordinate" or v["category"] in COORDINATE_CATEGORIES)
    ]
    if not rows:
        return {"variables": 0}
    summary = {
        "variables": len(rows),
        "r2": float(np.mean([v["r2"] for v in rows])),
        "within_accuracy": float(np.mean([v["within_accuracy"] for v in rows])),
    }
    f1s = [v["f1"] for v in rows if "f1" in v]
    if f1s:
        summary["f1"] = float(np.mean(f1s))
    return summary


def baseline_summary(result: dict[str, Any]) -> dict[str, Any]:
    """What a baseline's entry (the random-init encoder's) keeps of its `state_probes`
    result: the summaries, the headline, and each label's score by its own metric."""
    keys = ("overall", "across_categories", "categories", "regression", "r2", "headline")
    summary = {k: result.get(k) for k in keys}
    summary["variables"] = {k: v["score"] for k, v in (result.get("variables") or {}).items()}
    return summary
