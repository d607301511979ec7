"""MinAtar's games without MinAtar's display: each game module loaded from the installed
``minatar`` package's files, and the sticky-action wrapper its ``Environment`` is, as sgi-lab's
own code.

Why: ``import minatar`` (any of its modules) runs the package's ``__init__``, which imports
matplotlib and seaborn to draw the game (seaborn pulls in scipy.stats): 1-2 s in every process
that makes a MinAtar environment (each experiment task, each environment worker, each test
subprocess), for a display sgi-lab never opens. The game modules themselves import only numpy.
`Environment` draws exactly what MinAtar 1.0.15's does (one ``rand()`` of its own RandomState a
step for the sticky action, that RandomState shared with the game once seeded), so a run is the
same step for step (tested against ``minatar.Environment`` on all five games).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

__all__ = ["Environment", "MinAtarNotFound", "game_module"]

_PREFIX = "sgi_lab.envs._minatar_game_"


class MinAtarNotFound(ImportError):
    """The optional ``minatar`` package is not installed (or holds no such game file)."""


def game_module(name: str) -> ModuleType:
    """MinAtar's game module ``name`` (``asterix``, ``breakout``, ...), executed from the
    installed package's ``environments/NAME.py`` without importing the package itself; executed
    once a process (the package is looked for on every call, so that one made unimportable is
    found missing).

    Raises:
        MinAtarNotFound: ``minatar`` is not installed, or has no game file ``name``.
    """
    try:  # locates the package and runs none of it; None where it cannot be imported
        spec = importlib.util.find_spec("minatar")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise MinAtarNotFound("the package 'minatar' is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "environments" / f"{name}.py"
    key = _PREFIX + name
    if key in sys.modules:
        return sys.modules[key]
    if not path.is_file():
        raise MinAtarNotFound(f"minatar has no game file {path}")
    found = importlib.util.spec_from_file_location(key, path)
    if found is None or found.loader is None:
        raise MinAtarNotFound(f"cannot load {path}")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    sys.modules[key] = module
    return module


class Environment:
    """A MinAtar game with sticky actions: what ``minatar.Environment`` is, without its display.

    With probability ``sticky_action_prob`` a step repeats the last action taken (drawn from
    this wrapper's RandomState before the game steps); `seed` gives the wrapper and the game
    one shared RandomState, as MinAtar's does.
    """

    def __init__(
        self, env_name: str, sticky_action_prob: float = 0.1, difficulty_ramping: bool = True
    ) -> None:
        self.env_name = env_name
        self.random = np.random.RandomState()
        self.env = game_module(env_name).Env(ramping=difficulty_ramping)
        self.sticky_action_prob = sticky_action_prob
        self.last_action = 0

    def seed(self, seed: int | None = None) -> None:
        if seed is not None:
            self.random = np.random.RandomState(seed)
            self.env.random = self.random

    def act(self, action: int) -> tuple[float, bool]:
        if self.random.rand() < self.sticky_action_prob:
            action = self.last_action
        self.last_action = action
        return self.env.act(action)

    def state(self) -> np.ndarray:
        return self.env.state()

    def reset(self) -> None:
        self.env.reset()

    def state_shape(self) -> list[int]:
        return self.env.state_shape()

    def num_actions(self) -> int:
        return 6

    def minimal_action_set(self) -> list[int]:
        return self.env.minimal_action_set()
