"""AtariARI's RAM annotations (Anand et al., 2019) for the Atari 100k games it covers.

The table is data (``atariari.yaml`` beside this file, its source named there): per game, each
state variable's RAM address and its category. `labels_from_ram` turns a store's RAM rows into
the labels the linear probes read out of an encoder's features.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from sgi_lab.base.errors import SgiLabError
from sgi_lab.envs.games import UnknownGameError, canonical_game

__all__ = [
    "CATEGORIES",
    "UnannotatedGameError",
    "Variable",
    "annotated_games",
    "annotations",
    "labels_from_ram",
]

TABLE = Path(__file__).with_name("atariari.yaml")
CATEGORIES = (
    "agent_localization",
    "small_object_localization",
    "other_localization",
    "score_clock_lives_display",
    "miscellaneous",
)
"""AtariARI's categories (its summary_key_dict; ``misc_keys`` is ``miscellaneous`` here)."""


class UnannotatedGameError(SgiLabError, ValueError):
    """A game AtariARI does not annotate: no RAM labels to probe."""


@dataclass(frozen=True)
class Variable:
    """One annotated state variable: its name, RAM address (0-127; a labels column for a store
    with game-state labels), category (None: counted in the overall average only) and kind
    (`sgi_lab.probes.kinds.KINDS`: how it is probed; AtariARI's protocol classifies every RAM
    variable, so its variables are ``category``)."""

    name: str
    address: int
    category: str | None
    kind: str = "category"


@functools.cache
def _table() -> dict[str, tuple[Variable, ...]]:
    raw = yaml.safe_load(TABLE.read_text())
    table = {}
    for game, variables in raw.items():
        rows = []
        for name, spec in variables.items():
            category = None if spec["category"] == "none" else spec["category"]
            if category is not None and category not in CATEGORIES:
                raise ValueError(f"{TABLE}: {game}.{name}: unknown category {category!r}")
            if not 0 <= int(spec["address"]) < 128:
                raise ValueError(f"{TABLE}: {game}.{name}: address {spec['address']} not in 0..127")
            rows.append(Variable(name, int(spec["address"]), category))
        table[game] = tuple(rows)
    return table


def annotated_games() -> tuple[str, ...]:
    """The Atari 100k games AtariARI annotates (canonical names)."""
    return tuple(_table())


def annotations(game: str) -> tuple[Variable, ...]:
    """The annotated variables of ``game`` (any spelling `sgi_lab.envs.canonical_game` takes).

    Raises:
        UnannotatedGameError: AtariARI does not annotate the game (the message lists those it
            does).
    """

    try:
        name = canonical_game(game)
    except UnknownGameError:
        name = game
    table = _table()
    if name not in table:
        raise UnannotatedGameError(
            f"{game}: AtariARI annotates no RAM variables of this game, so there are no state "
            "variables to probe (--no-state-probes: the reward and action probes only); "
            f"annotated games: {', '.join(table)}"
        )
    return table[name]


def labels_from_ram(ram: np.ndarray, variables: tuple[Variable, ...]) -> np.ndarray:
    """``ram`` (N, 128) uint8 -> labels (N, V) uint8, column v = the byte at variable v's
    address."""
    return np.asarray(ram)[:, [v.address for v in variables]]
