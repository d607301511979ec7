"""The five MinAtar games (Young & Tian 2019) behind the same environment interface as Atari.

``minatar`` (GPL-3.0) is an optional extra, ``pip install 'sgi-lab[minatar]'``: its game modules
are loaded from the installed package when a MinAtar environment is made, never copied here
(`sgi_lab.envs.minatar_games`, which skips the package's display imports).

Naming: ``minatar/<game>`` with MinAtar's module names, ``minatar/asterix``,
``minatar/breakout``, ``minatar/freeway``, ``minatar/seaquest``, ``minatar/space_invaders``;
any case and separator is accepted (``MinAtar-SpaceInvaders``), and a mistyped name gets
"did you mean".

Protocol (MinAtar's own defaults, each an option of `make_minatar_env`): sticky actions with
probability 0.1, difficulty ramping on, the minimal action set the game defines
(``Env.minimal_action_set()``; all 6 with ``full_action_space``). One agent step is one game
step. MinAtar has no episode cap; here episodes are truncated after `MAX_EPISODE_STEPS` (the
27,000 agent steps of Atari 100k's 108,000 frames), so a perfect Breakout player still ends.

Observations. MinAtar's state is a (10, 10, C) bool grid; here it is (C, 10, 10) uint8 with
0 or 255 per cell, channels first as the encoders take them. 255, not 1: every encoder and the
augmentation scale pixels by 1/255 (`sgi_lab.nets.encoders.prepare_pixels`), so a cell that
is on reaches the network as 1.0 with no second scale to carry; one byte per cell costs 100 MB
per 100k rows of Seaquest (10 channels), so packing bits (8x smaller) is not worth unpacking on
every sampled batch. No frame stack by default (``frames=1``): MinAtar's states carry motion in
their trail channels and both references (MinAtar's DQN, "Revisiting Rainbow") feed one frame;
``frames=k`` stacks k, zero-padded at an episode start like Atari's.

Every step's ``info`` holds ``raw_reward``, ``life_loss`` (always False: MinAtar games end at
the first death) and ``terminal`` as Atari's (`sgi_lab.envs.atari`), and with
``record_labels=True`` (at reset too) ``labels``: the game's own state behind the observation as
``{name: int}`` (`LABEL_NAMES` per game), what `sgi_lab.probes` reads for MinAtar.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.paths import close_names
from sgi_lab.envs.games import UnknownGameError
from sgi_lab.envs.minatar_games import Environment, MinAtarNotFound
from sgi_lab.envs.spec import MINATAR_CHANNELS, ObservationSpec, minatar_spec

__all__ = [
    "DIFFICULTY_RAMPING",
    "ENV_PROTOCOL",
    "INSTALL_HINT",
    "LABEL_NAMES",
    "MAX_EPISODE_STEPS",
    "MINATAR_GAMES",
    "MINIMAL_ACTIONS",
    "STICKY_ACTION_PROB",
    "MinAtarEnv",
    "MinAtarMissingError",
    "canonical_minatar_game",
    "is_minatar",
    "make_minatar_env",
    "minatar_action_names",
    "minatar_num_actions",
]

MINATAR_GAMES = tuple(f"minatar/{g}" for g in MINATAR_CHANNELS)
"""The five games' canonical names."""
ENV_PROTOCOL = "minatar"
"""The env protocol a MinAtar run's status and a MinAtar store's manifest record."""
STICKY_ACTION_PROB = 0.1
"""MinAtar's default probability of repeating the previous action."""
DIFFICULTY_RAMPING = True
"""MinAtar's default: the games speed up as the episode goes on."""
MAX_EPISODE_STEPS = 27_000
"""Episode cap in agent steps (``truncated``); MinAtar itself has none."""
INSTALL_HINT = "pip install 'sgi-lab[minatar]'"
# MinAtar's action letters, index = action id (``Env.action_map``).
_ACTION_NAMES = ("NOOP", "LEFT", "UP", "RIGHT", "DOWN", "FIRE")
_PREFIX = re.compile(r"^\s*minatar[\s/_\-.:]*", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s_\-.]+")


class MinAtarMissingError(SgiLabError, ImportError):
    """A MinAtar game was asked for without the optional ``minatar`` package installed."""


def is_minatar(name: Any) -> bool:
    """Whether a game name asks for MinAtar (it starts with ``minatar``, any case)."""
    return isinstance(name, str) and _PREFIX.match(name) is not None


def canonical_minatar_game(name: str) -> str:
    """``"minatar/<game>"`` for any spelling (``MinAtar/Breakout``, ``minatar-space-invaders``).

    Raises:
        UnknownGameError: not one of the five games; the message says the closest and all.
    """
    if not is_minatar(name):
        raise UnknownGameError(f"not a MinAtar game name (minatar/<game>): {name!r}")
    key = _SEPARATORS.sub("", _PREFIX.sub("", name).lower())
    by_key = {g.replace("_", ""): g for g in MINATAR_CHANNELS}
    if key in by_key:
        return f"minatar/{by_key[key]}"
    close = close_names(key, list(by_key))
    hint = f"did you mean {' or '.join('minatar/' + by_key[c] for c in close)}? " if close else ""
    raise UnknownGameError(
        f"unknown MinAtar game {name!r}; {hint}valid games: {', '.join(MINATAR_GAMES)}"
    )


def _module_name(game: str) -> str:
    return canonical_minatar_game(game).removeprefix("minatar/")


def _count(items: list | None, pred: Callable[[Any], bool] = lambda e: e is not None) -> int:
    return sum(1 for e in items or () if pred(e))


# Per game: what the environment object holds, as integer labels (MinAtar 1.0.15's fields).
_LABELS: dict[str, Callable[[Any], dict[str, int]]] = {
    "asterix": lambda e: {
        "player_x": e.player_x,
        "player_y": e.player_y,
        "enemies": _count(e.entities, lambda x: x is not None and not x[3]),
        "gold": _count(e.entities, lambda x: x is not None and x[3]),
        "ramp_index": e.ramp_index,
    },
    "breakout": lambda e: {
        "paddle_x": e.pos,
        "ball_x": e.ball_x,
        "ball_y": e.ball_y,
        "ball_dir": e.ball_dir,
        "bricks": int(np.count_nonzero(e.brick_map)),
    },
    "freeway": lambda e: {
        "chicken_y": e.pos,
        "cars": len(e.cars),
        "time_left": e.terminate_timer,
    },
    "seaquest": lambda e: {
        "sub_x": e.sub_x,
        "sub_y": e.sub_y,
        "sub_facing_right": int(e.sub_or),
        "oxygen": e.oxygen,
        "divers_held": e.diver_count,
        "enemies": _count(e.e_fish) + _count(e.e_subs),
        "ramp_index": e.ramp_index,
    },
    "space_invaders": lambda e: {
        "cannon_x": e.pos,
        "aliens": int(np.count_nonzero(e.alien_map)),
        "alien_dir": e.alien_dir,
        "ramp_index": e.ramp_index,
    },
}
LABEL_NAMES: dict[str, tuple[str, ...]] = {
    "asterix": ("player_x", "player_y", "enemies", "gold", "ramp_index"),
    "breakout": ("paddle_x", "ball_x", "ball_y", "ball_dir", "bricks"),
    "freeway": ("chicken_y", "cars", "time_left"),
    "seaquest": (
        "sub_x",
        "sub_y",
        "sub_facing_right",
        "oxygen",
        "divers_held",
        "enemies",
        "ramp_index",
    ),
    "space_invaders": ("cannon_x", "aliens", "alien_dir", "ramp_index"),
}
"""The labels of each game (keyed by module name), in the order `MinAtarEnv.labels` gives."""


class MinAtarEnv(gym.Env):
    """One MinAtar game as a gymnasium env with the Atari envs' info keys (module docstring).

    Args:
        game: any accepted spelling of a MinAtar game.
        seed: seeds the first reset (and the action space); same seed and actions, same
            trajectory (sticky actions and the game draw from one seeded stream).
        train: training mode: rewards sign-clipped (MinAtar's rewards are already 0 or 1).
        sticky_action_prob: probability the previous action is repeated (MinAtar: 0.1).
        difficulty_ramping: the game speeds up over an episode (MinAtar: on).
        full_action_space: all 6 actions instead of the game's minimal set.
        frames: frames stacked per observation.
        channels: pad each frame with empty channels up to this many (None: the game's own;
            `sgi_lab.envs.spec.MINATAR_MAX_CHANNELS` gives all five games one shape).
        max_episode_steps: truncate after this many steps (None: never).
        record_labels: put the game's state in ``info["labels"]``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        game: str,
        seed: int | None = None,
        train: bool = True,
        *,
        sticky_action_prob: float = STICKY_ACTION_PROB,
        difficulty_ramping: bool = DIFFICULTY_RAMPING,
        full_action_space: bool = False,
        frames: int = 1,
        channels: int | None = None,
        max_episode_steps: int | None = MAX_EPISODE_STEPS,
        record_labels: bool = False,
    ) -> None:
        _check_options(sticky_action_prob, frames, max_episode_steps)
        self.game = canonical_minatar_game(game)
        self.module = self.game.removeprefix("minatar/")
        self.spec_ = minatar_spec(self.module, frames, channels)
        self._own_channels = MINATAR_CHANNELS[self.module]
        self.train = train
        self.sticky_action_prob = float(sticky_action_prob)
        self.difficulty_ramping = bool(difficulty_ramping)
        self.max_episode_steps = max_episode_steps
        self.record_labels = record_labels
        try:  # the optional GPL package's game file, without its display imports
            self._env = Environment(self.module, sticky_action_prob, difficulty_ramping)
        except MinAtarNotFound as exc:
            raise MinAtarMissingError(
                f"MinAtar games need the optional package 'minatar': {INSTALL_HINT}"
            ) from exc
        self.action_set = list(range(6)) if full_action_space else self._env.minimal_action_set()
        self.action_space = gym.spaces.Discrete(len(self.action_set))
        self.observation_space = gym.spaces.Box(0, 255, self.spec_.stacked_shape, np.uint8)
        self._pending_seed = seed
        self._stack = np.zeros(self.spec_.stacked_shape, np.uint8)
        self._steps = 0
        if seed is not None:
            self.action_space.seed(seed)

    @property
    def observation_spec(self) -> ObservationSpec:
        return self.spec_

    def frame(self) -> np.ndarray:
        """The game's current state as one frame: (C, 10, 10) uint8, 0 or 255, C-contiguous."""
        # One C-ordered cast and an in-place multiply: 3x faster than moveaxis + a multiply
        # into a new array (the env's own overhead per step is a few microseconds).
        frame = self._env.state().transpose(2, 0, 1).astype(np.uint8, order="C")
        frame *= 255
        if self.spec_.channels == self._own_channels:
            return frame
        padded = np.zeros((self.spec_.channels, *frame.shape[1:]), np.uint8)
        padded[: self._own_channels] = frame
        return padded

    def labels(self) -> dict[str, int]:
        """The game's own state behind the current observation (`LABEL_NAMES`)."""
        return {k: int(v) for k, v in _LABELS[self.module](self._env.env).items()}

    def _observe(self, reset: bool) -> np.ndarray:
        if self.spec_.frames == 1:  # no stack to keep: the frame is the observation
            return self.frame()
        c = self.spec_.channels
        if reset:
            self._stack[:] = 0
        else:
            self._stack[:-c] = self._stack[c:].copy()
        self._stack[-c:] = self.frame()
        return self._stack.copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        if seed is not None:
            super().reset(seed=seed)
            self._env.seed(seed)
            # minatar's reset keeps the last action, which a sticky action replays: a seeded
            # reset is a fresh start, the same after any history (a resumed collection's new
            # env, or the run that never stopped)
            self._env.last_action = 0
        self._env.reset()
        self._steps = 0
        info = {"labels": self.labels()} if self.record_labels else {}
        return self._observe(reset=True), info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        raw_reward, terminated = self._env.act(self.action_set[int(action)])
        self._steps += 1
        raw_reward = float(raw_reward)
        truncated = (
            not terminated
            and self.max_episode_steps is not None
            and self._steps >= self.max_episode_steps
        )
        info: dict[str, Any] = {
            "raw_reward": raw_reward,
            "life_loss": False,
            "terminal": bool(terminated),
        }
        if self.record_labels:
            info["labels"] = self.labels()
        # MinAtar's rewards are 0 or positive integers; sign-clipped in training as Atari's.
        reward = float(raw_reward > 0) - float(raw_reward < 0) if self.train else raw_reward
        return self._observe(reset=False), reward, bool(terminated), bool(truncated), info


def _check_options(sticky: float, frames: int, max_steps: int | None) -> None:
    if isinstance(sticky, bool) or not isinstance(sticky, (int, float)) or not 0 <= sticky <= 1:
        raise ValueError(f"sticky_action_prob: must be in [0, 1], got {sticky!r}")
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ValueError(f"frames: must be a positive integer, got {frames!r}")
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(
            f"max_episode_steps: must be a positive integer or None, got {max_steps!r}"
        )


def make_minatar_env(game: str, seed: int | None = None, train: bool = True, **options: Any):
    """A `MinAtarEnv` (``options``: its keyword arguments)."""
    return MinAtarEnv(game, seed, train, **options)


# Each game's ``minimal_action_set()`` (MinAtar 1.0.15), here so configs can size a network
# without the optional package; tests check them against it.
MINIMAL_ACTIONS: dict[str, tuple[int, ...]] = {
    "asterix": (0, 1, 2, 3, 4),
    "breakout": (0, 1, 3),
    "freeway": (0, 2, 4),
    "seaquest": (0, 1, 2, 3, 4, 5),
    "space_invaders": (0, 1, 3, 5),
}


def _minimal_actions(module: str) -> tuple[int, ...]:
    return MINIMAL_ACTIONS[module]


def minatar_num_actions(game: str, full_action_space: bool = False) -> int:
    """Actions of a MinAtar game: its minimal set, or 6."""
    return 6 if full_action_space else len(_minimal_actions(_module_name(game)))


def minatar_action_names(game: str, full_action_space: bool = False) -> tuple[str, ...]:
    """The game's action names in action-index order (``("NOOP", "LEFT", "RIGHT")``)."""
    if full_action_space:
        return _ACTION_NAMES
    return tuple(_ACTION_NAMES[a] for a in _minimal_actions(_module_name(game)))
