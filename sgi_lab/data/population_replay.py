"""Prioritized replay for a whole population of agents, vectorized across agents in torch.

`PopulationReplay` holds N agents' append-only replays as tensors with a leading agent axis on
one device (the learner's, so that on a GPU frames never cross the bus after they are stored).
All agents append one row per environment step together, so every agent holds the same number of
rows; appending, prioritized sampling, batch assembly and priority updates are single tensor
programs over the agent axis. Only the random draws may loop over agents (``draws``): with
``"agent"`` (the CPU's default) each agent draws from its own ``torch.Generator``, so that its
stream does not depend on who else is in the population; with ``"population"`` (the GPU's, with
the prefix walk) one generator draws every agent's uniforms in one call, one kernel where
``"agent"`` launches one per agent: the same distribution, but an agent's draws then depend on
the population it is in (its size and its place in it).

Semantics are those of :class:`sgi_lab.data.replay.PrioritizedReplay` (rows, valid starts,
``max_priority ** alpha`` for new starts, stratified proportional sampling, importance weights)
and batches those of :class:`sgi_lab.data.sampler.SequenceSampler` (see its module docstring),
with every array carrying the agent axis first. One difference, on float round-off only: where
the numpy sum tree's descent lands on a zero-priority leaf and the numpy replay redraws it
uniformly, :meth:`BatchedSumTree.find` never enters an empty subtree and returns the nearest
positive leaf, which keeps the sampling free of host synchronisation. ``sampling`` chooses how a
draw finds its leaf (`sgi_lab.data.batched_sum_tree`): the tree walk (the CPU's default, bit for
bit the numpy tree's sums) or prefix sums (the GPU's: a few kernels instead of ~130).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from sgi_lab.data.batched_sum_tree import SAMPLING, BatchedSumTree
from sgi_lab.data.replay import PrioritizedReplay
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec
from sgi_lab.runtime.graphs import GraphedCall

__all__ = ["DRAWS", "BatchedSumTree", "PopulationBatch", "PopulationReplay"]

DRAWS = ("auto", "agent", "population")
"""Who draws a batch's uniforms: each agent's generator, or one for the population."""


def _generators(seeds: Sequence[int], draws: str, device: torch.device) -> list[torch.Generator]:
    """What a replay's draws come from (a CUDA graph registers them): a generator per agent
    seeded from its seed, or one for the population seeded from all the seeds."""
    if draws == "population":
        seeds = [int(np.random.SeedSequence(seeds).generate_state(1, np.uint64)[0])]
    return [torch.Generator(device=device).manual_seed(s) for s in seeds]


class PopulationBatch(NamedTuple):
    """A batch of B sequences per agent, torch tensors on the replay's device.

    The fields are :class:`sgi_lab.data.sampler.SequenceBatch`'s with a leading agent axis N,
    plus the importance-sampling weights.

    Attributes:
        obs: (N, B, K+1, *stacked_shape) uint8 frame stacks ((4, 84, 84) for Atari) for steps t..t+K (zero where not valid).
        actions: (N, B, K+1) int64 (0 where not valid).
        rewards: (N, B, K+1) float32 sign-clipped rewards (0 where not valid).
        valid: (N, B, K+1) bool; ``valid[..., 0]`` is always True.
        terminals: (N, B, K+1) bool.
        returns: (N, B) float32 n-step returns of clipped rewards (zeros if n_step == 0).
        bootstrap_obs: (N, B, *stacked_shape) uint8 stack at t+m, or None when n_step == 0.
        bootstrap_discount: (N, B) float32 gamma^m, or 0 after a terminal.
        goal_obs: (N, B, *stacked_shape) uint8 stack of a future state, or None when goal_window == 0.
        goal_offset: (N, B) int64 steps from t to the goal (0 if disabled).
        indices: (N, B) int64 start rows.
        weights: (N, B) float32 importance-sampling weights, each agent's max normalised to 1
            (ones from `PopulationReplay.batch_at`).
    """

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    valid: torch.Tensor
    terminals: torch.Tensor
    returns: torch.Tensor
    bootstrap_obs: torch.Tensor | None
    bootstrap_discount: torch.Tensor
    goal_obs: torch.Tensor | None
    goal_offset: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor


class PopulationReplay:
    """Append-only prioritized replays of N agents, stored and sampled together on one device.

    Args:
        num_agents: N.
        capacity: maximum rows per agent (the run's steps).
        alpha: priority exponent; sampling probability is proportional to ``priority ** alpha``.
        K, n_step, gamma: sequence length and n-step return settings (as `SequenceSampler`).
        seeds: one seed per agent for its ``torch.Generator`` (default ``0..N-1``).
        goal_window: goals lie 1..goal_window steps ahead (0: no goals).
        device: where storage, sum trees and batches live.
        reuse_buffers: write each batch's frames (obs, bootstrap_obs, goal_obs) into buffers
            the replay keeps, so a batch is valid only until the next `sample`/`batch_at`. On a
            CPU this saves the page faults of a fresh allocation per batch (about 45 of 60 ms
            for 16 agents at batch 32, K = 5); on a GPU the caching allocator already does.
        first_after_terminal: the row after every learning terminal starts a new episode here
            (its ``first`` flag is set whatever ``append`` is given), so its frame stacks
            start from zero padding and goals stay before it: the stacks of an env that
            empties its own at a life loss (``make_env(preprocessing="rlpyt")`` in training,
            as rlpyt's replay, which starts stacks after every ``done``). Off: only episode
            starts do, matching the default env, whose stack runs on across life losses.

        spec: what one observation is (`sgi_lab.envs.spec`): a row holds one frame
            (``spec.frame_shape``), batches stack ``spec.frames`` of them into
            ``spec.stacked_shape``; Atari's by default.
        sampling: how a draw finds its leaf (`sgi_lab.data.batched_sum_tree.SAMPLING`):
            ``"tree"``, ``"prefix"``, or ``"auto"``: prefix sums on CUDA, the walk elsewhere.
        draws: who draws the uniforms (`DRAWS`): ``"agent"`` (each agent's generator, seeded
            from its seed), ``"population"`` (one generator for all, seeded from all the seeds),
            or ``"auto"``: ``"population"`` with the prefix walk (the GPU's path), ``"agent"``
            with the tree walk, whose streams are those of the CPU's runs before.

    Memory per agent: ``capacity * (frame bytes + 38)`` bytes (Atari's frame: 84*84) of rows
    and episode bookkeeping plus 24 bytes per sum-tree leaf (``capacity`` rounded up to a power
    of two; two float64 nodes and an int64 scratch for writes): about 0.71 GB at 100k rows.
    """

    def __init__(
        self,
        num_agents: int,
        capacity: int,
        alpha: float = 0.5,
        K: int = 5,
        n_step: int = 10,
        gamma: float = 0.99,
        seeds: Sequence[int] | None = None,
        goal_window: int = 0,
        device: torch.device | str = "cpu",
        reuse_buffers: bool = False,
        cuda_graphs: bool = False,
        first_after_terminal: bool = False,
        spec: ObservationSpec = ATARI_SPEC,
        sampling: str = "auto",
        draws: str = "auto",
    ) -> None:
        if K < 0 or n_step < 0 or goal_window < 0:
            raise ValueError("K, n_step and goal_window must be >= 0")
        seeds = list(range(num_agents)) if seeds is None else [int(s) for s in seeds]
        if len(seeds) != num_agents:
            raise ValueError(f"{len(seeds)} seeds for {num_agents} agents")
        self.num_agents = N = int(num_agents)
        self.capacity = C = int(capacity)
        self.alpha = alpha
        self.K, self.n_step, self.gamma, self.goal_window = K, n_step, gamma, goal_window
        self.device = dev = torch.device(device)
        self.observation_spec = spec
        self._make_storage()
        if sampling not in SAMPLING:
            raise ValueError(f"sampling: one of {SAMPLING}, got {sampling!r}")
        self.tree = BatchedSumTree(N, C, dev, None if sampling == "auto" else sampling)
        self.max_priority = torch.ones(N, dtype=torch.float64, device=dev)
        # The importance-sampling exponent as device state: set before each sample (`sample`,
        # `set_beta`), read by `sample_at_beta`, so a captured graph reads the current value.
        self.beta = torch.zeros((), dtype=torch.float64, device=dev)
        if draws not in DRAWS:
            raise ValueError(f"draws: one of {DRAWS}, got {draws!r}")
        if draws == "auto":
            draws = "population" if self.tree.walk == "prefix" else "agent"
        self.draws = draws
        self.generators = _generators(seeds, draws, dev)
        # Kept only so that state_dict(i) reads as a PrioritizedReplay checkpoint.
        self._numpy_rng_states = [
            np.random.Generator(np.random.PCG64(s)).bit_generator.state for s in seeds
        ]
        self.reuse_buffers = reuse_buffers
        self.first_after_terminal = bool(first_after_terminal)
        self._append_graph = None
        if cuda_graphs and GraphedCall.available(dev):
            self._append_graph = GraphedCall(self._write_row, warmup=2)
        self._buffers: dict[str, torch.Tensor] = {}
        self._ready = False  # every agent has a valid start (totals never decrease after)
        self._agents = torch.arange(N, device=dev)
        self._make_batch_constants()

    def _make_storage(self) -> None:
        """The rows (frames, actions, rewards, flags), the episode bookkeeping and the position."""
        N, C, dev, spec = self.num_agents, self.capacity, self.device, self.observation_spec
        # Frames as flat rows with one all-zero row at the end: padding frames are gathered
        # from it, so no masking pass follows the gather (and 2-D row gathers are the fast ones).
        pixels = int(np.prod(spec.frame_shape))
        self._frame_rows = torch.zeros(N * C + 1, pixels, dtype=torch.uint8, device=dev)
        self.frames = self._frame_rows[: N * C].view(N, C, *spec.frame_shape)
        # The tables a batch reads over its window of steps (`_batch`) run that window past the
        # capacity (zeros, never written): a start's window needs no clamp to the last row.
        width = C + max(self.K + 1, self.n_step)
        kinds = {"actions": torch.int64, "rewards": torch.float32, "terminals": torch.bool}
        self._windowed = {k: torch.zeros(N, width, dtype=d, device=dev) for k, d in kinds.items()}
        self.actions, self.rewards, self.terminals = (t[:, :C] for t in self._windowed.values())
        self.firsts = torch.zeros(N, C, dtype=torch.bool, device=dev)
        # Episode bookkeeping: a row's episode start, its episode's index, and each episode's
        # last stored row (the current episode's end moves with every append).
        self.row_episode_start = torch.zeros(N, C, dtype=torch.int64, device=dev)
        self.episode_of_row = torch.zeros(N, C, dtype=torch.int64, device=dev)
        self.episode_end = torch.zeros(N, C, dtype=torch.int64, device=dev)
        self.episodes = torch.zeros(N, dtype=torch.int64, device=dev)
        self.size = 0
        # The row the next append writes, as device state too: the append reads it there, so
        # one captured graph serves every step (`_append_graph`).
        self.position = torch.zeros((), dtype=torch.int64, device=dev)

    def _make_batch_constants(self) -> None:
        """Constants of every batch, made once (on a GPU each would be a kernel per batch): the
        window of steps a start reads, each agent's first row among all agents' rows, the
        offsets of a frame stack's rows from its last, the all-zero frame row, zeros, the
        discounts."""
        N, C, n, dev = self.num_agents, self.capacity, self.n_step, self.device
        self._window = torch.arange(max(self.K + 1, n), device=dev)
        self._row_offsets = self._agents[:, None] * C
        history = torch.arange(-(self.observation_spec.frames - 1), 1, device=dev)
        self._frame_offsets = self._row_offsets[:, :, None, None] + history  # (N, 1, 1, frames)
        self._zero_row = torch.tensor(N * C, device=dev)
        self._zero = torch.zeros((), device=dev)
        self._zero_index = torch.zeros((), dtype=torch.int64, device=dev)
        self._gamma_powers = torch.from_numpy(self.gamma ** np.arange(n + 1)).to(dev)
        # gamma ** m (row 0), or 0 after a terminal (row 1)
        self._discounts = torch.stack([self._gamma_powers, torch.zeros(n + 1, device=dev)])
        self._discounts = self._discounts.float()

    def __len__(self) -> int:
        return self.size

    @property
    def positive_leaves(self) -> torch.Tensor:
        """(N,) int64 each agent's count of rows with a positive priority (its valid starts)."""
        return self.tree.positive_counts()

    def _tensor(self, x: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x) if not torch.is_tensor(x) else x).to(
            self.device, dtype, non_blocking=True
        )

    # -- appending ------------------------------------------------------------------------------
    def append(
        self,
        frames: np.ndarray | torch.Tensor,
        actions: np.ndarray | torch.Tensor,
        rewards: np.ndarray | torch.Tensor,
        terminals: np.ndarray | torch.Tensor,
        firsts: np.ndarray | torch.Tensor,
    ) -> None:
        """Add row t for every agent (the newest frame of ``s_t``, ``a_t``, raw ``r_t``, flags).

        Args:
            frames: (N, *spec.frame_shape) uint8 ((N, 84, 84) for Atari).
            actions: (N,) int.
            rewards: (N,) raw rewards (clipped when sampled).
            terminals: (N,) bool, transition t ended the episode for learning.
            firsts: (N,) bool, row t starts an episode (with ``first_after_terminal``, the
                row after a terminal does too, whatever is given).
        """
        t = self.size
        if t >= self.capacity:
            raise RuntimeError(f"replay is full ({self.capacity} rows)")
        first = self._tensor(firsts, torch.bool)
        if t == 0 and not bool(first.all()):
            raise ValueError("the first row must start an episode")
        row = (
            self._tensor(frames, torch.uint8),
            self._tensor(actions, torch.int64),
            self._tensor(rewards, torch.float32),
            self._tensor(terminals, torch.bool),
            first,
        )
        if self._append_graph is not None:  # CUDA: 2 eager rows, then one graph per row
            self._append_graph(*row)
        else:
            self._write_row(*row)
        self.size = t + 1

    def _write_row(
        self,
        frames: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        terminal: torch.Tensor,
        first: torch.Tensor,
    ) -> None:
        """Write row ``position`` of every agent and advance it: device tensors only, no host
        read, the same operators at every row (`sgi_lab.runtime.graphs` checks it)."""
        t = self.position
        at = t.view(1)
        before = (t - 1).clamp(min=0).view(1)
        if self.first_after_terminal:
            first = first | (self.terminals.index_select(1, before)[:, 0] & (t > 0))
        self.frames.index_copy_(1, at, frames[:, None])
        self.actions.index_copy_(1, at, actions[:, None])
        self.rewards.index_copy_(1, at, rewards[:, None])
        self.terminals.index_copy_(1, at, terminal[:, None])
        self.firsts.index_copy_(1, at, first[:, None])
        self.episodes += first
        episode = self.episodes - 1
        self.episode_of_row.index_copy_(1, at, episode[:, None])
        self.episode_end[self._agents, episode] = t
        previous_start = self.row_episode_start.index_select(1, before)[:, 0]
        self.row_episode_start.index_copy_(1, at, torch.where(first, t, previous_start)[:, None])

        # Row t-1 becomes a valid start once its successor is stored (unless it was terminal,
        # then it already was); a terminal row t is valid at once. Rows left alone are written
        # with their current priority; the pair [t-1, t] is one t-only write when t == 0.
        rows = torch.cat([before, at]).expand(self.num_agents, 2)
        previous_terminal = self.terminals.index_select(1, before)[:, 0]
        gets_successor = ~first & ~previous_terminal & (t > 0)
        new = torch.stack([gets_successor, terminal], 1)
        values = torch.where(new, self._power(self.max_priority)[:, None], self.tree.get(rows))
        self.tree.update(rows, values)
        self.position += 1

    # -- sampling -------------------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether every agent has a valid start to sample (reads the device until it is so;
        totals never decrease after)."""
        if not self._ready:
            self._ready = bool((self.tree.total > 0).all())
        return self._ready

    def sample(self, batch_size: int, beta: float) -> PopulationBatch:
        """A prioritized batch per agent with importance-sampling weights.

        Stratified as in Rainbow: agent i's draw b lies in the b-th of ``batch_size`` equal
        slices of its total priority. Weights are ``(count * p) ** -beta`` over each agent's
        batch max, ``p`` the sampling probability and ``count`` the agent's positive leaves.

        Args:
            batch_size: B sequences per agent.
            beta: importance-sampling exponent.

        Returns:
            A `PopulationBatch` with (N, B, ...) tensors on the device.
        """
        if not self.ready():  # a host synchronisation only until every agent has data
            raise RuntimeError("an agent has no valid transition to sample yet")
        self.set_beta(beta)
        return self.sample_at_beta(batch_size)

    def set_beta(self, beta: float) -> None:
        """The importance-sampling exponent of the next `sample_at_beta`."""
        self.beta.fill_(beta)

    def sample_at_beta(self, batch_size: int) -> PopulationBatch:
        """`sample` at the exponent last set (`set_beta`), with no host synchronisation and
        every input read from device state: the form a CUDA graph captures (the caller has
        checked `ready`)."""
        uniforms = self._draw(torch.rand, batch_size, dtype=torch.float64)
        offsets = self._draw_goal_offsets(batch_size)
        starts = self.tree.find_stratified(uniforms)
        # (count * P(j)) ** -beta over the batch's largest: the count and the total cancel,
        # leaving (smallest sampled priority / priority) ** beta.
        priorities = self.tree.get(starts)
        weights = ((priorities.min(1, keepdim=True).values / priorities) ** self.beta).float()
        return self._batch(starts, offsets, weights)

    def _draw(self, draw: Any, batch_size: int, *args: Any, **kwargs: Any) -> torch.Tensor:
        """(N, batch_size) draws of ``draw`` (``torch.rand``, ``torch.randint``): one per agent
        from its generator, or one call for all agents from the population's."""
        if self.draws == "population":
            size = (self.num_agents, batch_size)
            return draw(*args, size, generator=self.generators[0], device=self.device, **kwargs)
        return torch.stack(
            [
                draw(*args, (batch_size,), generator=g, device=self.device, **kwargs)
                for g in self.generators
            ]
        )

    def _draw_goal_offsets(self, batch_size: int) -> torch.Tensor | None:
        if self.goal_window == 0:
            return None
        return self._draw(torch.randint, batch_size, 1, self.goal_window + 1)

    def _generator(self, i: int) -> torch.Generator:
        """What agent i draws from: its own generator, or the population's."""
        return self.generators[i if self.draws == "agent" else 0]

    def batch_at(
        self, starts: torch.Tensor, goal_offset: torch.Tensor | None = None
    ) -> PopulationBatch:
        """Assemble the batch for given start rows, all agents at once (weights: ones).

        Args:
            starts: (N, B) int64 valid start rows.
            goal_offset: (N, B) int64 offsets in 1..goal_window before clipping to the episode's
                end; None draws them from the agents' generators (ignored without goals).
        """
        t = self._tensor(starts, torch.int64)
        return self._batch(t, goal_offset, torch.ones(t.shape, device=self.device))

    def _batch(
        self, t: torch.Tensor, goal_offset: torch.Tensor | None, weights: torch.Tensor
    ) -> PopulationBatch:
        """`batch_at` with the weights given: one window of rows serves the sequence's K+1 steps
        and the n-step return's n, and every frame gather is one ``index_select`` over all
        agents' rows (`_gather_frames`)."""
        N, B = t.shape
        K = self.K
        e0 = self.row_episode_start.gather(1, t)
        e1 = self._episode_end_of(t)
        e0_flat = e0 + self._row_offsets  # the episode's start among all agents' rows

        steps = t[..., None] + self._window  # (N, B, max(K+1, n_step))
        in_episode = steps <= e1[..., None]
        # Rows past the episode's end are read and masked (windowed tables: never past them).
        term = self._rows(self._windowed["terminals"], steps) & in_episode
        # Valid: in the episode with no terminal before (a running count of terminals is at
        # most the step's own flag).
        terminals_so_far = term.cumsum(-1)
        valid = (terminals_so_far <= term) & in_episode
        signs = self._rows(self._windowed["rewards"], steps).sign()
        seq_valid = valid[..., : K + 1]
        actions = self._rows(self._windowed["actions"], steps)[..., : K + 1] * seq_valid
        rewards = torch.where(seq_valid, signs[..., : K + 1], self._zero)

        # Frame j of stack k is row t+k+j-3: real from the episode's start up to the last valid
        # step, zero elsewhere (before the start, and for invalid steps entirely); a valid
        # step's frames never lie past the last valid step.
        frame_rows = steps[..., : K + 1, None] + self._frame_offsets  # (N, B, K+1, frames)
        frame_ok = (frame_rows >= e0_flat[..., None, None]) & seq_valid[..., None]
        obs = self._gather_frames(frame_rows, frame_ok, "obs")

        if self.n_step > 0:
            returns, boot_rows, discount = self._n_step_targets(
                t, e1, steps, term, terminals_so_far, valid, signs
            )
            # After a terminal the discount is 0 and the row may lie past e1: any stack will do.
            bootstrap_obs = self._stacks(torch.minimum(boot_rows, e1), e0_flat, "bootstrap_obs")
        else:
            returns = discount = self._zero.expand(N, B)  # read-only zeros, no kernel
            bootstrap_obs = None

        if self.goal_window > 0:
            if goal_offset is None:
                goal_offset = self._draw_goal_offsets(B)
            goal_rows = torch.minimum(t + self._tensor(goal_offset, torch.int64), e1)
            goal_obs = self._stacks(goal_rows, e0_flat, "goal_obs")
            offset = goal_rows - t
        else:
            goal_obs, offset = None, self._zero_index.expand(N, B)

        return PopulationBatch(
            obs=obs,
            actions=actions,
            rewards=rewards,
            valid=seq_valid,
            terminals=term[..., : K + 1],
            returns=returns,
            bootstrap_obs=bootstrap_obs,
            bootstrap_discount=discount,
            goal_obs=goal_obs,
            goal_offset=offset,
            indices=t,
            weights=weights,
        )

    def _episode_end_of(self, rows: torch.Tensor) -> torch.Tensor:
        """(N, B) last stored row of each row's episode."""
        return self.episode_end.gather(1, self.episode_of_row.gather(1, rows))

    def _rows(self, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``table[i, rows[i, ...]]`` for an (N, capacity) table and (N, ...) rows."""
        return table.gather(1, rows.reshape(rows.shape[0], -1)).reshape(rows.shape)

    def _gather_frames(self, rows: torch.Tensor, keep: torch.Tensor, name: str) -> torch.Tensor:
        """(N, ..., *stacked_shape) stacks of the frames at ``rows`` (N, ..., frames), rows
        among all agents' (agent i's row r is ``i * capacity + r``), zero where ``keep`` is
        False."""
        flat = torch.where(keep, rows, self._zero_row).reshape(-1)
        out = None
        if self.reuse_buffers:
            out = self._buffers.get(name)
            if out is None or out.shape[0] != len(flat):
                out = self._buffers[name] = self._frame_rows.new_empty(
                    len(flat), self._frame_rows.shape[1]
                )
        frames = torch.index_select(self._frame_rows, 0, flat, out=out)
        return frames.view(*rows.shape[:-1], *self.observation_spec.stacked_shape)

    def _stacks(self, rows: torch.Tensor, episode_start: torch.Tensor, name: str) -> torch.Tensor:
        """(N, B, *stacked_shape) stacks ending at ``rows`` (N, B), zero before each episode's
        start (``episode_start`` among all agents' rows)."""
        frame_rows = rows[..., None] + self._frame_offsets[:, 0]  # (N, B, frames)
        return self._gather_frames(frame_rows, frame_rows >= episode_start[..., None], name)

    def _n_step_targets(
        self,
        t: torch.Tensor,
        e1: torch.Tensor,
        steps: torch.Tensor,
        term: torch.Tensor,
        terminals_so_far: torch.Tensor,
        valid: torch.Tensor,
        signs: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`sampler.n_step_targets` with clipped rewards over (N, B) starts and episode ends,
        from the batch's window of ``steps`` (N, B, >= n_step) with their terminals (and their
        running count), validity and reward signs."""
        n = self.n_step
        # A reward counts if no terminal came before it and its row has a known successor; the
        # first step that does not count ends the sum (truncation or terminal), and only a
        # valid step's row can be the episode's last, so the counted steps are a prefix.
        term = term[..., :n]
        counted = valid[..., :n] & ((steps[..., :n] < e1[..., None]) | term)
        m = counted.sum(-1)
        step_rewards = torch.where(counted, signs[..., :n], self._zero)
        returns = (step_rewards * self._gamma_powers[:-1]).sum(-1)  # float64
        # The first terminal in the episode is valid, and counted: the sum ended at it if the
        # n steps hold one (1), with discount 0 (row 1 of the table), else gamma ** m (row 0).
        ended = terminals_so_far[..., n - 1].clamp(max=1)
        return returns.float(), t + m, self._discounts[ended, m]

    # -- priorities -----------------------------------------------------------------------------
    def update_priorities(
        self, indices: torch.Tensor | np.ndarray, priorities: torch.Tensor | np.ndarray
    ) -> None:
        """Set new priorities (e.g. per-sample losses) for sampled rows, all agents at once.

        Args:
            indices: (N, B) rows (a batch's ``indices``).
            priorities: (N, B) non-negative priorities (before ``alpha``).
        """
        rows = self._tensor(indices, torch.int64)
        p = self._tensor(priorities, torch.float64) + 1e-6
        # the running max over every agent's batch, in place: one operator
        self.max_priority[:, None].scatter_reduce_(1, self._zero_index.expand(p.shape), p, "amax")
        self.tree.update(rows, self._power(p))

    def _power(self, p: torch.Tensor) -> torch.Tensor:
        """``p ** alpha``. numpy (hence `PrioritizedReplay`) computes ``** 0.5`` as a correctly
        rounded square root; torch's sqrt is one on a GPU, while its vectorised CPU kernels
        (sqrt and pow alike) can be an ulp off, so priorities agree to float64 round-off."""
        return p.sqrt() if self.alpha == 0.5 else p**self.alpha

    # -- checkpointing, in PrioritizedReplay.state_dict's format, per agent --------------------
    def state_dict(self, i: int) -> dict[str, Any]:
        """Agent i's replay as `PrioritizedReplay.state_dict` writes it (CPU tensors), plus the
        state of the torch generator it draws from under ``"torch_rng"`` (with population draws
        the population's, the same in every agent's); ``"rng"`` carries the numpy state that
        was loaded (or the seed's), which this class does not draw from."""
        n = self.size
        return {
            "size": n,
            "frames": self.frames[i, :n].cpu().clone(),
            "actions": self.actions[i, :n].cpu().clone(),
            "rewards": self.rewards[i, :n].cpu().clone(),
            "terminals": self.terminals[i, :n].cpu().clone(),
            "firsts": self.firsts[i, :n].cpu().clone(),
            "priorities": self.tree.tree[i, self.tree.size : self.tree.size + n].cpu().clone(),
            "max_priority": float(self.max_priority[i]),
            "rng": self._numpy_rng_states[i],
            "torch_rng": self._generator(i).get_state(),
        }

    def load_state_dict(self, i: int, state: dict[str, Any]) -> None:
        """Restore agent i from `state_dict` or `PrioritizedReplay.state_dict` output.

        All agents hold the same number of rows: load into an empty population (which takes the
        checkpoint's size; then load every agent) or one of the same size. Without
        ``"torch_rng"`` (a `PrioritizedReplay` checkpoint) the generator is seeded from the
        numpy state, so a resumed agent's draws stay reproducible. With population draws each
        agent's load sets the population's generator: load agents saved together.
        """
        n = int(state["size"])
        if n > self.capacity:
            raise ValueError(f"checkpoint replay holds {n} rows, capacity is {self.capacity}")
        if self.size not in (0, n):
            raise ValueError(f"checkpoint replay holds {n} rows, the population {self.size}")
        frame_shape = tuple(state["frames"].shape[1:])
        if n > 0 and frame_shape != self.observation_spec.frame_shape:
            raise ValueError(
                f"checkpoint replay frames are {frame_shape}, this replay's "
                f"{self.observation_spec.frame_shape} (another observation spec)"
            )
        dev = self.device
        firsts = state["firsts"].to(dev, torch.bool)
        if n > 0 and not bool(firsts[0]):
            raise ValueError("the first row must start an episode")
        for name in ("frames", "actions", "rewards", "terminals", "firsts"):
            table = getattr(self, name)
            table[i].zero_()
            table[i, :n] = state[name].to(dev, table.dtype)
        rows = torch.arange(n, device=dev)
        episode = firsts.long().cumsum(0) - 1
        self.episode_of_row[i].zero_()
        self.episode_of_row[i, :n] = episode
        self.row_episode_start[i].zero_()
        self.row_episode_start[i, :n] = torch.where(firsts, rows, 0).cummax(0).values
        self.episode_end[i].zero_()
        self.episode_end[i].scatter_reduce_(0, episode, rows, "amax")
        self.episodes[i] = int(firsts.sum())
        priorities = state["priorities"].to(dev, torch.float64)
        self.tree.rebuild(i, priorities)
        self.max_priority[i] = float(state["max_priority"])
        self._numpy_rng_states[i] = state["rng"]
        if "torch_rng" in state:
            self._generator(i).set_state(state["torch_rng"])
        else:
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = state["rng"]
            self._generator(i).manual_seed(int(rng.integers(2**63)))
        self.size = n
        self.position.fill_(n)
        self._ready = False

    @classmethod
    def from_replays(
        cls, replays: Sequence[PrioritizedReplay], device: torch.device | str = "cpu"
    ) -> PopulationReplay:
        """A population holding copies of per-agent replays (same settings, same sizes)."""
        r = replays[0]
        s = r.sampler
        population = cls(
            len(replays),
            r.capacity,
            alpha=r.alpha,
            K=s.K,
            n_step=s.n_step,
            gamma=s.gamma,
            goal_window=s.goal_window,
            device=device,
            spec=r.observation_spec,
        )
        for i, replay in enumerate(replays):
            population.load_state_dict(i, replay.state_dict())
        return population

    def to_replay(self, i: int) -> PrioritizedReplay:
        """Agent i as a numpy `PrioritizedReplay` (its numpy RNG at the loaded/seed state)."""
        replay = PrioritizedReplay(
            self.capacity,
            alpha=self.alpha,
            K=self.K,
            n_step=self.n_step,
            gamma=self.gamma,
            goal_window=self.goal_window,
            spec=self.observation_spec,
        )
        replay.load_state_dict(self.state_dict(i))
        return replay
