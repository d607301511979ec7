"""The state variables a store's probes read: AtariARI's RAM annotations for an Atari store, or,
for a store that records a game's own state per step (MinAtar's ``labels`` field,
`sgi_lab.envs.minatar.LABEL_NAMES`), those labels, each in one of AtariARI's categories.

MinAtar's labels fall in the categories as AtariARI's rules would put them: the player's
position (Asterix player_x/y, Breakout paddle_x, Freeway chicken_y, Seaquest sub_x/y, Space
Invaders cannon_x) is agent localization; Breakout's ball_x/y small-object localization; timers
and meters (Freeway time_left, Seaquest oxygen) score_clock_lives_display; counts of enemies and
objects (enemies, gold, bricks, aliens, cars, divers_held), directions and the difficulty ramp
miscellaneous (AtariARI's misc_keys hold counts and directions).

Each label also has a kind (`sgi_lab.probes.kinds`), which decides how it is probed: positions
are coordinates and counts, timers and meters counters (ridge regression, held-out R^2: Freeway's
``time_left`` takes 2,501 values and Seaquest's ``oxygen`` 201, which a classifier would read
as as many unrelated classes), the difficulty ramp ordinal (R^2 too), and directions and flags
categories (classification, F1).
"""

from __future__ import annotations

import numpy as np

from sgi_lab.data.store import TransitionStore
from sgi_lab.probes.atariari import Variable, annotations, labels_from_ram

__all__ = [
    "MINATAR_LABEL_CATEGORIES",
    "MINATAR_LABEL_KINDS",
    "label_variables",
    "state_labels",
    "state_variables",
]

MINATAR_LABEL_CATEGORIES: dict[str, str] = {
    # the player
    "player_x": "agent_localization",
    "player_y": "agent_localization",
    "paddle_x": "agent_localization",
    "chicken_y": "agent_localization",
    "sub_x": "agent_localization",
    "sub_y": "agent_localization",
    "cannon_x": "agent_localization",
    # the ball
    "ball_x": "small_object_localization",
    "ball_y": "small_object_localization",
    # timers and meters
    "time_left": "score_clock_lives_display",
    "oxygen": "score_clock_lives_display",
    # counts, directions, the difficulty ramp
    "enemies": "miscellaneous",
    "gold": "miscellaneous",
    "bricks": "miscellaneous",
    "aliens": "miscellaneous",
    "cars": "miscellaneous",
    "divers_held": "miscellaneous",
    "ball_dir": "miscellaneous",
    "sub_facing_right": "miscellaneous",
    "alien_dir": "miscellaneous",
    "ramp_index": "miscellaneous",
}
"""MinAtar's label names -> AtariARI's categories (a name not here: in no category, counted in
the overall F1 only)."""

MINATAR_LABEL_KINDS: dict[str, str] = {
    # positions on the 10 x 10 grid
    "player_x": "coordinate",
    "player_y": "coordinate",
    "paddle_x": "coordinate",
    "chicken_y": "coordinate",
    "sub_x": "coordinate",
    "sub_y": "coordinate",
    "cannon_x": "coordinate",
    "ball_x": "coordinate",
    "ball_y": "coordinate",
    # timers, meters and counts
    "time_left": "counter",
    "oxygen": "counter",
    "enemies": "counter",
    "gold": "counter",
    "bricks": "counter",
    "aliens": "counter",
    "cars": "counter",
    "divers_held": "counter",
    # the difficulty ramp: ordered steps
    "ramp_index": "ordinal",
    # directions and flags: a few unordered values
    "ball_dir": "category",
    "sub_facing_right": "category",
    "alien_dir": "category",
}
"""MinAtar's label names -> their kinds (`sgi_lab.probes.kinds.KINDS`; a name not here is a
``category``)."""


def label_variables(label_names: tuple[str, ...] | list[str]) -> tuple[Variable, ...]:
    """The variables of a store's ``labels`` columns: ``address`` is the column index, the
    category and kind those of `MINATAR_LABEL_CATEGORIES` and `MINATAR_LABEL_KINDS`."""
    return tuple(
        Variable(
            name,
            column,
            MINATAR_LABEL_CATEGORIES.get(name),
            MINATAR_LABEL_KINDS.get(name, "category"),
        )
        for column, name in enumerate(label_names)
    )


def state_variables(store: TransitionStore) -> tuple[Variable, ...]:
    """The state variables of ``store``: its recorded game-state labels when it has them, else
    AtariARI's annotations of its game (`annotations`, which names an unannotated game)."""
    if store.has_labels:
        return label_variables(store.label_names)
    return annotations(store.game)


def state_labels(
    store: TransitionStore, rows: np.ndarray, variables: tuple[Variable, ...]
) -> np.ndarray:
    """``(len(rows), V)`` integer labels of ``variables`` at ``rows``: the store's game-state
    labels (columns), else its RAM bytes (addresses)."""
    if store.has_labels:
        labels = store.gather_labels(np.asarray(rows))
        return labels[:, [v.address for v in variables]].astype(np.int64)
    return labels_from_ram(store.gather_ram(rows), variables)
