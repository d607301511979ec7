"""Evaluation: episode quotas, whole games (no life-loss terminals), raw scores, eval.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import sgi_lab.train.evaluate as ev
from sgi_lab.envs import UnknownGameError
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import CheckpointError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_episode_quotas_split_evenly():
    assert ev.episode_quotas(100, 8).tolist() == [13, 13, 13, 13, 12, 12, 12, 12]
    assert ev.episode_quotas(3, 8).sum() == 3
    with pytest.raises(ValueError):
        ev.episode_quotas(0, 2)


def test_epsilon_one_never_asks_the_policy_and_zero_always_does():
    calls = []

    def policy(obs):
        calls.append(obs.shape)
        return np.full(obs.shape[:2], 2, np.int64)

    kw = {"episodes": 1, "num_envs": 1, "max_frames": 40, "progress": False, "seeds": [0]}
    ev.play_episodes(policy, ["Pong"], [6], eps=1.0, **kw)
    assert calls == []
    out = ev.play_episodes(policy, ["Pong"], [6], eps=0.0, **kw)[0]
    assert len(calls) == out["lengths"][0] == 10 and calls[0] == (1, 1, 4, 84, 84)


@pytest.mark.parametrize("protocol", ["dopamine", "rlpyt"])
def test_evaluation_plays_whole_games_through_life_losses(monkeypatch, protocol):
    """Breakout has 5 lives: an evaluation episode must run through all of them, in the
    authors' env too (``episodic_lives=False`` in their evaluation: the frame stack runs on
    across a life loss)."""
    import sgi_lab.envs.pool as pool_module

    record: list[dict[str, list]] = []  # per environment, in creation order
    real = pool_module.make_env

    class Spy:
        def __init__(self, env):
            self.env, self.seen = env, {"life_loss": [], "ended": [], "padded": []}
            record.append(self.seen)

        def reset(self, **kw):
            return self.env.reset(**kw)

        def step(self, action):
            out = self.env.step(action)
            self.seen["life_loss"].append(out[4]["life_loss"])
            self.seen["ended"].append(out[2] or out[3])
            self.seen["padded"].append(not out[0][:3].any())  # zero frames in the stack
            return out

        def close(self):
            self.env.close()

    monkeypatch.setattr(pool_module, "make_env", lambda *a, **kw: Spy(real(*a, **kw)))
    model = SGIModel("nature", 4)
    result = ev.evaluate(
        model,
        "breakout",
        episodes=2,
        eps=1.0,
        num_envs=2,
        seed=0,
        progress=False,
        asynchronous=False,
        env_protocol=protocol,
    )
    assert result["env_protocol"] == protocol
    assert result["episodes"] == 2 and all(n > 50 for n in result["lengths"])
    assert len(record) == 2
    for seen in record:
        life_loss, ended = np.array(seen["life_loss"]), np.array(seen["ended"])
        end = np.flatnonzero(ended)[0]
        # Four lives lost mid-game without ending the episode, the fifth ends it; an
        # environment that played its quota (one episode each here) is not stepped again.
        assert life_loss[: end + 1].sum() == 5 and life_loss[end]
        assert len(ended) == end + 1
        assert not np.array(seen["padded"])[life_loss & ~ended].any()
    assert model.training and all(layer.noise_enabled for layer in model.noisy_layers())


def test_evaluate_counts_exactly_the_quota_with_raw_scores():
    model = SGIModel("nature", 6)
    result = ev.evaluate(
        model, "ALE/Pong-v5", episodes=3, num_envs=2, seed=1, max_frames=200, progress=False
    )
    assert result["game"] == "Pong" and result["episodes"] == 3 and result["num_envs"] == 2
    assert result["lengths"] == [50, 50, 50]  # capped at 200 frames = 50 agent steps
    assert all(float(s).is_integer() and -21 <= s <= 21 for s in result["scores"])
    assert result["mean"] == pytest.approx(np.mean(result["scores"]))
    assert result["hns"] == pytest.approx((result["mean"] + 20.7) / (14.6 + 20.7))
    with pytest.raises(UnknownGameError, match="valid games"):
        ev.evaluate(model, "not_a_game", episodes=1, progress=False)


def test_evaluate_run_writes_eval_json(tmp_path):
    model = SGIModel("nature", 6)
    args = {"encoder": "nature", "num_actions": 6}
    config = {"game": "Pong", "seed": 0, "eval_episodes": 2, "eval_envs": 1, "eval_eps": 0.001}
    config.update(eval_max_frames=120, device="cpu", amp=True, channels_last=True)
    payload = {
        "format": "sgi-lab",
        "kind": "finetuned_model",
        "step": 99,
        "model": model.state_dict(),
    }
    payload.update(model_args=args, config=config, game="Pong")
    torch.save(payload, tmp_path / "model.pt")
    result = ev.evaluate_run(tmp_path, progress=False)
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved == result and saved["episodes"] == 2 and saved["step"] == 99
    assert saved["lengths"] == [30, 30] and saved["env_protocol"] == "dopamine"
    # A run trained in the authors' env is evaluated in it: its cap ends episodes a step late.
    payload["config"] = {**config, "env_protocol": "rlpyt"}
    torch.save(payload, tmp_path / "model.pt")
    result = ev.evaluate_run(tmp_path, progress=False)
    assert result["env_protocol"] == "rlpyt" and result["lengths"] == [31, 31]
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no model.pt and no checkpoint"):
        ev.evaluate_run(tmp_path / "empty", progress=False)
    with pytest.raises(FileNotFoundError, match="typo"):
        ev.evaluate_run(tmp_path / "typo", progress=False)
    assert not (tmp_path / "typo").exists()


def test_the_policy_sees_only_the_environments_still_playing():
    """An environment that played its quota leaves the policy's batch: with quotas 2 and 1 and
    50-step episodes, 50 forwards of both environments, then 50 of the first alone; the scores
    are those of the two environments played on their own (a per-observation policy)."""

    def per_observation(obs):
        calls.append(obs.shape[:2])
        return (obs[..., -1, 30:50, 30:50].astype(np.int64).sum((-1, -2)) // 7) % 6

    kw = {"eps": 0.0, "max_frames": 200, "progress": False}
    calls = []
    both = ev.play_episodes(per_observation, ["Pong"], [6], episodes=3, num_envs=2, seeds=[5], **kw)
    assert calls == [(1, 2)] * 50 + [(1, 1)] * 50
    alone = [
        ev.play_episodes(per_observation, ["Pong"], [6], episodes=e, num_envs=1, seeds=[s], **kw)
        for e, s in ((2, 5), (1, 6))
    ]
    first, second = alone[0][0]["scores"], alone[1][0]["scores"]
    assert sorted(both[0]["scores"]) == sorted(first + second)
    assert both[0]["lengths"] == [50, 50, 50]


def test_greedy_actions_for_active_environments_only():
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 255, (3, 5, 4, 84, 84), dtype=np.uint8)
    active = np.array([[1, 0, 1, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], bool)
    shapes = []

    def policy(x):
        shapes.append(x.shape[:2])
        return x[..., 0, 0, 0].astype(np.int64)

    greedy = ev._greedy_for_active(policy, obs, active, np.arange(3)[:, None])
    assert shapes == [(3, 2)]
    np.testing.assert_array_equal(greedy[active], obs[..., 0, 0, 0][active])
    everything = ev._greedy_for_active(policy, obs, np.ones((3, 5), bool), np.arange(3)[:, None])
    np.testing.assert_array_equal(everything, obs[..., 0, 0, 0])


def _obs_keyed_policy(num_actions):
    """A deterministic policy of the observations' pixels (so a wrong frame changes actions)."""

    def policy(obs):
        flat = obs.reshape(*obs.shape[:2], -1).astype(np.int64)
        return (flat * np.arange(flat.shape[-1]) % 7).sum(-1) % num_actions

    return policy


# (games, action counts, seeds, play_episodes options) -> per agent (scores, lengths), as the
# evaluation played them when it copied every stepped frame twice (2026-11-29, before reading
# the pool's observations in place): the same seeds must give the same episodes bit for bit.
EVALUATIONS_BEFORE = {
    "minatar": (
        (["minatar/breakout", "minatar/space_invaders"], [3, 4], [3, 11]),
        {"episodes": 5, "num_envs": 3, "eps": 0.05, "env_options": {"channels": 10}},
        [
            ([0.0, 0.0, 1.0, 2.0, 1.0], [6, 6, 16, 28, 16]),
            ([0.0, 0.0, 0.0, 0.0, 1.0], [17, 27, 37, 96, 57]),
        ],
    ),
    "atari": (
        (["Pong", "Breakout"], [6, 4], [0, 5]),
        {"episodes": 3, "num_envs": 2, "eps": 0.05, "max_frames": 400},
        [([-2.0, -2.0, -2.0], [100, 100, 100]), ([1.0, 2.0, 0.0], [100, 100, 100])],
    ),
}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["in_process", "workers"])
@pytest.mark.parametrize("family", sorted(EVALUATIONS_BEFORE))
def test_fixed_seeds_give_the_episodes_they_gave_before_in_either_pool(family, asynchronous):
    (games, actions, seeds), options, before = EVALUATIONS_BEFORE[family]
    results = ev.play_episodes(
        _obs_keyed_policy(min(actions)),
        games,
        actions,
        seeds=seeds,
        progress=False,
        asynchronous=asynchronous,
        **options,
    )
    assert [(r["scores"], r["lengths"]) for r in results] == before


def test_the_policy_reads_the_workers_shared_frames_in_place(monkeypatch):
    """With workers, the policy's observations are the shared segment the workers write (no
    copy out of it, none pickled), and every frame it sees is the environment's own."""
    import sgi_lab.envs.pool as pool_module

    pools, seen = [], []
    real_pool = ev.EnvPool

    def spy_pool(*args, **kwargs):
        pools.append(real_pool(*args, **kwargs))
        return pools[-1]

    def policy(obs):
        rows = pools[0]._pool.rows
        seen.append((np.shares_memory(obs, rows.obs), obs.copy()))
        return np.zeros(obs.shape[:2], np.int64)

    monkeypatch.setattr(ev, "EnvPool", spy_pool)
    kw = {"episodes": 2, "num_envs": 2, "eps": 0.0, "progress": False, "seeds": [4]}
    ev.play_episodes(policy, ["minatar/breakout"], [3], asynchronous=True, **kw)
    assert pools[0].workers == 1 and pools[0].shared_memory
    assert seen and all(shared for shared, _ in seen[:5])  # both environments still playing
    # The same frames as two lone environments playing action 0 from the same seeds.
    envs = [pool_module.make_env("minatar/breakout", seed=4 + j, train=False) for j in range(2)]
    expected = np.stack([env.reset()[0] for env in envs])
    for _, obs in seen[:5]:
        np.testing.assert_array_equal(obs[0], expected)
        expected = np.stack([env.step(0)[0] for env in envs])
