"""The Exploratory dataset: IDF curiosity agent pieces against hand-computed values, the store a
short run writes (counts, stacks that never cross envs or episodes) and its crash-safe resume."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from sgi_lab.config import ConfigError, ExploreConfig, build_config, load_config
from sgi_lab.data import StoreError, TransitionStore
from sgi_lab.exploratory.collector import collect_exploratory
from sgi_lab.exploratory.idf_agent import (
    ExploreAgent,
    IntrinsicReturnNormalizer,
    Rollout,
    ppo_update,
)
from sgi_lab.exploratory.ppo import gae, ppo_clip_loss
from sgi_lab.runs.folder import RunDir

TINY = ExploreConfig(
    num_envs=4,
    rollout_steps=32,
    epochs=1,
    minibatches=2,
    conv_width=4,
    feature_dim=16,
    hidden_size=16,
    forward_blocks=1,
    ob_norm_steps=100,
    max_episode_frames=400,  # 100 agent steps: every env ends episodes early in a run
    chunk_size=256,
    checkpoint_every=1,
    asynchronous=False,
    device="cpu",
    threads=1,  # tiny convs on a shared 2-core machine: one thread is faster
)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny networks on a shared 2-core machine run faster on one torch thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- PPO pieces ---------------------------------------------------------------------------------


def test_gae_on_a_short_trajectory_matches_hand_computed_values():
    rewards = np.array([[1.0], [0.0], [2.0]])
    values = np.array([[0.5], [1.0], [0.0]])
    last = np.array([2.0])
    adv, ret = gae(rewards, values, last, gamma=0.9, lam=0.8)
    # delta = (1.4, -1.0, 3.8); A2 = 3.8, A1 = -1 + 0.72 * 3.8, A0 = 1.4 + 0.72 * A1
    np.testing.assert_allclose(adv[:, 0], [2.64992, 1.736, 3.8], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [3.14992, 2.736, 3.8], rtol=1e-6)
    # An episode end at t=1 stops both the bootstrap and the accumulation there.
    adv, _ = gae(rewards, values, last, gamma=0.9, lam=0.8, dones=np.array([[0], [1], [0]]))
    np.testing.assert_allclose(adv[:, 0], [1.4 - 0.72, -1.0, 3.8], rtol=1e-6)


def test_clipped_objective_matches_hand_computed_values():
    ratio = torch.tensor([1.5, 0.5, 0.5, 1.5, 1.1])
    adv = torch.tensor([2.0, 2.0, -1.0, -1.0, 3.0])
    old = torch.zeros(5)
    loss = ppo_clip_loss(torch.log(ratio), old, adv, clip=0.2)
    # max(-A r, -A clip(r, 0.8, 1.2)): the pessimistic side of each.
    torch.testing.assert_close(loss, torch.tensor([-2.4, -1.0, 0.8, 1.5, -3.3]))


# -- intrinsic reward ---------------------------------------------------------------------------


def test_normaliser_divides_by_running_std_of_the_forward_filtered_return():
    norm = IntrinsicReturnNormalizer(gamma=0.5)
    rewards = np.array([[1.0, 2.0], [3.0, 4.0]])  # (T=2, N=2)
    out = norm(rewards)
    # R_0 = r_0 = (1, 2); R_1 = 0.5 R_0 + r_1 = (3.5, 5): moments of {1, 2, 3.5, 5}
    m, v, n = 2.875, 2.296875, 4
    eps = 1e-4  # prior count, at mean 0 and variance 1 (baselines' RunningMeanStd)
    total = eps + n
    var = (eps * 1.0 + n * v + m**2 * eps * n / total) / total
    np.testing.assert_allclose(out, rewards / math.sqrt(var), rtol=1e-6)
    # The return carries over rollouts (non-episodic): R_2 = 0.5 R_1 + r_2.
    norm(np.array([[1.0, 1.0]]))
    np.testing.assert_allclose(norm.returns, [2.75, 3.5])
    assert norm.moments.count == pytest.approx(total + 2)


def _tiny_agent(seed: int = 0, **changes) -> ExploreAgent:
    config = dataclasses.replace(TINY, **changes)
    return ExploreAgent(4, config, np.full((4, 84, 84), 100.0, np.float32), 50.0, seed=seed)


def _rollout(seed: int = 0, steps: int = 4, envs: int = 4) -> Rollout:
    rng = np.random.default_rng(seed)
    return Rollout(
        obs=rng.integers(0, 256, (steps + 1, envs, 4, 84, 84), dtype=np.uint8),
        actions=rng.integers(0, 4, (steps, envs)),
        log_probs=np.full((steps, envs), math.log(0.25), np.float32),
        values=rng.normal(size=(steps, envs)).astype(np.float32),
        last_value=np.zeros(envs, np.float32),
        game_rewards=np.zeros((steps, envs), np.float32),
    )


def test_forward_model_error_falls_on_transitions_it_trained_on():
    agent = _tiny_agent(lr=1.0e-3)
    # The features are the forward model's target space; held fixed, its error is comparable.
    agent.idf.features.requires_grad_(False)
    rollout = _rollout()
    obs, nxt = rollout.obs[:-1].reshape(-1, 4, 84, 84), rollout.obs[1:].reshape(-1, 4, 84, 84)
    before = agent.intrinsic_reward(obs, rollout.actions.reshape(-1), nxt)
    # The rollout form (each state's features once, env groups) gives the same numbers.
    per_rollout = agent.rollout_intrinsic_reward(rollout.obs, rollout.actions, batch=10)
    np.testing.assert_allclose(per_rollout.reshape(-1), before, rtol=1e-4, atol=1e-6)
    for _ in range(30):
        ppo_update(agent, rollout)
    after = agent.intrinsic_reward(obs, rollout.actions.reshape(-1), nxt)
    assert after.mean() < 0.5 * before.mean()


def test_no_extrinsic_reward_reaches_the_update():
    quiet, loud = _rollout(), _rollout()
    loud = loud._replace(game_rewards=np.full_like(loud.game_rewards, 1e9))
    results = []
    for rollout in (quiet, loud, quiet._replace(values=quiet.values + 1.0)):
        agent = _tiny_agent()
        ppo_update(agent, rollout)
        results.append(torch.cat([p.flatten() for p in agent.policy.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
    assert not torch.equal(results[0], results[2])  # the check can see a change that matters


def test_agent_checkpoint_round_trips_with_weights_only(tmp_path):
    agent = _tiny_agent()
    ppo_update(agent, _rollout())
    agent.save(tmp_path / "ckpt.pt")
    again = ExploreAgent.load(tmp_path / "ckpt.pt", TINY)
    assert again.updates == 1 and again.normalizer.returns is not None
    for a, b in zip(agent.policy.parameters(), again.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    obs = _rollout().obs[0]
    assert np.array_equal(agent.act(obs)[0], again.act(obs)[0])  # same sampling stream


# -- config -------------------------------------------------------------------------------------


def test_params_files_load_and_bad_keys_are_named():
    full = load_config(ExploreConfig, "params/collect/exploratory.yaml")
    assert full == ExploreConfig()  # the file spells out Burda et al.'s defaults
    smoke = load_config(ExploreConfig, "params/collect/exploratory_smoke.yaml")
    assert smoke.num_envs <= 4 and smoke.feature_dim < 512
    with pytest.raises(ConfigError, match="gae_lamda"):
        build_config(ExploreConfig, {"gae_lamda": 0.9})
    with pytest.raises(ConfigError, match="rollout_steps"):
        build_config(ExploreConfig, {"rollout_steps": "128"})


# -- collection ---------------------------------------------------------------------------------


def _match_streams(store: TransitionStore, seen: list[np.ndarray], from_row: int = 0) -> None:
    """Every store episode's rebuilt stacks are a contiguous run of one env's observations."""
    where: dict[bytes, list[tuple[int, int]]] = {}  # stack bytes -> (env, step) seen there
    for env, stream in enumerate(seen):
        for k, stack in enumerate(stream):
            where.setdefault(stack.tobytes(), []).append((env, k))
    for start, end in zip(store.episode_starts, store.episode_ends, strict=True):
        if start < from_row:
            continue
        episode = store.stack(np.arange(start, end + 1))
        assert not episode[0, :3].any()  # zero-padded at every episode start
        assert any(
            np.array_equal(seen[env][k : k + len(episode)], episode)
            for env, k in where.get(episode[0].tobytes(), [])
        ), f"episode at rows {start}..{end} is not one env's stream"


def test_short_run_writes_each_env_stream_as_its_own_episodes(tmp_path):
    seen: list[list[np.ndarray]] = [[] for _ in range(TINY.num_envs)]

    def record(obs, actions):
        for i, o in enumerate(obs):
            seen[i].append(o.copy())

    store = collect_exploratory(
        "breakout", 2000, tmp_path / "e", seed=2, config=TINY, progress=False, on_step=record
    )
    assert len(store) == 2000 and store.manifest.source == "exploratory"
    assert store.manifest.params["num_envs"] == 4 and store.manifest.params["steps"] == 2000
    assert store.num_episodes >= 2 * TINY.num_envs  # game overs and 200-step caps
    assert store.num_episodes == int(store.firsts.sum()) == store.manifest.num_episodes
    assert store.terminals.sum() <= store.num_episodes
    # Rows per env: all its steps, the last (unfinished) episodes trimmed to the total.
    assert sum(map(len, seen)) >= 2000 > sum(map(len, seen)) - TINY.num_envs
    _match_streams(store, [np.stack(s) for s in seen])
    # The agent is an ordinary run folder: finished, one metrics row per PPO update.
    run = RunDir(store.path / "agent", create=False)
    metrics = run.read_metrics()
    assert [m["update"] for m in metrics] == list(range(1, len(metrics) + 1))
    assert [m["step"] for m in metrics] == [u * 4 * 32 for u in range(1, len(metrics) + 1)]
    assert len(metrics) == 2000 // (4 * 32)  # the last, partial rollout is not learned from
    assert {"intrinsic/reward", "extrinsic/episode_return", "charts/sps"} <= set(metrics[0])
    status = run.status()
    assert (status["state"], status["kind"], status["update"]) == ("finished", "explore", 15)
    assert status["step"] == 2000  # env steps, as the steps asked for
    assert run.saved_config()["game"] == "Breakout" and run.saved_config()["steps"] == 2000
    agent = ExploreAgent.load(run.latest_checkpoint(), TINY)
    assert agent.updates == len(metrics)


def test_interrupted_collection_resumes_with_its_agent(tmp_path):
    out = tmp_path / "e"
    config = dataclasses.replace(TINY, checkpoint_every=2)

    def interrupt(metrics):
        if metrics["update"] == 5:
            raise KeyboardInterrupt  # one update after the checkpoint of update 4

    with pytest.raises(KeyboardInterrupt):
        collect_exploratory(
            "breakout", 1200, out, seed=1, config=config, progress=False, on_update=interrupt
        )
    partial = tmp_path / "e.partial"
    assert not out.exists()
    agent_run = RunDir(partial / "agent", create=False)
    assert agent_run.status()["state"] == "failed"  # the interrupt, recorded like every stage's
    assert ExploreAgent.load(agent_run.latest_checkpoint(), config).updates == 4
    durable = json.loads((partial / "manifest.json").read_text())["num_transitions"]
    assert durable >= TINY.chunk_size  # some chunks survived
    # Other settings cannot be mixed into the interrupted store.
    with pytest.raises(StoreError, match="different settings"):
        collect_exploratory(
            "breakout", 1200, out, seed=1, config=dataclasses.replace(TINY, lr=1.0), progress=False
        )
    seen: list[list[np.ndarray]] = [[] for _ in range(TINY.num_envs)]

    def record(obs, actions):
        for i, o in enumerate(obs):
            seen[i].append(o.copy())

    # The metrics row of update 5, logged after the checkpoint of update 4, is dropped.
    with pytest.warns(UserWarning, match="resuming at step 512, kept 4 row.*and 1 row"):
        store = collect_exploratory(
            "breakout", 1200, out, seed=1, config=config, progress=False, on_step=record
        )
    assert len(store) == 1200 and not partial.exists()
    metrics = RunDir(out / "agent", create=False).read_metrics()
    # The agent went on from its checkpoint (update 4); update 5's first row was dropped.
    assert [m["update"] for m in metrics] == list(range(1, len(metrics) + 1))
    assert len(metrics) > 5
    # What the resumed part wrote is still whole env streams.
    resumed = TransitionStore(out)
    tail = np.flatnonzero(resumed.episode_starts >= durable)
    assert len(tail) and resumed.episode_starts[tail[0]] == durable
    assert sum(map(len, seen)) >= 1200 - durable
    _match_streams(resumed, [np.stack(s) for s in seen], from_row=durable)


# -- coverage -----------------------------------------------------------------------------------


def test_state_coverage_counts_distinct_coarse_screens(tmp_path):
    from sgi_lab.data import TransitionStoreWriter
    from sgi_lab.data.coverage import frame_cells, state_coverage

    a = np.zeros((84, 84), np.uint8)
    b = a.copy()
    b[:42] = 200  # a new screen: the top half lit
    c = a.copy()
    c[42:, 42:] = 200
    noisy = a.copy()
    noisy[3, 3] = 255  # one pixel: 255/49 ~ 5 gray values in its block, far under 256/8 = 32
    ids = frame_cells(np.stack([a, noisy, b, c]))
    assert ids[0] == ids[1] and len(set(ids.tolist())) == 3
    frames = np.stack([a, noisy, a, a, a, b, c, b, c, b])
    writer = TransitionStoreWriter.create(
        tmp_path / "s", game="Pong", source="test", num_actions=6, chunk_size=4
    )
    writer.append_many(
        frame=frames,
        action=np.zeros(10, np.int32),
        reward=np.zeros(10, np.float32),
        terminal=np.zeros(10, np.uint8),
        first=np.eye(1, 10, dtype=np.uint8)[0],
    )
    store = TransitionStore(writer.close())
    cov = state_coverage(store, batch=3)  # batches and chunks both split the rows
    np.testing.assert_array_equal(cov["rows"], np.arange(1, 11))
    np.testing.assert_array_equal(cov["distinct_cells"], [1, 1, 1, 1, 1, 2, 3, 3, 3, 3])
    assert cov["cells"] == 3 and cov["cells_per_1k"] == pytest.approx(300.0)
    assert state_coverage(store, budget=5)["cells"] == 1
    from sgi_lab.viz import coverage_figure

    fig = coverage_figure({"a": cov, "b": state_coverage(store, budget=5)})
    assert [len(t.x) for t in fig.data] == [10, 5] and "300.0 cells" in fig.data[0].name


# -- command line -------------------------------------------------------------------------------


@pytest.mark.smoke
def test_cli_collect_exploratory_in_process(tmp_path, capsys):
    from sgi_lab.launch.cli import main

    out = tmp_path / "e"
    argv = ["collect", "exploratory", "--game", "pong", "--steps", "300", "--envs", "2"]
    argv += ["--params", "params/collect/exploratory_smoke.yaml", "--set", "threads=1"]
    rc = main([*argv, "--seed", "3", "--out", str(out), "--no-progress"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["transitions"] == 300 and summary["source"] == "exploratory"
    store = TransitionStore(out)
    assert store.manifest.params["num_envs"] == 2 and store.manifest.params["seed"] == 3
    assert RunDir(out / "agent", create=False).latest_checkpoint() is not None
    # A bad override names its key; the random policy still goes to its own collector.
    assert main([*argv, "--set", "gae_lamda=0.9", "--out", str(tmp_path / "x")]) == 2
    assert "gae_lamda" in capsys.readouterr().err
    rc = main(
        ["collect", "random", "--game", "pong", "--steps", "50", "--out", str(tmp_path / "r")]
    )
    assert rc == 0 and TransitionStore(tmp_path / "r").manifest.source == "random"
