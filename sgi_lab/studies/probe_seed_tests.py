"""Tests at the level of the independent unit: the seed.

In the probe studies every objective's run of seed s starts from the weights of random encoder
s, so the encoders of one seed share their initialisation: 12 encoders of 4 objectives and 3
seeds are 3 independent draws, not 12. A count such as "12 of 12 pairs lower" and a sign test
over the 12 treat them as independent and overstate the evidence. Here the values of one seed
are averaged first (over the objectives compared), and the test runs over the seeds.

With n seeds a two-sided sign test cannot give p below ``2 / 2**n`` (0.25 for 3 seeds, 0.5 for
2): three seeds in the same direction are consistent with a real effect and are not, by
themselves, evidence against none. A one-sample t test on the seed means can give a small p
with 3 seeds, but only by assuming the seed means are normal, which 3 values cannot check; it is
reported beside the sign test, never instead of it (`SEED_LEVEL_NOTE`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.analysis.probe_study import readout_groups
from sgi_lab.metrics.aggregate import mean_ci

__all__ = [
    "SEED_LEVEL_NOTE",
    "encoder_game_table",
    "inverse_groups",
    "paired_change_frame",
    "reading_seed_table",
    "seed_level_table",
    "seed_level_test",
    "seed_means",
    "sign_test_p",
]

SEED_LEVEL_NOTE = (
    "Seed level: the encoders of one seed share their initialisation, so each seed's values "
    "are averaged first and the tests run over the seeds. With 3 seeds a two-sided sign test "
    "cannot go below p = 0.25 (all three in one direction); the t test's p rests on the seed "
    "means being normal, which 3 values cannot check. Three seeds in one direction are "
    "consistent with an effect; they do not show how often another initialisation would agree."
)
"""What a test over 3 seeds can and cannot show, for a table's caption."""


def sign_test_p(lower: int, n: int) -> float:
    """Exact two-sided sign test: the probability under no effect (each unit below 0 with
    probability 1/2) of a split at least as uneven as ``lower`` of ``n``; 1 for n = 0."""
    from scipy import stats

    if n == 0:
        return 1.0
    return float(stats.binomtest(lower, n, 0.5).pvalue)


def seed_means(
    frame: pd.DataFrame,
    value: str = "value",
    unit: str = "seed",
    objectives: Iterable[str] | None = None,
) -> pd.Series:
    """Each seed's mean of ``value`` over its rows (the objectives compared, and games), the
    rows first restricted to ``objectives`` (None: all). Indexed by seed, in seed order."""
    if objectives is not None:
        frame = frame[frame["objective"].isin(list(objectives))]
    return frame.groupby(unit)[value].mean().sort_index()


def seed_level_test(values: Iterable[float] | pd.Series) -> dict[str, Any]:
    """Tests of one value per seed against 0: ``{seeds, mean, lower, upper, below, sign_p,
    min_sign_p, t_p}`` with the 95% t interval of the mean, how many seeds are below 0, the
    exact two-sided sign test and the smallest p it could reach with this many seeds, and the
    two-sided one-sample t test (None under 2 seeds, or when every value is equal)."""
    from scipy import stats

    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    mean, lower, upper = mean_ci(x)
    below = int((x < 0).sum())
    nonzero = int((x != 0).sum())
    t_p = None
    if len(x) >= 2 and np.ptp(x) > 0:
        t_p = float(stats.ttest_1samp(x, 0.0).pvalue)
    return {
        "seeds": int(len(x)),
        "mean": mean,
        "lower": lower,
        "upper": upper,
        "below": below,
        "sign_p": sign_test_p(below, nonzero),
        "min_sign_p": min(1.0, 2.0 * 0.5 ** len(x)) if len(x) else 1.0,
        "t_p": t_p,
    }


def _per_seed(frame: pd.DataFrame, group: Any, value: str) -> tuple[pd.Series, int]:
    """A group's value per seed and how many encoders it averages: ``[objectives]`` their seed
    means; ``([objectives], [others])`` the difference of the two seed means, seed by seed."""
    if isinstance(group, tuple):
        first, second = (list(g) for g in group)
        difference = seed_means(frame, value, objectives=first) - seed_means(
            frame, value, objectives=second
        )
        return difference.dropna(), int(frame["objective"].isin(first + second).sum())
    objectives = list(group)
    return seed_means(frame, value, objectives=objectives), int(
        frame["objective"].isin(objectives).sum()
    )


def seed_level_table(
    frame: pd.DataFrame,
    groups: Mapping[str, Any],
    value: str = "value",
    digits: int = 3,
) -> pd.DataFrame:
    """Per group of objectives (a row each): the seed means of ``value`` (a change, a
    difference from the seed's random encoder), their mean with its 95% t interval over seeds,
    how many seeds fell, the two-sided sign test and t test over the seeds (`seed_level_test`).

    Args:
        frame: one row per encoder (``objective``, ``seed``, ``value``).
        groups: ``{label: objectives averaged within a seed}``, or ``{label: (objectives,
            other objectives)}`` for the difference of the two seed means, seed by seed (a
            contrast between objectives that keeps the seed as the unit).
        value: the column tested against 0.
        digits: decimals of the values shown.
    """
    rows = []
    for label, group in groups.items():
        per_seed, encoders = _per_seed(frame, group, value)
        test = seed_level_test(per_seed)
        rows.append(
            {
                "comparison": label,
                "encoders": encoders,
                "seed means": ", ".join(f"{s}: {v:+.{digits}f}" for s, v in per_seed.items()),
                "mean [95% t interval over seeds]": (
                    f"{test['mean']:+.{digits}f} [{test['lower']:+.{digits}f}, "
                    f"{test['upper']:+.{digits}f}]"
                ),
                "seeds lower": f"{test['below']} of {test['seeds']}",
                "sign test p": f"{test['sign_p']:.2f} (at best {test['min_sign_p']:.2f})",
                "t test p": "-" if test["t_p"] is None else f"{test['t_p']:.3f}",
            }
        )
    return pd.DataFrame(rows).set_index("comparison")


def inverse_groups(objectives: Iterable[str]) -> dict[str, Any]:
    """The probe studies' question as seed-level groups of ``objectives`` (names as
    `objective_of` gives them): those with inverse dynamics (``i``, ``s_i``, ``g_i``, ``sgi``
    and its variants), those of S and G without it (``s``, ``g``, ``s_g``), and the first minus
    the second within each seed; a group with no objective present is left out."""
    names = sorted(set(objectives) - {"random_init"})
    with_i = [o for o in names if "i" in o.split("_") or o.startswith("sgi")]
    without = [o for o in names if o in ("s", "g", "s_g")]
    groups: dict[str, Any] = {}
    if with_i:
        groups["with inverse dynamics (" + ", ".join(with_i) + ")"] = with_i
    if without:
        groups["S, G, S+G (" + ", ".join(without) + ")"] = without
    if with_i and without:
        groups["with minus without, within a seed"] = (with_i, without)
    return groups


def paired_change_frame(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Each encoder's ``metric`` minus that of its own seed's random encoder on the same game
    and reading (a run of seed s starts from random encoder s), then its mean over games: one
    row per ``reading, objective, seed`` with the change as ``value`` (an `experiment_probe_frame`
    in, the rows `seed_level_table` takes out)."""
    rows = []
    for reading, part in readout_groups(frame):
        means = part.groupby(["objective", "seed", "game"])[metric].mean()
        if "random_init" not in means.index.get_level_values(0):
            continue
        start = means.loc["random_init"]
        for objective in means.index.get_level_values(0).unique().drop("random_init"):
            by_game = (means.loc[objective] - start).dropna()
            for seed, value in by_game.groupby(level="seed").mean().items():
                rows.append(
                    {"reading": reading, "objective": objective, "seed": seed, "value": value}
                )
    return pd.DataFrame(rows, columns=["reading", "objective", "seed", "value"])


def reading_seed_table(frame: pd.DataFrame, metric: str = "across_categories") -> pd.DataFrame:
    """Per reading and `inverse_groups` group (rows): the seed-level test of the change from
    each seed's random encoder (`paired_change_frame`, `seed_level_table`), the tests the probe
    studies' "N of 12 pairs" counts stood for; empty without random encoders."""
    changes = paired_change_frame(frame, metric)
    tables = []
    for reading, part in changes.groupby("reading", sort=False):
        table = seed_level_table(part, inverse_groups(part["objective"]))
        table.index = [f"{reading}: {label}" for label in table.index]
        tables.append(table)
    if not tables:
        return pd.DataFrame()
    out = pd.concat(tables)
    out.index.name = f"reading: objectives ({metric} minus the seed's random init)"
    return out


def encoder_game_table(frame: pd.DataFrame, metric: str, digits: int = 3) -> pd.DataFrame:
    """Each encoder's ``metric`` per game (columns, the games' short names), one row per
    objective and seed (``objective, seed s`` where an objective has several): what a study
    with one pretraining seed per objective can show, where no test over seeds exists; the
    random encoders' rows give the spread between initialisations beside it."""
    shown = frame.dropna(subset=[metric]).copy()
    seeds = shown.groupby("objective")["seed"].transform("nunique")
    shown["row"] = [
        f"{o}, seed {int(s)}" if n > 1 else str(o)
        for o, s, n in zip(shown["objective"], shown["seed"], seeds, strict=True)
    ]
    shown["game"] = shown["game"].map(lambda g: str(g).split("/")[-1])
    table = shown.pivot_table(index="row", columns="game", values=metric, aggfunc="mean")
    table = table.map(lambda v: "-" if pd.isna(v) else f"{v:.{digits}f}")
    table.index.name = f"encoder ({metric})"
    return table
