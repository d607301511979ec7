"""Atari 100k environments on gymnasium + ale-py, with the SimPLe/DER/SPR protocol.

Protocol (``make_env``): no sticky actions (repeat_action_probability 0), frame skip 4 with a
max-pool over the last two raw frames, grayscale 84x84 uint8, 4 stacked frames zero-padded at
episode start, 0..30 seeded no-op frames at reset, episodes capped at 108,000 frames (27,000 agent
steps), minimal action set. Observations are ``uint8`` arrays of shape ``(4, 84, 84)``, oldest
frame first; right after a reset the observation is ``[0, 0, 0, f0]``, the same zero padding the
transition store uses when it rebuilds stacks at episode starts.

Every step's ``info`` holds:

- ``raw_reward`` (float): the game's reward, unclipped;
- ``life_loss`` (bool): the number of lives dropped during this step (game over included);
- ``terminal`` (bool): terminal for learning, ``terminated or (train and life_loss)``;
- ``ram`` (uint8 (128,), with ``record_ram=True``, at reset too): the console RAM in the state
  the returned observation shows (ALE's ``getRAM()``), the labels of `sgi_lab.probes`.

``terminated`` keeps gymnasium's meaning (the game is over) and ``truncated`` means the frame cap
was hit. In training mode a life loss ends the bootstrapped return but not the game, as in
DQN/rlpyt/SPR; the returned reward is ``sign(raw_reward)``. In evaluation mode life losses are
never terminal and rewards are raw.
"""

from __future__ import annotations

import functools
from typing import Any

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TimeLimit

from sgi_lab.envs.games import (
    ATARI_100K_GAMES,
    UnknownGameError,
    canonical_game,
    normalize_game_name,
)
from sgi_lab.envs.rlpyt_frames import RlpytAtariPreprocessing

__all__ = [
    "FRAME_SKIP",
    "FRAME_STACK",
    "MAX_EPISODE_FRAMES",
    "NOOP_MAX",
    "PREPROCESSING",
    "SCREEN_SIZE",
    "LearningSignalWrapper",
    "NoopResetWrapper",
    "RamInfoWrapper",
    "make_env",
    "num_actions",
    "resolve_ale_id",
]

FRAME_SKIP = 4
"""Raw frames per agent step (the action is repeated, rewards summed)."""
SCREEN_SIZE = 84
"""Height and width of a preprocessed frame."""
FRAME_STACK = 4
"""Frames per observation."""
NOOP_MAX = 30
"""At most this many no-op frames are played at reset (uniform in ``[0, NOOP_MAX]``)."""
MAX_EPISODE_FRAMES = 108_000
"""Episode cap in raw frames: 30 minutes of play, 27,000 agent steps."""
PREPROCESSING = ("dopamine", "rlpyt")
"""Frame protocols of `make_env`: gymnasium's ``AtariPreprocessing`` (a port of Dopamine's, the
protocol of the DQN Replay data) or the authors' (`RlpytAtariPreprocessing`)."""

gym.register_envs(ale_py)
# Only errors from the emulator: its start-up banner would show as a red stderr box in every
# notebook cell that makes an environment.
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


class NoopResetWrapper(gym.Wrapper):
    """Plays a random number of NOOP frames, uniform in ``[0, noop_max]``, after each reset.

    Sits directly on the frame-skip-1 ALE env, so one NOOP is one raw frame (as rlpyt's
    ``AtariEnv``, used by SPR). gymnasium's ``AtariPreprocessing`` also has no-op starts, but
    draws from ``[1, noop_max]``; the protocol here includes zero no-ops.

    The count is drawn from the base env's ``np_random``, which ``reset(seed=...)`` seeds, so
    the no-op counts of a seeded env are reproducible. ``info["noop_frames"]`` records it.
    """

    def __init__(self, env: gym.Env, noop_max: int = NOOP_MAX):
        super().__init__(env)
        if noop_max < 0:
            raise ValueError(f"noop_max must be >= 0, got {noop_max}")
        if noop_max > 0 and env.unwrapped.get_action_meanings()[0] != "NOOP":
            raise ValueError("no-op starts need action 0 to be NOOP")
        self.noop_max = noop_max

    def draw_noops(self) -> int:
        """The number of no-op frames of a reset, from the base env's seeded ``np_random``."""
        return int(self.env.unwrapped.np_random.integers(0, self.noop_max + 1))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        noops = self.draw_noops()
        for _ in range(noops):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # never seen in the 26 games, but stay in a live game
                obs, info = self.env.reset(options=options)
        return obs, {**info, "noop_frames": noops}


class LearningSignalWrapper(gym.Wrapper):
    """Adds life-loss and learning-terminal signals, clips rewards in training mode.

    Also makes the first ``reset()`` use the seed given at construction, so an env built with a
    seed is deterministic without the caller passing it again.

    Args:
        env: A preprocessed Atari env whose ``unwrapped.ale`` reports lives.
        train: Training mode: life loss is terminal for learning and rewards are sign-clipped.
        seed: Seed for the first reset when ``reset`` is called without one.
    """

    def __init__(self, env: gym.Env, train: bool, seed: int | None = None):
        super().__init__(env)
        self.train = train
        self._pending_seed = seed
        self._lives = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        obs, info = self.env.reset(seed=seed, options=options)
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, raw_reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        life_loss = lives < self._lives
        self._lives = lives
        raw_reward = float(raw_reward)
        # Python scalars, not numpy ones: gymnasium's vector envs batch an info key into a typed
        # array only for int/float/bool/np.number (np.bool_ would become an object array).
        info = {
            **info,
            "raw_reward": raw_reward,
            "life_loss": bool(life_loss),
            "terminal": bool(terminated or (self.train and life_loss)),
        }
        reward = float(np.sign(raw_reward)) if self.train else raw_reward
        return obs, reward, bool(terminated), bool(truncated), info


class RamInfoWrapper(gym.Wrapper):
    """Puts the console RAM (ALE's ``getRAM()``, 128 uint8) of the state just reached in
    ``info["ram"]`` at every reset and step: the RAM behind the returned observation."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "ram": self.env.unwrapped.ale.getRAM().copy()}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {**info, "ram": self.env.unwrapped.ale.getRAM().copy()}
        return obs, reward, terminated, truncated, info


def resolve_ale_id(game: str, allow_any_ale_game: bool = False) -> str:
    """Returns the gymnasium id (``"ALE/<Game>-v5"``) of a game.

    Args:
        game: Game name in any spelling accepted by `canonical_game`.
        allow_any_ale_game: Also accept ALE games outside the 26 of Atari 100k.

    Raises:
        UnknownGameError: The game is not accepted; the message lists the valid games.
    """
    try:
        return ATARI_100K_GAMES[canonical_game(game)].ale_id
    except UnknownGameError:
        if not allow_any_ale_game:
            raise
    # Only ROMs ale-py registers a v5 env for (it skips the multiplayer-only ones).
    ale_ids = {
        normalize_game_name(env_id): env_id
        for env_id in gym.registry
        if env_id.startswith("ALE/") and env_id.endswith("-v5")
    }
    ale_id = ale_ids.get(normalize_game_name(game))
    if ale_id is None:
        names = sorted(
            env_id.removeprefix("ALE/").removesuffix("-v5") for env_id in ale_ids.values()
        )
        raise UnknownGameError(f"unknown ALE game {game!r}; valid games: {', '.join(names)}")
    return ale_id


def make_env(
    game: str,
    seed: int | None = None,
    train: bool = True,
    *,
    full_action_space: bool = False,
    max_episode_frames: int | None = MAX_EPISODE_FRAMES,
    noop_max: int = NOOP_MAX,
    allow_any_ale_game: bool = False,
    record_ram: bool = False,
    preprocessing: str = "dopamine",
) -> gym.Env:
    """Builds one Atari 100k environment.

    Wrapper stack, innermost first: ALE v5 env (frame skip 1, no sticky actions, no ALE frame
    cap) -> `NoopResetWrapper` -> ``AtariPreprocessing`` (frame skip 4, max-pool of the last two
    raw frames, grayscale, 84x84 area resize) -> ``TimeLimit`` -> ``FrameStackObservation``
    (4, zero padding) -> `LearningSignalWrapper`.

    Args:
        game: Game name in any spelling accepted by `canonical_game` (``"Pong"``, ``"ms_pacman"``,
            ``"ALE/Breakout-v5"``...).
        seed: Seeds the first reset (ALE and no-op counts) and ``action_space``; the same seed and
            actions give the same trajectory. ``None`` draws fresh entropy.
        train: Training mode (life loss terminal for learning, rewards sign-clipped) or
            evaluation mode (neither).
        full_action_space: Use all 18 ALE actions instead of the game's minimal set.
        max_episode_frames: Cap on raw frames per episode, counted from the first agent step (the
            no-op frames do not count); a multiple of 4. ``None`` disables the cap. Hitting the
            cap returns ``truncated=True``.
        noop_max: At most this many no-op frames at reset (uniform in ``[0, noop_max]``).
        allow_any_ale_game: Accept ALE games outside the 26 Atari 100k games.
        record_ram: Add ``info["ram"]`` (`RamInfoWrapper`, outermost).
        preprocessing: ``"dopamine"``: the stack above; ``"rlpyt"``: the authors' env
            (`RlpytAtariPreprocessing` replaces the wrappers from `NoopResetWrapper` to
            ``FrameStackObservation``: bilinear resize, 1..``noop_max`` no-ops after an extra
            NOOP frame, a NOOP frame after each life loss, the stack emptied at a life loss in
            training, the cap after ``max_episode_frames / 4 + 1`` steps as ``terminated``).

    Returns:
        A gymnasium env with ``observation_space`` ``Box(0, 255, (4, 84, 84), uint8)`` and a
        ``Discrete`` action space; see the module docstring for ``info`` keys.

    Raises:
        UnknownGameError: Unknown game (the message lists the valid ones).
        ValueError: ``max_episode_frames`` is not a positive multiple of 4, or
            ``preprocessing`` is not one of `PREPROCESSING`.

    Note:
        On the step that ends the game, ``AtariPreprocessing`` (like Dopamine, which it copies)
        stops skipping at the game-over frame without grabbing the screen, so the newest frame
        of that last observation repeats the previous step's frame. Learning never bootstraps
        from it.
    """
    ale_id = resolve_ale_id(game, allow_any_ale_game)
    _check_protocol(preprocessing, max_episode_frames)
    env = _ale_env(ale_id, full_action_space)
    if preprocessing == "rlpyt":
        env = _rlpyt_frames(env, train, noop_max, max_episode_frames)
    else:
        env = _dopamine_frames(env, noop_max, max_episode_frames)
    return _outer_wrappers(env, train, seed, record_ram)


def _check_protocol(preprocessing: str, max_episode_frames: int | None) -> None:
    if preprocessing not in PREPROCESSING:
        raise ValueError(
            f"preprocessing must be one of {', '.join(PREPROCESSING)}, got {preprocessing!r}"
        )
    if max_episode_frames is not None and (
        max_episode_frames <= 0 or max_episode_frames % FRAME_SKIP
    ):
        raise ValueError(
            f"max_episode_frames must be a positive multiple of {FRAME_SKIP} or None, "
            f"got {max_episode_frames}"
        )


def _ale_env(ale_id: str, full_action_space: bool) -> gym.Env:
    """The raw ALE v5 env: frame skip 1, no sticky actions, no ALE frame cap."""
    return gym.make(
        ale_id,
        frameskip=1,  # the preprocessing skips frames, so it can max-pool the last two
        repeat_action_probability=0.0,
        full_action_space=full_action_space,
        # The cap counts agent steps in the preprocessing; ALE's own counter would include no-ops.
        max_num_frames_per_episode=None,
        # The preprocessing reads the screen from the ALE itself; a grayscale raw observation
        # only saves copying an RGB screen on every raw frame.
        obs_type="grayscale",
        disable_env_checker=True,
    )


def _dopamine_frames(env: gym.Env, noop_max: int, max_episode_frames: int | None) -> gym.Env:
    """No-op starts, ``AtariPreprocessing``, the frame cap and the zero-padded frame stack."""
    env = NoopResetWrapper(env, noop_max=noop_max)
    env = AtariPreprocessing(
        env,
        noop_max=0,  # done by NoopResetWrapper, which also allows zero no-ops
        frame_skip=FRAME_SKIP,
        screen_size=SCREEN_SIZE,
        terminal_on_life_loss=False,  # life loss is a learning signal here, not a reset
        grayscale_obs=True,
        scale_obs=False,
    )
    if max_episode_frames is not None:
        env = TimeLimit(env, max_episode_steps=max_episode_frames // FRAME_SKIP)
    return FrameStackObservation(env, FRAME_STACK, padding_type="zero")


def _rlpyt_frames(
    env: gym.Env, train: bool, noop_max: int, max_episode_frames: int | None
) -> gym.Env:
    """The authors' frame protocol, `RlpytAtariPreprocessing`, in place of the Dopamine stack."""
    horizon = None if max_episode_frames is None else max_episode_frames // FRAME_SKIP
    return RlpytAtariPreprocessing(
        env,
        train=train,
        noop_max=noop_max,
        horizon=horizon,
        frame_skip=FRAME_SKIP,
        frame_stack=FRAME_STACK,
        screen_size=SCREEN_SIZE,
    )


def _outer_wrappers(env: gym.Env, train: bool, seed: int | None, record_ram: bool) -> gym.Env:
    env = LearningSignalWrapper(env, train=train, seed=seed)
    if record_ram:
        env = RamInfoWrapper(env)
    if seed is not None:
        env.action_space.seed(seed)
    return env


@functools.cache
def _action_set_size(ale_id: str, full_action_space: bool) -> int:
    env = gym.make(ale_id, full_action_space=full_action_space, disable_env_checker=True)
    try:
        return int(env.action_space.n)
    finally:
        env.close()


@functools.cache
def _action_meanings(ale_id: str, full_action_space: bool) -> tuple[str, ...]:
    env = gym.make(ale_id, full_action_space=full_action_space, disable_env_checker=True)
    try:
        return tuple(env.unwrapped.get_action_meanings())
    finally:
        env.close()


def action_names(
    game: str, full_action_space: bool = False, allow_any_ale_game: bool = False
) -> tuple[str, ...]:
    """The game's action names in action-index order, as ale-py names them.

    Args:
        game: Game name in any spelling accepted by `canonical_game`.
        full_action_space: Name the full 18-action ALE set instead of the minimal one.
        allow_any_ale_game: Accept ALE games outside the 26 Atari 100k games.

    Returns:
        E.g. ``("NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE")`` for Pong.
    """
    return _action_meanings(resolve_ale_id(game, allow_any_ale_game), full_action_space)


def num_actions(
    game: str, full_action_space: bool = False, allow_any_ale_game: bool = False
) -> int:
    """Number of actions of a game: its minimal action set, or 18 with ``full_action_space``.

    Args:
        game: Game name in any spelling accepted by `canonical_game`.
        full_action_space: Count the full 18-action ALE set.
        allow_any_ale_game: Accept ALE games outside the 26 Atari 100k games.

    Returns:
        The size of the ``Discrete`` action space `make_env` gives, e.g. 6 for Pong.
    """
    return _action_set_size(resolve_ale_id(game, allow_any_ale_game), full_action_space)
