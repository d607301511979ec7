"""Sequence sampler: uniform batches of K+1 consecutive stacked observations from a store.

All index arithmetic is vectorized numpy over the store's per-row episode bounds. Semantics for a
start row ``t`` inside an episode whose rows are ``e0..e1``:

* ``valid[k]`` (k = 0..K): row ``t+k`` exists in the episode and no terminal transition happened
  in rows ``t..t+k-1``. Observations, actions and rewards past the first invalid step are zero.
* n-step return: ``R = sum_{j<m} gamma^j clip(r_{t+j})`` where ``m`` stops at n, after a terminal
  (inclusive; then the bootstrap discount is 0), or at the episode's last stored row ``e1`` when
  the episode was truncated (its last transition has no stored next state); otherwise the target
  bootstraps from the stack at ``t+m`` with discount ``gamma^m``.
* goal: a future row ``t+i`` of the same episode (:func:`draw_goal_offsets`):
  ``i ~ Uniform{1..window}`` clipped to ``e1`` (``"clip"``, the reference code), or uniform over
  the rows that exist, ``1..min(window, e1 - t)`` (``"uniform"``, the paper's text); ``i = 0``
  when ``t == e1``.

A row is a valid start when it has at least one complete transition: ``t < e1``, or ``t == e1``
and that last transition was terminal.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np

from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec

HISTORY = ATARI_SPEC.frames
"""Frames per Atari observation; a source's own is its ``observation_spec.frames``."""


class TransitionSource(Protocol):
    """What the sampler reads: a :class:`TransitionStore` or the online replay buffer."""

    actions: np.ndarray  # (N,) int64
    rewards: np.ndarray  # (N,) float32
    terminals: np.ndarray  # (N,) bool
    row_episode_start: np.ndarray  # (N,) int64
    row_episode_end: np.ndarray  # (N,) int64, inclusive
    # What one observation is; a source without the attribute (an older replay) is Atari's.
    observation_spec: ObservationSpec

    def gather_frames(self, rows: np.ndarray) -> np.ndarray: ...

    def __len__(self) -> int: ...


class SequenceBatch(NamedTuple):
    """A batch of B sequences (numpy; the trainer moves it to the device).

    Attributes:
        obs: (B, K+1, *stacked_shape) uint8 observations ((4, 84, 84) for Atari) for steps t..t+K (zero where not valid).
        actions: (B, K+1) int64 actions a_t..a_{t+K} (0 where not valid).
        rewards: (B, K+1) float32 clipped rewards (0 where not valid).
        valid: (B, K+1) bool, see the module docstring; ``valid[:, 0]`` is always True.
        terminals: (B, K+1) bool, transition t+k ended the episode for learning.
        returns: (B,) float32 n-step returns of clipped rewards (zeros if n_step == 0).
        bootstrap_obs: (B, *stacked_shape) uint8 observation at t+m, or None when n_step == 0.
        bootstrap_discount: (B,) float32 gamma^m, or 0 after a terminal.
        goal_obs: (B, *stacked_shape) uint8 observation of a future state, or None when goal_window == 0.
        goal_offset: (B,) int64 how many steps ahead the goal lies (0 if disabled).
        indices: (B,) int64 start rows.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    valid: np.ndarray
    terminals: np.ndarray
    returns: np.ndarray
    bootstrap_obs: np.ndarray | None
    bootstrap_discount: np.ndarray
    goal_obs: np.ndarray | None
    goal_offset: np.ndarray
    indices: np.ndarray


def valid_start_mask(source: TransitionSource) -> np.ndarray:
    """Rows with at least one complete transition (see module docstring)."""
    rows = np.arange(len(source))
    return (rows < source.row_episode_end[rows]) | source.terminals[rows]


def n_step_targets(
    rewards: np.ndarray,
    terminals: np.ndarray,
    starts: np.ndarray,
    episode_end: np.ndarray,
    n: int,
    gamma: float,
    clip: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step discounted returns, bootstrap rows and discounts, vectorized over starts.

    Args:
        rewards: (N,) rewards per row (already clipped if they should be).
        terminals: (N,) bool terminal flags per row.
        starts: (B,) start rows t.
        episode_end: (B,) last stored row e1 of each start's episode.
        n: steps to sum.
        gamma: discount.
        clip: sign-clip rewards before summing (DQN's reward clipping).

    Returns:
        returns (B,) float32, bootstrap rows t+m (B,) int64, discounts (B,) float32 (0 after a
        terminal, else gamma^m).
    """
    j = np.arange(n)
    rows = starts[:, None] + j  # (B, n)
    in_data = rows <= episode_end[:, None]
    safe = np.where(in_data, rows, starts[:, None])
    term = terminals[safe] & in_data
    # A reward at step j counts if no terminal came strictly before it and its row has a known
    # successor: either the row is before e1, or the row is terminal.
    term_before = np.cumsum(term, axis=1) - term > 0
    has_successor = (rows < episode_end[:, None]) | term
    counted = in_data & ~term_before & has_successor
    # Once a step is not counted, no later step is (truncation or terminal ends the sum).
    counted = np.cumprod(counted, axis=1).astype(bool)
    m = counted.sum(axis=1)
    step_rewards = rewards[safe].astype(np.float64)
    if clip:
        step_rewards = np.sign(step_rewards)
    returns = (np.where(counted, step_rewards, 0.0) * gamma**j).sum(axis=1)
    ended = (term & counted).any(axis=1)
    discount = np.where(ended, 0.0, gamma ** m.astype(np.float64))
    return returns.astype(np.float32), starts + m, discount.astype(np.float32)


GoalOffsets = Literal["clip", "uniform"]


def draw_goal_offsets(
    rng: np.random.Generator,
    starts: np.ndarray,
    episode_end: np.ndarray,
    window: int,
    mode: GoalOffsets = "clip",
) -> np.ndarray:
    """How many steps ahead each start's goal lies, within its episode.

    Args:
        rng: random source (one draw per start).
        starts: (B,) start rows t.
        episode_end: (B,) last stored row e1 of each start's episode.
        window: goals lie at most ``window`` steps ahead.
        mode: ``"clip"`` (the reference code: ``i ~ Uniform{1..window}``, then ``min(t + i, e1)``,
            so near the end most goals are the last state) or ``"uniform"`` (the text:
            ``i ~ Uniform{1..min(window, e1 - t)}``, every existing future state equally likely).

    Returns:
        (B,) int64 offsets; 0 where ``t == e1`` (no later state is stored).
    """
    room = np.asarray(episode_end, np.int64) - np.asarray(starts, np.int64)
    if mode == "clip":
        return np.minimum(rng.integers(1, window + 1, size=len(room)), room)
    if mode == "uniform":
        high = np.minimum(window, room)
        return np.where(high > 0, rng.integers(1, np.maximum(high, 1) + 1), 0).astype(np.int64)
    raise ValueError(f"goal_offsets must be 'clip' or 'uniform', got {mode!r}")


class SequenceSampler:
    """Uniform sampler of valid start rows that assembles :class:`SequenceBatch` es.

    Args:
        source: a TransitionStore (or anything with the same arrays and ``gather_frames``).
        batch_size: sequences per batch.
        K: prediction steps; each batch holds K+1 observations.
        n_step: steps for the n-step return (0: no returns and no bootstrap stacks).
        gamma: discount.
        goal_window: goals lie 1..goal_window steps ahead (0: no goals).
        goal_offsets: ``"clip"`` or ``"uniform"`` near an episode's end (:func:`draw_goal_offsets`).
        seed: RNG seed; the sampler is reproducible and its state can be saved and restored.
        clip_rewards: clip rewards to [-1, 1] (sign) before returns, as the learner sees them.
        prefetch: batches prepared ahead on a background thread (0: none).
    """

    def __init__(
        self,
        source: TransitionSource,
        batch_size: int = 256,
        K: int = 5,
        n_step: int = 10,
        gamma: float = 0.99,
        goal_window: int = 50,
        seed: int = 0,
        clip_rewards: bool = True,
        prefetch: int = 0,
        goal_offsets: GoalOffsets = "clip",
    ) -> None:
        if goal_offsets not in ("clip", "uniform"):
            raise ValueError(f"goal_offsets must be 'clip' or 'uniform', got {goal_offsets!r}")
        if batch_size < 1 or K < 0 or n_step < 0 or goal_window < 0:
            raise ValueError("batch_size must be >= 1 and K, n_step, goal_window >= 0")
        self.source = source
        # Sources that predate the spec (an online replay of Atari frames) are Atari's.
        self.observation_spec: ObservationSpec = getattr(source, "observation_spec", ATARI_SPEC)
        self.batch_size = batch_size
        self.K = K
        self.n_step = n_step
        self.gamma = gamma
        self.goal_window = goal_window
        self.goal_offsets = goal_offsets
        self.clip_rewards = clip_rewards
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.refresh()
        self._prefetch = prefetch
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._next_state: dict | None = None

    def refresh(self) -> None:
        """Recompute valid starts (call after the source grew, e.g. an online replay)."""
        self.starts = np.flatnonzero(valid_start_mask(self.source))

    # -- sampling -----------------------------------------------------------------------------
    def sample_starts(self, batch_size: int | None = None) -> np.ndarray:
        """Uniformly drawn valid start rows."""
        if len(self.starts) == 0:
            raise ValueError("the source holds no complete transition to sample")
        picks = self.rng.integers(0, len(self.starts), size=batch_size or self.batch_size)
        return self.starts[picks]

    def batch_at(self, starts: np.ndarray, rng: np.random.Generator | None = None) -> SequenceBatch:
        """Assemble the batch for given start rows (used by prioritized replay too)."""
        rng = rng or self.rng
        src = self.source
        t = np.asarray(starts, dtype=np.int64)
        B, K = len(t), self.K
        e0 = src.row_episode_start[t]
        e1 = src.row_episode_end[t]

        steps = t[:, None] + np.arange(K + 1)  # (B, K+1)
        in_episode = steps <= e1[:, None]
        safe_steps = np.where(in_episode, steps, t[:, None])
        term = src.terminals[safe_steps] & in_episode
        term_before = (np.cumsum(term, axis=1) - term) > 0
        valid = in_episode & ~term_before
        actions = np.where(valid, src.actions[safe_steps], 0)
        step_rewards = src.rewards[safe_steps]
        if self.clip_rewards:
            step_rewards = np.sign(step_rewards)
        rewards = np.where(valid, step_rewards, 0.0).astype(np.float32)

        # One contiguous window of K+H frames per sample (H frames per observation), then
        # overlapping H-frame views.
        spec = self.observation_spec
        history = spec.frames
        window_rows = t[:, None] + np.arange(-(history - 1), K + 1)  # (B, K+H)
        last_valid = t + valid.sum(axis=1) - 1
        frame_ok = (window_rows >= e0[:, None]) & (window_rows <= last_valid[:, None])
        frames = src.gather_frames(np.where(frame_ok, window_rows, t[:, None]))
        frames[~frame_ok] = 0
        s = frames.strides
        obs = np.lib.stride_tricks.as_strided(
            frames, shape=(B, K + 1, history, *frames.shape[2:]), strides=(s[0], s[1], *s[1:])
        )
        obs = np.ascontiguousarray(obs).reshape(B, K + 1, *spec.stacked_shape)
        obs[~valid] = 0

        if self.n_step > 0:
            returns, boot_rows, discount = n_step_targets(
                src.rewards, src.terminals, t, e1, self.n_step, self.gamma, clip=self.clip_rewards
            )
            # After a terminal the discount is 0 and the row may lie past e1: any stack will do.
            bootstrap_obs = self._stacks(np.minimum(boot_rows, e1), e0)
        else:
            returns = np.zeros(B, np.float32)
            discount = np.zeros(B, np.float32)
            bootstrap_obs = None

        if self.goal_window > 0:
            offset = draw_goal_offsets(rng, t, e1, self.goal_window, self.goal_offsets)
            goal_rows = t + offset
            goal_obs = self._stacks(goal_rows, e0)
            goal_offset = goal_rows - t
        else:
            goal_obs, goal_offset = None, np.zeros(B, np.int64)

        return SequenceBatch(
            obs=obs,
            actions=actions.astype(np.int64),
            rewards=rewards,
            valid=valid,
            terminals=term,
            returns=returns,
            bootstrap_obs=bootstrap_obs,
            bootstrap_discount=discount,
            goal_obs=goal_obs,
            goal_offset=goal_offset,
            indices=t,
        )

    def _stacks(self, rows: np.ndarray, episode_start: np.ndarray) -> np.ndarray:
        spec = self.observation_spec
        idx = rows[:, None] + np.arange(-(spec.frames - 1), 1)
        ok = idx >= episode_start[:, None]
        frames = self.source.gather_frames(np.where(ok, idx, rows[:, None]))
        frames[~ok] = 0
        return frames.reshape(len(rows), *spec.stacked_shape)

    def sample(self) -> SequenceBatch:
        """One batch; from the prefetch queue when prefetching is on."""
        if self._prefetch <= 0:
            return self.batch_at(self.sample_starts())
        if self._thread is None:
            self._start_prefetch()
        state, batch = self._queue.get()
        if isinstance(batch, BaseException):
            raise batch
        self._next_state = state
        return batch

    def __iter__(self):
        while True:
            yield self.sample()

    # -- prefetch -----------------------------------------------------------------------------
    def _start_prefetch(self) -> None:
        self._queue = queue.Queue(maxsize=self._prefetch)
        self._stop.clear()
        self._next_state = self.rng.bit_generator.state

        def work() -> None:
            while not self._stop.is_set():
                try:
                    batch = self.batch_at(self.sample_starts())
                    item = (self.rng.bit_generator.state, batch)
                except BaseException as exc:  # surfaced to the consumer
                    item = (None, exc)
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue

        self._thread = threading.Thread(target=work, name="sgi-prefetch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the prefetch thread; unconsumed batches are discarded and the RNG rewound."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
            self._queue = None
            # Rewind so the next batch drawn is the first one nobody consumed.
            self.rng.bit_generator.state = self._next_state

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """RNG state such that a restored sampler yields the next unconsumed batch."""
        if self._thread is not None:
            return {"rng": self._next_state}
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restart = self._thread is not None
        self.close()
        self.rng.bit_generator.state = state["rng"]
        self._next_state = None
        if restart:
            self._start_prefetch()
