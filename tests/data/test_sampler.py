"""SequenceSampler: stacks at boundaries, masks, n-step returns, goals, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import decode_rows

from sgi_lab.data import SequenceSampler, n_step_targets, valid_start_mask


def test_n_step_targets_hand_computed():
    # rows 0..5 form one episode, truncated after row 5; row 3 is a (life-loss) terminal.
    rewards = np.array([1, 0, 1, -1, 1, 0], np.float32)
    terminals = np.array([0, 0, 0, 1, 0, 0], bool)
    starts = np.array([0, 2, 4, 5 - 1])
    end = np.full(4, 5)
    returns, boot, disc = n_step_targets(rewards, terminals, starts, end, n=3, gamma=0.5)
    # t=0: 1 + 0.5*0 + 0.25*1 = 1.25, bootstrap from row 3 with 0.5^3
    # t=2: 1 + 0.5*(-1), terminal at row 3 -> discount 0
    # t=4: row 4 then row 5 has no stored successor -> only r_4, bootstrap row 5 with 0.5
    np.testing.assert_allclose(returns, [1.25, 0.5, 1.0, 1.0])
    np.testing.assert_array_equal(boot, [3, 4, 5, 5])
    np.testing.assert_allclose(disc, [0.125, 0.0, 0.5, 0.5])


def test_n_step_stops_at_episode_terminal():
    rewards = np.array([1, 1, 1, 1], np.float32)
    terminals = np.array([0, 1, 0, 0], bool)
    # Two episodes: rows 0-1 (terminal at 1), rows 2-3 (truncated).
    returns, boot, disc = n_step_targets(
        rewards, terminals, np.array([0, 1, 2]), np.array([1, 1, 3]), n=10, gamma=0.9
    )
    np.testing.assert_allclose(returns, [1.9, 1.0, 1.0])
    np.testing.assert_allclose(disc, [0.0, 0.0, 0.9])
    np.testing.assert_array_equal(boot[2], 3)


def test_valid_starts(store_factory):
    store = store_factory([{"length": 4, "terminal": True}, {"length": 3}, {"length": 1}])
    # Row 3 is a terminal last row (valid); row 6 ends a truncated episode (invalid);
    # row 7 is a one-row truncated episode (invalid).
    np.testing.assert_array_equal(np.flatnonzero(valid_start_mask(store)), [0, 1, 2, 3, 4, 5])


def _expected_stack(row, episode_start):
    return [r if r >= episode_start else -1 for r in range(row - 3, row + 1)]


def test_batch_stacks_masks_and_goals(store_factory):
    episodes = [
        {"length": 9, "terminal": True},
        {"length": 12, "life_loss": [4]},
        {"length": 3, "terminal": True},
        {"length": 20},
    ]
    rewards = np.arange(44, dtype=np.float32) % 3 - 1  # -1, 0, 1, ...
    store = store_factory(episodes, rewards=rewards, chunk_size=5)
    sampler = SequenceSampler(store, batch_size=64, K=5, n_step=4, gamma=0.9, goal_window=6, seed=3)
    for _ in range(5):
        b = sampler.sample()
        assert b.obs.shape == (64, 6, 4, 84, 84) and b.obs.dtype == np.uint8
        for i, t in enumerate(b.indices):
            e0, e1 = store.row_episode_start[t], store.row_episode_end[t]
            rows = decode_rows(b.obs[i])
            seen_terminal = False
            for k in range(6):
                expected_valid = t + k <= e1 and not seen_terminal
                assert b.valid[i, k] == expected_valid
                if expected_valid:
                    assert list(rows[k]) == _expected_stack(t + k, e0)
                    assert b.actions[i, k] == store.actions[t + k]
                    assert b.rewards[i, k] == np.sign(store.rewards[t + k])
                    seen_terminal = seen_terminal or store.terminals[t + k]
                else:
                    assert (rows[k] == -1).all() and b.actions[i, k] == 0
            goal = decode_rows(b.goal_obs[i])
            g = goal[-1]
            assert t + 1 <= g <= min(t + 6, e1) or (g == t == e1)
            assert list(goal) == _expected_stack(g, e0)
            assert b.goal_offset[i] == g - t
            boot = decode_rows(b.bootstrap_obs[i])[-1]
            assert e0 <= boot <= e1


def test_returns_in_batch_match_reference(store_factory):
    rewards = np.array([2, 0, -3, 1, 0, 5, 1, 1, 1, 1], np.float32)
    store = store_factory([{"length": 6, "terminal": True}, {"length": 4}], rewards=rewards)
    sampler = SequenceSampler(store, batch_size=1, K=1, n_step=3, gamma=0.5, goal_window=0)
    b = sampler.batch_at(np.array([3]))
    # clipped: r3=1, r4=0, r5=1(terminal) -> 1 + 0 + 0.25
    assert b.returns[0] == pytest.approx(1.25) and b.bootstrap_discount[0] == 0
    b = sampler.batch_at(np.array([0]))
    assert b.returns[0] == pytest.approx(1 + 0 - 0.25)
    assert b.bootstrap_discount[0] == pytest.approx(0.125)
    assert decode_rows(b.bootstrap_obs[0])[-1] == 3
    assert b.goal_obs is None


def test_seeded_and_resumable(store_factory):
    store = store_factory([{"length": 50, "terminal": True}, {"length": 40}])
    a = SequenceSampler(store, batch_size=8, K=3, seed=7)
    b = SequenceSampler(store, batch_size=8, K=3, seed=7)
    for _ in range(3):
        x, y = a.sample(), b.sample()
        np.testing.assert_array_equal(x.indices, y.indices)
        np.testing.assert_array_equal(x.goal_offset, y.goal_offset)
    state = a.state_dict()
    expected = [a.sample().indices for _ in range(3)]
    c = SequenceSampler(store, batch_size=8, K=3, seed=0)
    c.load_state_dict(state)
    np.testing.assert_array_equal([c.sample().indices for _ in range(3)], expected)


def test_prefetch_yields_the_same_stream_and_resumes(store_factory):
    store = store_factory([{"length": 60, "terminal": True}, {"length": 30}])
    plain = SequenceSampler(store, batch_size=4, K=2, seed=11)
    expected = [plain.sample().indices for _ in range(6)]
    pre = SequenceSampler(store, batch_size=4, K=2, seed=11, prefetch=3)
    got = [pre.sample().indices for _ in range(3)]
    state = pre.state_dict()
    pre.close()
    np.testing.assert_array_equal(got, expected[:3])
    # After close the RNG is rewound to the first unconsumed batch.
    np.testing.assert_array_equal(pre.sample().indices, expected[3])
    fresh = SequenceSampler(store, batch_size=4, K=2, seed=0, prefetch=2)
    fresh.load_state_dict(state)
    np.testing.assert_array_equal([fresh.sample().indices for _ in range(3)], expected[3:])
    fresh.close()


def test_uniform_over_valid_starts(store_factory):
    store = store_factory([{"length": 5, "terminal": True}, {"length": 5}])
    sampler = SequenceSampler(store, batch_size=9000, K=1, n_step=0, goal_window=0, seed=0)
    counts = np.bincount(sampler.sample().indices, minlength=10)
    valid = valid_start_mask(store)
    assert (counts[~valid] == 0).all()
    np.testing.assert_allclose(counts[valid] / 9000, 1 / valid.sum(), atol=0.02)
