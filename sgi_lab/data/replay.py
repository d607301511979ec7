"""Online replay for finetuning: an append-only frame store with prioritized sampling (sum tree).

Rows follow :mod:`sgi_lab.data.store_format`'s semantics (newest frame of ``s_t``, ``a_t``, raw
``r_t``, ``terminal_t``, ``first_t``), so the same :class:`SequenceSampler` assembles batches of
K+1 stacked observations and n-step returns for Rainbow + SPR. Atari 100k never overwrites
(capacity = run length), so the buffer is append-only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sgi_lab.data.sampler import SequenceBatch, SequenceSampler
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec


class SumTree:
    """Binary sum tree over ``capacity`` priorities; vectorized updates and prefix-sum search."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        size = 1
        while size < self.capacity:
            size *= 2
        self.size = size  # leaves
        self.tree = np.zeros(2 * size, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, index: np.ndarray) -> np.ndarray:
        return self.tree[np.asarray(index) + self.size]

    def update(self, index: np.ndarray, value: np.ndarray) -> None:
        """Set leaf priorities (duplicates: the last write wins) and refresh their ancestors."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        value = np.broadcast_to(np.asarray(value, dtype=np.float64), index.shape)
        if np.any(value < 0) or not np.all(np.isfinite(value)):
            raise ValueError("priorities must be finite and non-negative")
        nodes = index + self.size
        self.tree[nodes] = value
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """Leaves whose prefix-sum interval contains each ``mass`` in ``[0, total)``."""
        mass = np.asarray(mass, dtype=np.float64).copy()
        nodes = np.ones(mass.shape, dtype=np.int64)
        while nodes[0] < self.size:
            left = 2 * nodes
            left_sum = self.tree[left]
            go_right = mass >= left_sum
            mass = np.where(go_right, mass - left_sum, mass)
            nodes = np.where(go_right, left + 1, left)
        leaves = nodes - self.size
        # Float round-off can land on an empty leaf at the far right: step back to a real one.
        return np.minimum(leaves, self.capacity - 1)


class PrioritizedReplay:
    """Append-only replay with proportional prioritized sampling (Schaul et al., 2016).

    Args:
        capacity: maximum rows (the run's steps).
        alpha: priority exponent; sampling probability is proportional to ``priority ** alpha``.
        K, n_step, gamma: sequence length and n-step return settings for the sampler.
        seed: RNG seed.
        goal_window: batches carry a goal observation 1..goal_window steps ahead in the same
            episode (``SequenceBatch.goal_obs``), for goal-conditioned RL while finetuning with
            all of SGI's losses; 0 (the default) leaves goals out.
        spec: what one observation is (`sgi_lab.envs.spec`): rows are its frames
            (``spec.frame_shape``), the sampler's stacks its ``stacked_shape``; Atari's default.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.5,
        K: int = 5,
        n_step: int = 10,
        gamma: float = 0.99,
        seed: int = 0,
        goal_window: int = 0,
        spec: ObservationSpec = ATARI_SPEC,
    ) -> None:
        self.capacity = int(capacity)
        self.alpha = alpha
        # Read by the sampler below (its stacks' shape), so set before it is made.
        self.observation_spec = spec
        self.frames = np.zeros((self.capacity, *spec.frame_shape), np.uint8)
        self.actions = np.zeros(self.capacity, np.int64)
        self.rewards = np.zeros(self.capacity, np.float32)
        self.terminals = np.zeros(self.capacity, bool)
        self.firsts = np.zeros(self.capacity, bool)
        self.row_episode_start = np.zeros(self.capacity, np.int64)
        self._episode_of_row = np.zeros(self.capacity, np.int64)
        self._episode_end: list[int] = []
        self.size = 0
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0
        # The sampler assembles batches; start rows come from the sum tree, not its uniform draw.
        self.sampler = SequenceSampler(
            self,
            batch_size=1,
            K=K,
            n_step=n_step,
            gamma=gamma,
            goal_window=goal_window,
            seed=seed,
        )
        self.rng = self.sampler.rng

    def __len__(self) -> int:
        return self.size

    @property
    def row_episode_end(self) -> np.ndarray:
        ends = np.asarray(self._episode_end, dtype=np.int64)
        return ends[self._episode_of_row[: self.size]]

    def gather_frames(self, rows: np.ndarray) -> np.ndarray:
        return self.frames[rows]

    def append(
        self, frame: np.ndarray, action: int, reward: float, terminal: bool, first: bool
    ) -> None:
        """Add row t (the newest frame of ``s_t``, ``a_t``, raw ``r_t``, flags)."""
        t = self.size
        if t >= self.capacity:
            raise RuntimeError(f"replay is full ({self.capacity} rows)")
        if t == 0 and not first:
            raise ValueError("the first row must start an episode")
        self.frames[t] = frame
        self.actions[t] = action
        self.rewards[t] = reward
        self.terminals[t] = terminal
        self.firsts[t] = first
        if first:
            self._episode_end.append(t)
            self.row_episode_start[t] = t
        else:
            self._episode_end[-1] = t
            self.row_episode_start[t] = self.row_episode_start[t - 1]
            if not self.terminals[t - 1]:
                # Row t-1 now has a stored successor: it becomes a valid start.
                self.tree.update(np.array([t - 1]), self.max_priority**self.alpha)
        self._episode_of_row[t] = len(self._episode_end) - 1
        self.size = t + 1
        if terminal:
            self.tree.update(np.array([t]), self.max_priority**self.alpha)

    def sample(self, batch_size: int, beta: float) -> tuple[SequenceBatch, np.ndarray]:
        """A prioritized batch and its importance-sampling weights (max-normalized), shape (B,)."""
        total = self.tree.total
        if total <= 0:
            raise RuntimeError("no valid transition to sample yet")
        # Stratified: one draw per equal slice of the total mass, as in Rainbow.
        bounds = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        starts = self.tree.find(bounds)
        probs = self.tree.get(starts) / total
        valid = probs > 0
        if not valid.all():  # round-off at a zero-priority leaf: redraw those uniformly
            pool = np.flatnonzero(self.tree.get(np.arange(self.size)) > 0)
            starts[~valid] = self.rng.choice(pool, size=int((~valid).sum()))
            probs = self.tree.get(starts) / total
        count = max(1, int((self.tree.get(np.arange(self.size)) > 0).sum()))
        weights = (count * probs) ** (-beta)
        weights = (weights / weights.max()).astype(np.float32)
        return self.sampler.batch_at(starts, rng=self.rng), weights

    def update_priorities(self, rows: np.ndarray, priorities: np.ndarray) -> None:
        """Set new priorities (e.g. the per-sample loss) for sampled rows."""
        priorities = np.asarray(priorities, dtype=np.float64) + 1e-6
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.update(rows, priorities**self.alpha)

    # -- checkpointing (tensors only, so torch.load(weights_only=True) reads it) ---------------
    def state_dict(self) -> dict[str, Any]:
        n = self.size
        return {
            "size": n,
            "frames": torch.from_numpy(self.frames[:n].copy()),
            "actions": torch.from_numpy(self.actions[:n].copy()),
            "rewards": torch.from_numpy(self.rewards[:n].copy()),
            "terminals": torch.from_numpy(self.terminals[:n].copy()),
            "firsts": torch.from_numpy(self.firsts[:n].copy()),
            "priorities": torch.from_numpy(self.tree.get(np.arange(n)).copy()),
            "max_priority": self.max_priority,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        if n > self.capacity:
            raise ValueError(f"checkpoint replay holds {n} rows, capacity is {self.capacity}")
        frame_shape = tuple(state["frames"].shape[1:])
        if n > 0 and frame_shape != self.observation_spec.frame_shape:
            raise ValueError(
                f"checkpoint replay frames are {frame_shape}, this replay's "
                f"{self.observation_spec.frame_shape} (another observation spec)"
            )
        s = self.sampler
        self.__init__(
            self.capacity,
            self.alpha,
            s.K,
            s.n_step,
            s.gamma,
            goal_window=s.goal_window,
            spec=self.observation_spec,
        )
        frames, actions = state["frames"].numpy(), state["actions"].numpy()
        rewards, terminals, firsts = (state[k].numpy() for k in ("rewards", "terminals", "firsts"))
        for t in range(n):
            self.append(frames[t], actions[t], rewards[t], bool(terminals[t]), bool(firsts[t]))
        self.tree.update(np.arange(n), state["priorities"].numpy())
        self.max_priority = float(state["max_priority"])
        self.rng.bit_generator.state = state["rng"]
