"""PopulationReplay: the torch, all-agents-at-once replay against the numpy PrioritizedReplay."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from sgi_lab.data.population_replay import BatchedSumTree, PopulationReplay
from sgi_lab.data.replay import PrioritizedReplay, SumTree

SETTINGS = {"alpha": 0.5, "K": 3, "n_step": 4, "gamma": 0.9, "goal_window": 5}


def random_rows(num_agents: int, steps: int, seed: int) -> list[tuple[np.ndarray, ...]]:
    """Per-step rows (frames (N,84,84), actions, rewards, terminals, firsts) of random episodes:
    terminal and truncated endings, life-loss terminals inside episodes, rewards outside
    [-1, 1], and an unfinished last episode."""
    rng = np.random.default_rng(seed)
    first = np.ones(num_agents, bool)
    rows = []
    for _ in range(steps):
        end = rng.random(num_agents) < 0.12
        terminal = (end & (rng.random(num_agents) < 0.5)) | (rng.random(num_agents) < 0.05)
        rows.append(
            (
                rng.integers(0, 256, (num_agents, 84, 84), dtype=np.uint8),
                rng.integers(0, 6, num_agents),
                rng.choice([-3.0, -0.5, 0.0, 0.2, 1.0, 4.0], num_agents).astype(np.float32),
                terminal,
                first.copy(),
            )
        )
        first = end
    return rows


def build(rows, num_agents=None, seeds=None, capacity=200, spec=None, how=None, **settings):
    """The same rows in a PopulationReplay (sampled ``how``: sampling and draws) and in one
    PrioritizedReplay per agent."""
    settings = {**SETTINGS, **settings}
    n = num_agents or rows[0][0].shape[0]
    if spec is not None:  # another observation spec than Atari's default
        settings["spec"] = spec
    population = PopulationReplay(n, capacity, seeds=seeds, **settings, **(how or {}))
    replays = [PrioritizedReplay(capacity, **settings) for _ in range(n)]
    for frames, actions, rewards, terminals, firsts in rows:
        population.append(frames[:n], actions[:n], rewards[:n], terminals[:n], firsts[:n])
        for i, replay in enumerate(replays):
            replay.append(frames[i], actions[i], rewards[i], terminals[i], firsts[i])
    return population, replays


class TorchDraws:
    """Stands in for a replay's numpy Generator, drawing what PopulationReplay draws from a copy
    of an agent's torch.Generator: stratified uniforms, then goal offsets."""

    def __init__(self, generator: torch.Generator) -> None:
        self.g = torch.Generator().manual_seed(0)
        self.g.set_state(generator.get_state())

    def random(self, size):
        return torch.rand(size, generator=self.g, dtype=torch.float64).numpy()

    def integers(self, low, high, size):
        return torch.randint(low, high, (size,), generator=self.g).numpy()


class GivenOffsets:
    def __init__(self, offsets: np.ndarray) -> None:
        self.offsets = offsets

    def integers(self, low, high, size):
        assert len(self.offsets) == size
        return self.offsets


FIELDS = (
    "obs",
    "actions",
    "rewards",
    "valid",
    "terminals",
    "returns",
    "bootstrap_obs",
    "bootstrap_discount",
    "goal_obs",
    "goal_offset",
    "indices",
)


def assert_same_batch(population_batch, i, sequence_batch, weights=None):
    for name in FIELDS:
        got, want = getattr(population_batch, name), getattr(sequence_batch, name)
        if want is None:
            assert got is None, name
            continue
        got = got[i].cpu().numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if name == "returns":  # summation order differs between numpy and torch
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    if weights is not None:
        np.testing.assert_allclose(population_batch.weights[i].numpy(), weights, rtol=1e-6)


def assert_same_priorities(population, replays):
    # ``p ** alpha`` may be an ulp apart: torch's vectorised CPU sqrt/pow are not always
    # correctly rounded, numpy's are.
    for i, replay in enumerate(replays):
        np.testing.assert_allclose(population.tree.tree[i].numpy(), replay.tree.tree, rtol=1e-14)
        assert float(population.max_priority[i]) == replay.max_priority
        count = int((replay.tree.get(np.arange(len(replay))) > 0).sum())
        assert int(population.positive_leaves[i]) == count


# -- (1) batches at given start rows ----------------------------------------------------------
# K = 3: the n-step window is the sequence's (4), longer (7) or absent (0)
@pytest.mark.parametrize("n_step,goal_window", [(4, 5), (7, 5), (0, 0)])
def test_batch_at_given_rows_equals_sequence_sampler(n_step, goal_window):
    rows = random_rows(3, 120, seed=1)
    population, replays = build(rows, n_step=n_step, goal_window=goal_window)
    rng = np.random.default_rng(2)
    # Every row as a start (invalid ones too: the arithmetic is defined there as well).
    starts = np.stack([rng.permutation(len(population)) for _ in replays])
    offsets = rng.integers(1, goal_window + 1, starts.shape) if goal_window else None
    batch = population.batch_at(torch.from_numpy(starts), offsets)
    for i, replay in enumerate(replays):
        rng_i = GivenOffsets(offsets[i]) if goal_window else None
        assert_same_batch(batch, i, replay.sampler.batch_at(starts[i], rng=rng_i))


def test_episode_bookkeeping_matches():
    population, replays = build(random_rows(3, 90, seed=3))
    rows = torch.arange(len(population)).expand(3, -1)
    for i, replay in enumerate(replays):
        np.testing.assert_array_equal(
            population.row_episode_start[i, : len(replay)].numpy(), replay.row_episode_start[:90]
        )
        np.testing.assert_array_equal(
            population._episode_end_of(rows)[i].numpy(), replay.row_episode_end
        )


# -- (2) the batched sum tree -------------------------------------------------------------------
def test_batched_sum_tree_matches_numpy_sum_tree():
    rng = np.random.default_rng(0)
    N, capacity = 3, 37  # not a power of two: padded leaves stay empty
    batched = BatchedSumTree(N, capacity)
    trees = [SumTree(capacity) for _ in range(N)]
    for _ in range(6):
        rows = rng.integers(0, capacity, (N, 24))  # duplicates within each tree's batch
        values = rng.random((N, 24)) * (rng.random((N, 24)) > 0.2)  # zeros included
        batched.update(torch.from_numpy(rows), torch.from_numpy(values))
        counts = batched.positive_counts().numpy()
        for i, tree in enumerate(trees):
            tree.update(rows[i], values[i])
            np.testing.assert_array_equal(batched.tree[i].numpy(), tree.tree)
            assert counts[i] == (tree.get(np.arange(capacity)) > 0).sum()
    totals = batched.total.numpy()
    mass = rng.random((N, 500)) * totals[:, None]
    # Exact interval boundaries too: a mass equal to a prefix sum belongs to the next leaf.
    prefix = np.stack([np.cumsum(t.get(np.arange(capacity)))[:-1] for t in trees])
    mass = np.concatenate([mass, prefix[:, :20]], 1)
    found = batched.find(torch.from_numpy(mass)).numpy()
    for i, tree in enumerate(trees):
        np.testing.assert_array_equal(found[i], tree.find(mass[i]))
        assert (tree.get(found[i]) > 0).all()
    with pytest.raises(ValueError):
        batched.update(torch.zeros(N, 1, dtype=torch.int64), torch.full((N, 1), -1.0))


def test_batched_sum_tree_round_off_lands_on_a_positive_leaf():
    tree = BatchedSumTree(1, 8)
    tree.update(torch.tensor([[0, 1, 2]]), torch.tensor([[0.1, 0.2, 0.3]]))
    # A mass at (or, by round-off, past) the total must not pick the empty leaves 3..7.
    found = tree.find(tree.total[:, None] * torch.tensor([[1.0, 1.0 + 1e-12]]))
    assert found.tolist() == [[2, 2]]


# -- (3) sampling: whole batches, frequencies, weights ----------------------------------------
def test_sample_and_priority_updates_equal_prioritized_replay_with_the_same_draws():
    rows = random_rows(3, 150, seed=4)
    population, replays = build(rows, seeds=[5, 6, 7])
    assert_same_priorities(population, replays)
    rng = np.random.default_rng(8)
    for _ in range(5):
        for replay, g in zip(replays, population.generators, strict=True):
            replay.rng = TorchDraws(g)  # the numpy replay draws what the population will
        batch = population.sample(16, beta=0.4)
        for i, replay in enumerate(replays):
            want, weights = replay.sample(16, beta=0.4)
            assert_same_batch(batch, i, want, weights)
        priorities = rng.random((3, 16)) * 3
        population.update_priorities(batch.indices, torch.from_numpy(priorities))
        for i, replay in enumerate(replays):
            replay.update_priorities(batch.indices[i].numpy(), priorities[i])
        assert_same_priorities(population, replays)


# the CPU's path, and the GPU's (prefix sums, one draw for all agents): a new random stream
@pytest.mark.parametrize("sampling,draws", [("tree", "agent"), ("prefix", "population")])
def test_sampling_frequencies_follow_priority_to_the_alpha(sampling, draws):
    alpha = 0.6
    rows = random_rows(2, 60, seed=9)
    how = {"sampling": sampling, "draws": draws}
    population, _ = build(rows, alpha=alpha, K=0, n_step=0, goal_window=0, how=how)
    valid = (population.tree.get(torch.arange(60).expand(2, -1)) > 0).numpy()
    rng = np.random.default_rng(10)
    priorities = np.where(valid, rng.choice([0.1, 1.0, 5.0, 20.0], (2, 60)), 0.0)
    rows_ = torch.arange(60).expand(2, -1)
    population.update_priorities(rows_, torch.from_numpy(priorities) - 1e-6)
    population.tree.update(rows_, torch.from_numpy(priorities**alpha))  # exact, zeros kept
    assert population.positive_leaves.tolist() == valid.sum(1).tolist()
    expected = priorities**alpha / (priorities**alpha).sum(1, keepdims=True)
    draws = [population.sample(64, beta=0.5) for _ in range(60)]  # 3,840 draws per agent
    indices = torch.cat([b.indices for b in draws], 1).numpy()
    for i in range(2):
        counts = np.bincount(indices[i], minlength=60)
        assert counts[~valid[i]].sum() == 0
        e = expected[i][valid[i]] * indices.shape[1]
        chi2 = ((counts[valid[i]] - e) ** 2 / e).sum()
        dof = valid[i].sum() - 1
        # Stratified draws vary less than multinomial ones: the chi-square bound is generous.
        assert chi2 < dof + 4 * np.sqrt(2 * dof), (chi2, dof)
    # Weights: (count * p) ** -beta over the batch max, p = priority ** alpha / total.
    batch = draws[-1]
    p = np.take_along_axis(expected, batch.indices.numpy(), 1)
    w = (valid.sum(1, keepdims=True) * p) ** -0.5
    np.testing.assert_allclose(batch.weights.numpy(), w / w.max(1, keepdims=True), rtol=1e-6)


def test_sampling_waits_for_a_valid_start_in_every_agent():
    population = PopulationReplay(2, 10, **SETTINGS)
    frame = np.zeros((2, 84, 84), np.uint8)
    population.append(frame, [0, 0], [0, 0], [False, True], [True, True])
    with pytest.raises(RuntimeError):
        population.sample(4, 0.4)  # agent 0's row 0 has no successor yet
    population.append(frame, [0, 0], [0, 0], [False, False], [False, True])
    assert population.sample(4, 0.4).indices.tolist() == [[0] * 4, [0] * 4]


# -- (4) agents are independent -----------------------------------------------------------------
def test_an_agent_samples_the_same_alone_and_beside_another():
    rows = random_rows(2, 100, seed=11)
    alone, _ = build(rows, num_agents=1, seeds=[3])
    together, _ = build(rows, num_agents=2, seeds=[3, 4])
    for _ in range(3):
        a, b = alone.sample(8, 0.4), together.sample(8, 0.4)
        for name in (*FIELDS, "weights"):
            torch.testing.assert_close(getattr(a, name)[0], getattr(b, name)[0], rtol=0, atol=0)
        p = torch.rand(1, 8, generator=torch.Generator().manual_seed(0)).double()
        alone.update_priorities(a.indices, p)
        together.update_priorities(b.indices, torch.cat([p, p * 7]))


def test_reused_buffers_give_the_same_batches_and_are_overwritten():
    rows = random_rows(2, 60, seed=14)
    fresh, _ = build(rows, seeds=[1, 2])
    reused, _ = build(rows, seeds=[1, 2])
    reused.reuse_buffers = True
    batches = []
    for _ in range(2):
        a, b = fresh.sample(8, 0.4), reused.sample(8, 0.4)
        for name in (*FIELDS, "weights"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        batches.append((a, b))
    (_, first), (second, _) = batches
    assert batches[0][1].obs.data_ptr() == batches[1][1].obs.data_ptr()
    assert torch.equal(first.obs, second.obs)  # the first batch now shows the second's frames


# -- (5) checkpoints -----------------------------------------------------------------------------
def test_state_dict_round_trip_and_compatibility_with_prioritized_replay():
    rows = random_rows(2, 80, seed=12)
    population, replays = build(rows[:70], seeds=[1, 2])
    population.update_priorities(torch.tensor([[3, 3, 9], [0, 5, 6]]), torch.rand(2, 3) * 4)
    population.sample(8, 0.4)  # advances the generators

    # Population -> population (through torch.save with weights_only), then both continue alike.
    restored = PopulationReplay(2, 200, **SETTINGS)
    for i in range(2):
        buffer = io.BytesIO()
        torch.save(population.state_dict(i), buffer)
        buffer.seek(0)
        restored.load_state_dict(i, torch.load(buffer, weights_only=True))
    for r in rows[70:]:
        population.append(*r)
        restored.append(*r)
    np.testing.assert_array_equal(population.tree.tree.numpy(), restored.tree.tree.numpy())
    a, b = population.sample(8, 0.4), restored.sample(8, 0.4)
    for name in (*FIELDS, "weights"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0)

    # Population -> PrioritizedReplay, and back: same keys, data, priorities and bookkeeping.
    for i in range(2):
        state = population.state_dict(i)
        assert set(state) == set(replays[i].state_dict()) | {"torch_rng"}
        replay = PrioritizedReplay(200, **SETTINGS)
        replay.load_state_dict(state)
        np.testing.assert_array_equal(replay.tree.tree, population.tree.tree[i].numpy())
        np.testing.assert_array_equal(population.to_replay(i).tree.tree, replay.tree.tree)
    back = PopulationReplay.from_replays([population.to_replay(i) for i in range(2)])
    for name in ("frames", "actions", "rewards", "terminals", "firsts", "row_episode_start"):
        assert torch.equal(getattr(back, name), getattr(population, name)), name
    rows_ = torch.arange(len(back)).expand(2, -1)
    assert torch.equal(back._episode_end_of(rows_), population._episode_end_of(rows_))
    assert torch.equal(back.tree.tree, population.tree.tree)
    assert torch.equal(back.positive_leaves, population.positive_leaves)


def test_population_draws_round_trip_through_every_agents_checkpoint():
    rows = random_rows(3, 80, seed=15)
    how = {"sampling": "prefix", "draws": "population"}
    population, _ = build(rows[:70], seeds=[1, 2, 3], how=how)
    population.sample(8, 0.4)  # advances the population's generator
    states = [population.state_dict(i) for i in range(3)]
    assert all(torch.equal(s["torch_rng"], states[0]["torch_rng"]) for s in states)
    restored = PopulationReplay(3, 200, **SETTINGS, **how)
    for i, state in enumerate(states):
        restored.load_state_dict(i, state)
    for r in rows[70:]:
        population.append(*r)
        restored.append(*r)
    for _ in range(2):
        a, b = population.sample(8, 0.4), restored.sample(8, 0.4)
        for name in (*FIELDS, "weights"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    # the stream comes from all the seeds: another population's differs
    draws = [build(rows[:70], seeds=s, how=how)[0].sample(8, 0.4) for s in ([1, 2, 3], [1, 2, 4])]
    assert not torch.equal(draws[0].indices[:2], draws[1].indices[:2])


def test_loads_a_prioritized_replay_checkpoint_and_continues_like_it():
    rows = random_rows(2, 90, seed=13)
    _, replays = build(rows[:60])
    replays[0].update_priorities(np.array([4, 4, 10]), np.array([2.0, 7.0, 0.5]))
    population = PopulationReplay(2, 200, **SETTINGS)
    for i, replay in enumerate(replays):
        population.load_state_dict(i, replay.state_dict())
    for frames, actions, rewards, terminals, firsts in rows[60:]:
        population.append(frames, actions, rewards, terminals, firsts)
        for i, replay in enumerate(replays):
            replay.append(frames[i], actions[i], rewards[i], terminals[i], firsts[i])
    assert_same_priorities(population, replays)
    with pytest.raises(ValueError):
        population.load_state_dict(0, replays[0].state_dict() | {"size": 5})


def _breakout_rows(protocol: str, steps: int = 200):
    """A real training run of random actions in Breakout (4 life losses and a game over in
    200 steps): the replay's rows as finetuning appends them (``first`` at episode starts
    only) and the observation the env showed at each row."""
    from sgi_lab.envs import make_env

    env = make_env("Breakout", seed=0, train=True, preprocessing=protocol)
    rng = np.random.default_rng(0)
    obs, _ = env.reset()
    rows, shown, first = [], [], True
    for _ in range(steps):
        action = int(rng.integers(4))
        next_obs, _, terminated, truncated, info = env.step(action)
        rows.append(([obs[-1]], [action], [info["raw_reward"]], [info["terminal"]], [first]))
        shown.append(obs)
        first = terminated or truncated
        obs = env.reset()[0] if first else next_obs
    env.close()
    return rows, np.stack(shown)


def _replayed_stacks(rows, first_after_terminal: bool) -> tuple[np.ndarray, ...]:
    """Every row's stacks as the replay rebuilds them: (T, K+1) obs with validity, and the
    bootstrap stacks with their rows and discounts."""
    replay = PopulationReplay(
        1, len(rows), K=2, n_step=3, gamma=0.9, first_after_terminal=first_after_terminal
    )
    for row in rows:
        replay.append(*row)
    batch = replay.batch_at(torch.arange(len(rows))[None])
    discount = batch.bootstrap_discount[0].double().numpy()
    bootstraps = discount > 0
    steps = np.round(np.log(np.where(bootstraps, discount, 1.0)) / np.log(0.9)).astype(int)
    return (
        batch.obs[0].numpy(),
        batch.valid[0].numpy(),
        batch.bootstrap_obs[0].numpy(),
        np.arange(len(rows)) + steps,  # the bootstrap's row: discount gamma ** steps
        bootstraps,
    )


@pytest.mark.parametrize("protocol", ["rlpyt", "dopamine"])
def test_replay_stacks_equal_the_env_observations_across_life_losses(protocol):
    """The authors' env (``preprocessing="rlpyt"``) empties its frame stack at a life loss in
    training; finetuning builds the replay with ``first_after_terminal`` under that protocol,
    so every stack the replay rebuilds (the step's, the K steps after it and the n-step
    bootstrap's) is the observation the env showed. The default env's stack runs on across
    life losses, and so do the replay's without the option."""
    rows, shown = _breakout_rows(protocol)
    terminal = np.array([r[3][0] for r in rows])
    ends = np.array([r[4][0] for r in rows[1:]] + [False])  # the row after is a first
    life_losses = np.flatnonzero(terminal & ~ends)
    assert len(life_losses) >= 3 and ends.any()  # losses mid-game and a game over
    after = life_losses + 1
    if protocol == "rlpyt":  # the env's own zero padding after each loss
        assert not shown[after, :3].any() and shown[after, 3].any()
    else:
        assert shown[after, :3].any(axis=(1, 2, 3)).all()

    obs, valid, boot, boot_rows, bootstraps = _replayed_stacks(rows, protocol == "rlpyt")
    T = len(rows)
    for k in range(obs.shape[1]):
        rows_k = np.flatnonzero(valid[:, k])
        assert np.array_equal(obs[rows_k, k], shown[rows_k + k]), f"stack t+{k} differs"
    assert valid[life_losses, 0].all() and not valid[life_losses, 1].any()
    assert bootstraps.sum() > T // 2
    assert np.array_equal(boot[bootstraps], shown[boot_rows[bootstraps]])

    if protocol == "rlpyt":  # without the option the replay runs stacks on over the losses
        wrong = _replayed_stacks(rows, first_after_terminal=False)[0][:, 0]
        differ = [t for t in range(T) if not np.array_equal(wrong[t], shown[t])]
        assert differ == sorted({a + j for a in after for j in range(3)})  # 3 zero-padded


# -- (6) other observation specs: MinAtar's (C, 10, 10) frames --------------------------------
@pytest.mark.parametrize("frames", [1, 2])
def test_a_minatar_spec_stores_frames_and_stacks_as_the_numpy_replay(frames):
    from sgi_lab.envs.spec import minatar_spec

    spec = minatar_spec("freeway", frames=frames)  # 7 channels of 10x10
    rng = np.random.default_rng(11)
    rows = [
        (rng.integers(0, 2, (2, 7, 10, 10), dtype=np.uint8) * 255, *row[1:])
        for row in random_rows(2, 60, seed=12)
    ]
    population, replays = build(rows, spec=spec)
    assert population.frames.shape == (2, 200, 7, 10, 10)
    assert replays[0].frames.shape == (200, 7, 10, 10)
    starts = np.stack([rng.permutation(len(population)) for _ in replays])
    offsets = rng.integers(1, 6, starts.shape)
    batch = population.batch_at(torch.from_numpy(starts), offsets)
    assert batch.obs.shape == (2, 60, 4, 7 * frames, 10, 10)
    assert batch.goal_obs.shape == batch.bootstrap_obs.shape == (2, 60, 7 * frames, 10, 10)
    for i, replay in enumerate(replays):
        assert_same_batch(
            batch, i, replay.sampler.batch_at(starts[i], rng=GivenOffsets(offsets[i]))
        )
    # The newest frame of a valid stack is the row's own frame, channels in order.
    i, b = 1, int(np.flatnonzero(batch.valid[1, :, 0].numpy())[0])
    row = int(starts[i, b])
    np.testing.assert_array_equal(batch.obs[i, b, 0, -7:].numpy(), rows[row][0][i])
    # Checkpoints round-trip, and a replay of another spec refuses one.
    copy = PopulationReplay(2, 200, spec=spec, **SETTINGS)
    for k in range(2):
        copy.load_state_dict(k, population.state_dict(k))
    assert torch.equal(copy.frames, population.frames)
    assert population.to_replay(0).frames.shape == (200, 7, 10, 10)
    with pytest.raises(ValueError, match=r"frames are \(7, 10, 10\), this replay's \(84, 84\)"):
        PopulationReplay(2, 200, **SETTINGS).load_state_dict(0, population.state_dict(0))
    with pytest.raises(ValueError, match=r"frames are \(7, 10, 10\), this replay's \(84, 84\)"):
        PrioritizedReplay(200).load_state_dict(replays[0].state_dict())


# -- (7) the GPU's path is what a CUDA graph captures ----------------------------------------
@pytest.mark.parametrize("goal_window", [0, 3])
def test_the_gpu_path_samples_and_writes_the_same_operators_across_appends(goal_window):
    """Prefix sums with one draw for all agents (a GPU's default), host checks off as on a GPU:
    after rows are appended and beta moves on, sampling and the priority write trace as the
    captured call did (`sgi_lab.runtime.graphs`)."""
    from sgi_lab.runtime.graphs import assert_replays, count_ops, trace

    rows = random_rows(3, 90, seed=16)
    replay = PopulationReplay(3, 200, **{**SETTINGS, "goal_window": goal_window}, sampling="prefix")
    assert replay.draws == "population"
    replay.tree.host_checks = False
    for r in rows[:80]:
        replay.append(*r)
    priorities = torch.rand(3, 8)

    def step():
        batch = replay.sample_at_beta(8)
        replay.update_priorities(batch.indices, priorities)

    replay.set_beta(0.4)
    step()
    captured = trace(step)
    for beta, r in zip((0.5, 0.6), rows[80:], strict=False):
        replay.append(*r)
        replay.set_beta(beta)
        assert_replays(captured, trace(step))
    # the priority write: float64 and the epsilon (2), the running max (1), ** alpha (1), each
    # row's last value (3: `BatchedSumTree.update`) and one leaf scatter; 28 before
    batch = replay.sample_at_beta(8)
    ops = count_ops(lambda: replay.update_priorities(batch.indices, priorities))
    assert sum(ops.values()) == 8, ops
