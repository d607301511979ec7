"""Collectors: run a policy in an Atari 100k or MinAtar environment and write a TransitionStore.

``collect`` is generic (any ``policy(obs) -> action``); ``collect_random`` is the paper's
Random dataset: a uniformly random action held for Geometric(1/3) steps. Both record the console
RAM of every state (the store's optional ``ram`` field, the labels of `sgi_lab.probes`), or for
a MinAtar game the game's own state (``labels``, `sgi_lab.envs.minatar.LABEL_NAMES`), and
play either Atari env protocol (``env_protocol``: gymnasium's, ``dopamine``, or the authors',
``rlpyt``; docs/paper_vs_code.md rows 16-21), which the store's manifest records.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_ENV_PROTOCOL,
    ENV_PROTOCOLS,
    StoreError,
)
from sgi_lab.data.store_writer import TransitionStoreWriter, check_store_target
from sgi_lab.envs import canonical_env_game, is_minatar, make_env, num_actions
from sgi_lab.envs.atari import PREPROCESSING
from sgi_lab.envs.minatar import ENV_PROTOCOL as MINATAR_PROTOCOL
from sgi_lab.envs.minatar import LABEL_NAMES
from sgi_lab.envs.spec import ATARI_SPEC

Policy = Callable[[np.ndarray], int]


class RandomHoldPolicy:
    """Uniformly random action, held for a Geometric(p) number of steps (mean 1/p).

    Args:
        num_actions: size of the action set.
        p: success probability of the geometric hold length (the paper uses 1/3).
        seed: RNG seed.
    """

    def __init__(self, num_actions: int, p: float = 1 / 3, seed: int = 0) -> None:
        if not 0 < p <= 1:
            raise ValueError(f"hold_p: the hold probability must lie in (0, 1], got {p}")
        if seed < 0:
            raise ValueError(f"seed: must be >= 0, got {seed}")
        self.num_actions = num_actions
        self.p = p
        self.rng = np.random.default_rng(seed)
        self._action = 0
        self._left = 0

    def __call__(self, obs: np.ndarray) -> int:
        if self._left == 0:
            self._action = int(self.rng.integers(self.num_actions))
            self._left = int(self.rng.geometric(self.p))  # support {1, 2, ...}
        self._left -= 1
        return self._action

    def reset(self) -> None:
        """Start a fresh hold at the next call (e.g. at an episode start)."""
        self._left = 0

    def state_dict(self) -> dict[str, Any]:
        """The random stream and current hold (JSON), saved with each finished chunk."""
        return {"rng": self.rng.bit_generator.state, "action": self._action, "left": self._left}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._action, self._left = int(state["action"]), int(state["left"])


def collect(
    policy: Policy,
    game: str,
    steps: int,
    out: str | os.PathLike,
    *,
    seed: int = 0,
    source: str = "policy",
    params: dict[str, Any] | None = None,
    terminal_on_life_loss: bool = False,
    full_action_space: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    resume: bool = True,
    overwrite: bool = False,
    progress: bool = True,
    env_protocol: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> TransitionStore:
    """Run ``policy`` for ``steps`` agent steps and write the transitions as a store at ``out``.

    The store is built under ``out.partial`` and renamed into place when complete. Every chunk
    starts a fresh episode (environment reset with ``seed + chunk index``, policy reset), and
    a policy's ``state_dict()`` is saved with each finished chunk, so if an earlier run was
    interrupted and ``resume`` is true, collection continues after its last finished chunk and
    writes exactly the store an uninterrupted run writes. (The episode running at a chunk
    boundary is kept, truncated: one per ``chunk_size`` rows.) Re-running a collection whose
    store is complete, with the same settings, returns that store and writes nothing. A store
    holds the frames of one env protocol: resuming or re-running with another is refused.

    Args:
        policy: ``policy(obs) -> action``, called with the observation (the environment's
            ``observation_spec.stacked_shape``: (4, 84, 84) for Atari) of every state it acts
            in. A policy with a ``reset()`` method gets it called at every episode start.
        game: any accepted spelling of an Atari 100k game, or ``minatar/<game>``.
        steps: transitions to write.
        out: store folder.
        seed: environment seed (chunk ``k`` starts from a reset seeded ``seed + k``).
        source: name recorded in the manifest (``random``, ``agent``, ...).
        params: extra creation parameters recorded in the manifest.
        terminal_on_life_loss: record life losses as terminals (the game still continues).
        full_action_space: use all actions instead of the game's minimal set.
        chunk_size: rows per chunk file (the unit of crash safety).
        resume: continue an interrupted collection found at ``out.partial``.
        overwrite: replace an existing store at ``out`` (only ever a store of ours).
        progress: show a tqdm progress bar.
        env_protocol: the env played, recorded in the manifest: Atari's ``"dopamine"``
            (gymnasium's AtariPreprocessing, the default) or ``"rlpyt"`` (the authors' env);
            ``"minatar"`` (the default) for a MinAtar game.
        env_kwargs: extra keyword arguments for :func:`sgi_lab.envs.make_env` (not
            ``preprocessing``: that is ``env_protocol``).

    Returns:
        The finished store, opened for reading: with the console RAM of every row (Atari,
        ``ram``) or the game's state (MinAtar, ``labels``).
    """
    game = canonical_env_game(game)
    env_protocol = _resolve_protocol(game, env_protocol)
    _check_collection_args(steps, chunk_size, seed, env_protocol, env_kwargs)
    out = Path(out)
    settings = {"terminal_on_life_loss": terminal_on_life_loss, **(params or {})}
    record = _record(steps, seed, full_action_space, env_protocol, env_kwargs, settings)
    done = check_store_target(out, game, source, record, overwrite, env_protocol)
    if done is not None:
        return done  # complete already, same settings: nothing to do
    writer = None
    if resume:
        writer = TransitionStoreWriter.resume_matching(out, game, record, env_protocol)
    env_seed = seed + (len(writer.manifest.chunks) if writer else 0)
    env = _open_env(game, env_seed, full_action_space, env_protocol, env_kwargs)
    if writer is None:
        writer = _create_writer(out, game, source, record, env, chunk_size, overwrite, env_protocol)
    try:
        _save_policy_state_with_chunks(policy, writer)
        args = (steps, seed, env_seed, terminal_on_life_loss, progress)
        _record_episodes(policy, env, writer, *args)
        path = writer.close()
    finally:
        env.close()
    return TransitionStore(path)


def _record(
    steps: int,
    seed: int,
    full_action_space: bool,
    protocol: str,
    env_kwargs: dict[str, Any] | None,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The creation parameters a manifest records (and a resumed or re-run collection must
    match); a MinAtar store also records difficulty ramping (``sticky_action_prob`` has its
    own manifest key)."""
    record = {"steps": steps, "seed": seed, "full_action_space": full_action_space}
    record = {**record, "terminal_on_life_loss": settings.pop("terminal_on_life_loss")}
    if protocol == MINATAR_PROTOCOL:
        record["difficulty_ramping"] = bool((env_kwargs or {}).get("difficulty_ramping", True))
    return {**record, **settings}


def _resolve_protocol(game: str, env_protocol: str | None) -> str:
    """The env protocol of a collection: ``"minatar"`` for a MinAtar game (where the Atari
    default ``"dopamine"``, which generic callers pass, means the same), else the Atari one."""
    if not is_minatar(game):
        protocol = DEFAULT_ENV_PROTOCOL if env_protocol is None else env_protocol
        if protocol not in PREPROCESSING:  # an Atari game plays one of Atari's protocols
            raise ValueError(
                f"env_protocol: must be one of {', '.join(PREPROCESSING)}, got {protocol!r}"
            )
        return protocol
    if env_protocol not in (None, MINATAR_PROTOCOL, DEFAULT_ENV_PROTOCOL):
        raise ValueError(
            f"env_protocol: {env_protocol!r} is an Atari frame protocol; MinAtar game {game!r} "
            f"plays {MINATAR_PROTOCOL!r}"
        )
    return MINATAR_PROTOCOL


def _open_env(
    game: str,
    seed: int,
    full_action_space: bool,
    protocol: str,
    env_kwargs: dict[str, Any] | None,
) -> Any:
    """The recording environment: evaluation mode, with RAM (Atari) or the game's own state
    (MinAtar) in every step's info."""
    record = {"record_labels": True} if protocol == MINATAR_PROTOCOL else {"record_ram": True}
    return make_env(
        game,
        seed=seed,
        train=False,
        full_action_space=full_action_space,
        preprocessing=protocol,
        **record,
        **(env_kwargs or {}),
    )


def _create_writer(
    out: Path,
    game: str,
    source: str,
    record: dict[str, Any],
    env: Any,
    chunk_size: int,
    overwrite: bool,
    protocol: str,
) -> TransitionStoreWriter:
    """A new store for ``env``'s frames; its manifest records the env's observation spec, its
    sticky-action probability and protocol."""
    minatar = protocol == MINATAR_PROTOCOL
    base = env.unwrapped
    return TransitionStoreWriter.create(
        out,
        game=game,
        source=source,
        params=record,
        num_actions=int(env.action_space.n),
        chunk_size=chunk_size,
        overwrite=overwrite,
        # Atari 100k plays without sticky actions (make_env); MinAtar with its own (0.1).
        sticky_action_prob=float(base.sticky_action_prob) if minatar else 0.0,
        ram=not minatar,
        env_protocol=protocol,
        observation_spec=base.observation_spec if minatar else ATARI_SPEC,
        label_names=LABEL_NAMES[base.module] if minatar else None,
    )


def _check_collection_args(
    steps: int, chunk_size: int, seed: int, env_protocol: str, env_kwargs: dict | None
) -> None:
    if env_protocol not in ENV_PROTOCOLS:
        raise ValueError(
            f"env_protocol: must be one of {', '.join(ENV_PROTOCOLS)}, got {env_protocol!r}"
        )
    if "preprocessing" in (env_kwargs or {}):
        raise ValueError(
            "env_kwargs['preprocessing']: pass env_protocol instead (the manifest records it)"
        )
    if steps < 1:
        raise ValueError(f"steps: must be positive, got {steps}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
    if seed < 0:
        raise ValueError(f"seed: must be >= 0, got {seed}")


def _save_policy_state_with_chunks(policy: Policy, writer: TransitionStoreWriter) -> None:
    """Save a policy's ``state_dict()`` with every finished chunk, and restore the one saved
    with the last chunk of an interrupted collection being resumed."""
    save_state = getattr(policy, "state_dict", None)
    if save_state is None:
        return
    writer.state_fn = lambda: {"policy": save_state()}
    if writer.manifest.chunks:
        saved = (writer.manifest.resume_state or {}).get("policy")
        if saved is None:
            raise StoreError(
                f"{writer.partial}: an interrupted collection without its policy's saved "
                "state (an older sgi-lab made it); remove it to start over"
            )
        policy.load_state_dict(saved)


def _record_episodes(
    policy: Policy,
    env: Any,
    writer: TransitionStoreWriter,
    steps: int,
    seed: int,
    env_seed: int,
    terminal_on_life_loss: bool,
    progress: bool,
) -> None:
    """Act with ``policy`` until the writer holds ``steps`` rows; every chunk after the first
    one written here starts a fresh episode from a reset seeded ``seed + chunk index``."""
    # An interrupted collection begun by an sgi-lab without RAM goes on without it.
    with_ram = writer.has_ram
    labels_of = _labels_reader(writer)
    spec = writer.manifest.observation_spec
    done_rows = writer.num_rows
    bar = tqdm(
        total=steps,
        initial=done_rows,
        disable=not progress,
        desc=f"collect {writer.manifest.game}",
        unit="step",
        smoothing=0.05,
    )
    reset_policy = getattr(policy, "reset", None)

    def start_episode(seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = env.reset(seed=seed)
        if reset_policy:
            reset_policy()
        return obs, info

    obs, info = start_episode(env_seed)
    segment = len(writer.manifest.chunks)
    first = True
    try:
        for _ in range(steps - done_rows):
            action = int(policy(obs))
            ram = info["ram"] if with_ram else None  # the RAM behind obs
            labels = labels_of(info)  # likewise the game's state
            next_obs, _, terminated, truncated, info = env.step(action)
            terminal = bool(terminated or (terminal_on_life_loss and info.get("life_loss", False)))
            newest = obs.reshape(spec.frames, *spec.frame_shape)[-1]
            reward = float(info["raw_reward"])
            writer.append(newest, action, reward, terminal, first, ram, labels)
            first = False
            if terminated or truncated:
                obs, info = start_episode()
                first = True
            else:
                obs = next_obs
            bar.update(1)
            if len(writer.manifest.chunks) != segment and writer.num_rows < steps:
                # A chunk just finished: the next one starts a fresh, seeded episode, exactly
                # as a collection resumed here would.
                segment = len(writer.manifest.chunks)
                obs, info = start_episode(seed + segment)
                first = True
    finally:
        bar.close()


def _labels_reader(writer: TransitionStoreWriter) -> Callable[[dict], np.ndarray | None]:
    """``info -> the labels row`` of a store with labels (in `label_names` order), else None."""
    names = writer.manifest.label_names
    if not writer.has_labels or not names:
        return lambda info: None
    return lambda info: np.array([info["labels"][n] for n in names], np.int16)


def collect_random(
    game: str,
    steps: int,
    out: str | os.PathLike,
    *,
    seed: int = 0,
    hold_p: float = 1 / 3,
    **kwargs: Any,
) -> TransitionStore:
    """The paper's Random dataset: uniform actions held for Geometric(``hold_p``) steps.

    ``kwargs`` go to `collect` (``env_protocol="rlpyt"``: the authors' env).
    """

    full = kwargs.get("full_action_space", False)
    policy = RandomHoldPolicy(num_actions(game, full_action_space=full), p=hold_p, seed=seed)
    return collect(
        policy, game, steps, out, seed=seed, source="random", params={"hold_p": hold_p}, **kwargs
    )
