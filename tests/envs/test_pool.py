"""EnvPool: a population's environments stepped together, in worker processes or not."""

from __future__ import annotations

import numpy as np
import pytest

from sgi_lab.envs import make_env
from sgi_lab.envs.pool import EnvPool


def test_worker_processes_give_exactly_the_in_process_steps():
    games, seeds = ["Pong", "Breakout", "Pong"], [0, 1, 2]
    rng = np.random.default_rng(0)
    actions = np.stack([rng.integers(0, [6, 4, 6]) for _ in range(500)])
    runs = []
    for workers in (0, 2):
        with EnvPool(games, seeds, train=True, workers=workers) as pool:
            steps = [pool.reset()]
            steps += [pool.step(a) for a in actions]
        runs.append(steps)
    alone, parallel = runs
    np.testing.assert_array_equal(alone[0], parallel[0])
    for a, b in zip(alone[1:], parallel[1:]):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    # Breakout's life losses end learning episodes within 500 steps: resets happened.
    assert any(step[2][1] for step in alone[1:])


def test_an_ended_episode_comes_back_reset_like_a_lone_env():
    env = make_env("Breakout", seed=1, train=True)
    obs, _ = env.reset()
    with EnvPool(["Breakout"], [1]) as pool:
        np.testing.assert_array_equal(pool.reset()[0], obs)
        for _ in range(200):
            o, r, term, trunc, info = env.step(1)
            if term or trunc:
                o, _ = env.reset()
            out = pool.step(np.array([1]))
            np.testing.assert_array_equal(out[0][0], o)
            assert out[2][0] == term and out[4][0] == info["raw_reward"]
            assert out[5][0] == info["terminal"]
    env.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="one seed per game"):
        EnvPool(["Pong"], [0, 1])


@pytest.mark.parametrize("workers", [0, 2])
def test_inactive_environments_are_not_stepped(workers):
    """Stepping some environments: the others report their newest observation, reward 0 and
    no episode end, and their emulators do not move (a lone env stepped only when active sees
    the same frames); evaluation settings reach the environments."""
    games, seeds = ["Pong", "Breakout", "Pong"], [0, 1, 2]
    rng = np.random.default_rng(1)
    lone = make_env("Breakout", seed=1, train=False, max_episode_frames=400)
    expected, _ = lone.reset()
    with EnvPool(games, seeds, train=False, workers=workers, max_episode_frames=400) as pool:
        first = pool.reset()
        np.testing.assert_array_equal(first[1], expected)
        previous = first
        ended = 0
        for step in range(330):
            active = np.array([True, step % 3 == 0, step % 2 == 0])
            actions = rng.integers(0, [6, 4, 6])
            out = pool.step(actions, active)
            for j in np.flatnonzero(~active):
                np.testing.assert_array_equal(out[0][j], previous[j])
                assert out[1][j] == 0 and not out[2][j] and not out[3][j]
            if active[1]:
                o, r, term, trunc, _ = lone.step(int(actions[1]))
                if term or trunc:
                    o, _ = lone.reset()
                    ended += 1
                np.testing.assert_array_equal(out[0][1], o)
                assert out[1][1] == r and out[3][1] == trunc
            previous = out[0]
        assert ended >= 1  # truncated at 400 frames = 100 steps: the cap reached the env
    lone.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_stepping_the_active_environments_returns_their_rows_only(workers):
    """`step_active` gives exactly the active rows of `step` (twin pools, same seeds and
    actions), and an array once handed out never changes when the pool steps on."""
    games, seeds = ["Pong", "Breakout", "Pong", "Breakout"], [0, 1, 2, 3]
    rng = np.random.default_rng(2)
    kw = {"train": False, "max_episode_frames": 200}
    with EnvPool(games, seeds, workers=workers, **kw) as full, EnvPool(games, seeds, **kw) as some:
        first = full.reset()
        np.testing.assert_array_equal(some.reset(), first)
        kept = first.copy()
        for _ in range(60):
            active = rng.random(4) < 0.6
            actions = rng.integers(0, [6, 4, 6, 4])
            expected = full.step(actions, active)
            rows = some.step_active(actions, active)
            assert len(rows[0]) == active.sum()
            for got, want in zip(rows, expected, strict=True):
                np.testing.assert_array_equal(got, want[active])
        np.testing.assert_array_equal(first, kept)
        np.testing.assert_array_equal(
            some.step(np.zeros(4, int), np.zeros(4, bool))[0], expected[0]
        )


def test_workers_leave_sigterm_and_sigint_to_their_parent():
    """A process group's SIGTERM (`timeout`, a scheduler) or Ctrl-C reaches the workers too:
    they keep stepping, so the parent can finish its step, checkpoint and close the pool."""
    import os
    import signal

    with EnvPool(["Pong", "Breakout"], [0, 1], workers=2) as pool:
        pool.reset()
        procs = list(pool._pool.procs)
        for proc in procs:
            os.kill(proc.pid, signal.SIGTERM)
            os.kill(proc.pid, signal.SIGINT)
        out = pool.step(np.zeros(2, np.int64))
        assert out[0].shape == (2, 4, 84, 84)
    for proc in procs:
        proc.join(timeout=10)
        assert proc.exitcode == 0  # ended by the pool's close, not by a signal


@pytest.mark.parametrize(
    "workers, shared", [(0, True), (1, True), (1, False)], ids=["in_process", "shared", "pipes"]
)
def test_send_then_receive_is_a_step_and_observations_are_the_newest(workers, shared):
    """A step split in two (the finetuning loop learns between them) gives exactly `step`'s
    rows; `observations` is every environment's newest observation, masked steps included."""
    games, seeds = ["minatar/breakout", "minatar/breakout", "minatar/asterix"], [0, 1, 2]
    rng = np.random.default_rng(1)
    actions = rng.integers(0, 3, (60, 3))
    masks = rng.random((60, 3)) < 0.7
    kw = {"train": True, "channels": 10}
    with (
        EnvPool(games, seeds, **kw) as alone,
        EnvPool(games, seeds, workers=workers, shared_memory=shared, **kw) as split,
    ):
        np.testing.assert_array_equal(alone.reset(), split.reset())
        for t in range(60):
            mask = None if t % 2 else masks[t]
            expected = alone.step_active(actions[t], mask)
            split.send(actions[t], mask)
            with pytest.raises(RuntimeError, match="sent and not received"):
                split.send(actions[t], mask)
            got = split.receive(observations=t % 3 != 0)
            if t % 3 == 0:
                assert got[0] is None
                got = (expected[0], *got[1:])
            for x, y in zip(expected, got, strict=True):
                np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(split.observations, alone.observations)
        with pytest.raises(RuntimeError, match="receive without a step sent"):
            split.receive()
        if workers == 0 or shared:  # the rows the environments are stepped into, not a copy
            assert np.shares_memory(split.observations, split._pool.rows.obs)
