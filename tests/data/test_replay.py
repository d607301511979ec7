"""Prioritized replay: sum-tree arithmetic, sampling proportions, priority updates, batches."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import decode_rows, encode_row

from sgi_lab.data.replay import PrioritizedReplay, SumTree


def test_sum_tree_totals_and_find():
    tree = SumTree(5)
    tree.update(np.arange(5), np.array([1.0, 0.0, 3.0, 2.0, 4.0]))
    assert tree.total == 10.0
    # prefix intervals: 0:[0,1) 1:empty 2:[1,4) 3:[4,6) 4:[6,10)
    np.testing.assert_array_equal(
        tree.find(np.array([0.0, 0.99, 1.0, 3.9, 4.0, 6.5, 9.99])), [0, 0, 2, 2, 3, 4, 4]
    )
    tree.update(np.array([2, 2]), np.array([0.5, 5.0]))  # duplicate index: last write wins
    assert tree.get(np.array([2]))[0] == 5.0 and tree.total == 12.0
    with pytest.raises(ValueError):
        tree.update(np.array([0]), np.array([-1.0]))


def _filled(n_rows=40, terminal_every=10, alpha=1.0):
    replay = PrioritizedReplay(100, alpha=alpha, K=2, n_step=3, gamma=0.5, seed=0)
    for t in range(n_rows):
        first = t % terminal_every == 0
        terminal = t % terminal_every == terminal_every - 1
        replay.append(encode_row(t), t % 4, float(t % 3 - 1), terminal, first)
    return replay


def test_sampling_proportions_follow_priorities():
    replay = _filled(alpha=1.0)
    rows = np.array([3, 7, 12])
    # Make three rows dominate: priorities 1 for all others (max init), 20/40/60 for these.
    replay.tree.update(np.arange(len(replay)), (replay.tree.get(np.arange(len(replay))) > 0) * 1.0)
    replay.update_priorities(rows, np.array([20.0, 40.0, 60.0]) - 1e-6)
    total = replay.tree.total
    draws = np.concatenate([replay.sample(64, beta=0.4)[0].indices for _ in range(400)])
    freq = np.bincount(draws, minlength=len(replay)) / len(draws)
    np.testing.assert_allclose(freq[rows], np.array([20, 40, 60]) / total, atol=0.01)


def test_valid_starts_only_and_newest_row_waits_for_its_successor():
    replay = _filled(n_rows=25, terminal_every=10)
    p = replay.tree.get(np.arange(len(replay)))
    # Terminal rows 9 and 19 are valid; the newest row 24 has no successor yet.
    assert p[9] > 0 and p[19] > 0 and p[24] == 0 and p[23] > 0
    replay.append(encode_row(25), 0, 0.0, False, False)
    assert replay.tree.get(np.array([24]))[0] > 0
    for _ in range(20):
        batch, weights = replay.sample(16, beta=0.5)
        assert (batch.indices != 25).all()
        assert weights.max() == pytest.approx(1.0) and (weights > 0).all()


def test_importance_weights_hand_computed():
    replay = PrioritizedReplay(10, alpha=1.0, K=1, n_step=1, seed=0)
    for t in range(4):
        replay.append(encode_row(t), 0, 0.0, t == 3, t == 0)
    replay.tree.update(np.arange(4), np.array([1.0, 1.0, 2.0, 4.0]))
    batch, w = replay.sample(256, beta=1.0)
    probs = np.array([1, 1, 2, 4]) / 8.0
    expected = (4 * probs[batch.indices]) ** -1.0
    np.testing.assert_allclose(w, expected / expected.max(), rtol=1e-6)


def test_batches_stack_and_n_step_like_the_store_sampler():
    replay = _filled(n_rows=30, terminal_every=10)
    batch, _ = replay.sample(32, beta=0.4)
    for i, t in enumerate(batch.indices):
        e0 = replay.row_episode_start[t]
        expected = [r if r >= e0 else -1 for r in range(t - 3, t + 1)]
        assert list(decode_rows(batch.obs[i, 0])) == expected


def test_state_dict_round_trip_keeps_priorities_and_rng():
    replay = _filled()
    replay.update_priorities(np.array([1, 2]), np.array([5.0, 7.0]))
    state = replay.state_dict()
    copy = PrioritizedReplay(100, alpha=1.0, K=2, n_step=3, gamma=0.5, seed=99)
    copy.load_state_dict(state)
    np.testing.assert_array_equal(copy.tree.tree, replay.tree.tree)
    np.testing.assert_array_equal(copy.row_episode_end, replay.row_episode_end)
    np.testing.assert_array_equal(copy.sample(8, 0.4)[0].indices, replay.sample(8, 0.4)[0].indices)
