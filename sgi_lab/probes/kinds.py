"""How each state label is probed, and when a probe's test split is too small to say much.

A label's *kind* decides its readout and its metric:

- ``category``: a few unordered values (a direction, a flag): a linear classifier, weighted F1
  (AtariARI's protocol, which classifies every RAM variable, so every Atari variable is one);
- ``ordinal``: ordered steps of a ramp (MinAtar's difficulty ``ramp_index``);
- ``counter``: a count or a meter (enemies, bricks, Freeway's ``time_left``, Seaquest's
  ``oxygen``): hundreds or thousands of values, of which a classifier would see each a few times;
- ``coordinate``: a position on the game's grid.

The last three are read by a ridge regression onto the value (penalty chosen on the validation
episodes, never the test split) and scored by held-out R^2, where 0 is what predicting the
training mean scores. F1 and R^2 are never averaged together: a result keeps an F1 summary of
its ``category`` labels and an R^2 summary of the others, and its headline is one of them
(`headline`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KINDS",
    "MIN_TEST_ROWS",
    "REGRESSION_KINDS",
    "headline",
    "metric_of",
    "small_test_warnings",
]

KINDS = ("category", "ordinal", "counter", "coordinate")
"""The kinds a state label may be declared as."""
REGRESSION_KINDS = ("ordinal", "counter", "coordinate")
"""The kinds read by ridge regression and scored by R^2."""
MIN_TEST_ROWS = 1000
"""A test split with fewer rows (after de-duplication) is flagged: one row moves an F1 or an
R^2 by about 1/rows, and under 1,000 rows two encoders' scores differ by noise of that order."""


def metric_of(kind: str) -> str:
    """The metric a label of ``kind`` is scored by: ``f1`` or ``r2``.

    Raises:
        ValueError: a kind not in `KINDS`, naming it.
    """
    if kind not in KINDS:
        raise ValueError(f"label kind {kind!r}: one of {', '.join(KINDS)}")
    return "f1" if kind == "category" else "r2"


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """The one figure a state-probe result leads with, and what it is:

    - with labels read by R^2 (MinAtar's positions, counters and ramp): ``{"metric": "r2",
      "value": the mean held-out R^2 over them}``;
    - else (AtariARI's RAM variables, all classified): ``{"metric": "f1", "value": the mean of
      the category means of F1}`` (AtariARI's headline, ``across_categories``).

    The other summary stays in the result beside it; the two are never averaged.
    """
    r2 = result.get("r2") or {}
    if r2.get("variables"):
        return {
            "metric": "r2",
            "value": r2.get("mean"),
            "of": "mean held-out R^2 over the labels read by regression",
        }
    return {
        "metric": "f1",
        "value": result.get("across_categories"),
        "of": "mean of the category means of F1 (AtariARI)",
    }


def small_test_warnings(result: dict[str, Any], minimum: int = MIN_TEST_ROWS) -> list[str]:
    """Flag, in ``result`` itself, the probes whose test split holds under ``minimum`` rows after
    de-duplication, and return one warning line for each: the state labels (they share one test
    split: ``split.small_test``, and ``small_test`` on each label) and the reward probe (its
    balanced test rows: ``reward.small_test``)."""
    game = (result.get("store") or {}).get("game", "?")
    lines = []
    split = result.get("split") or {}
    rows = int((split.get("rows") or {}).get("test", 0))
    variables = result.get("variables") or {}
    split["small_test"] = bool(variables) and rows < minimum
    for entry in variables.values():
        entry["test_rows"], entry["small_test"] = rows, rows < minimum
    if split["small_test"]:
        lines.append(
            f"{game}: {', '.join(variables)} scored on {rows} test rows after de-duplication "
            f"(under {minimum:,}): collect a bigger probe store (docs/probes.md, 'How big a "
            "probe store')"
        )
    reward = result.get("reward") or {}
    reward_rows = (reward.get("rows") or {}).get("test")
    if reward_rows is not None:
        reward["small_test"] = int(reward_rows) < minimum
        if reward["small_test"]:
            lines.append(
                f"{game}: reward scored on {int(reward_rows)} balanced test rows (under "
                f"{minimum:,}): collect a bigger probe store"
            )
    return lines
