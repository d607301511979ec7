"""The observation spec through a store: a MinAtar store written by the collector, read back,
stacked and sampled in its own shape; labels of the game's state; Atari stores unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sgi_lab.data import SequenceSampler, StoreError, TransitionStore, TransitionStoreWriter
from sgi_lab.data.collect import RandomHoldPolicy, collect, collect_random
from sgi_lab.data.coverage import frame_cells, state_coverage
from sgi_lab.data.store_format import FRAME_SHAPE
from sgi_lab.envs import make_env
from sgi_lab.envs.minatar import LABEL_NAMES
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec, minatar_spec

pytest.importorskip("minatar")


def record_directly(game: str, steps: int, seed: int, **options):
    """Observations and labels of every state the collector acts in, from the env itself."""
    env = make_env(game, seed=seed, train=False, record_labels=True, **options)
    policy = RandomHoldPolicy(env.action_space.n, seed=seed)
    obs, info = env.reset()
    observations, labels = [], []
    for _ in range(steps):
        observations.append(obs)
        labels.append([info["labels"][n] for n in LABEL_NAMES[game.removeprefix("minatar/")]])
        obs, _, terminated, truncated, info = env.step(policy(obs))
        if terminated or truncated:
            obs, info = env.reset()
            policy.reset()
    return np.stack(observations), np.array(labels)


def test_a_minatar_store_records_its_spec_and_reads_back_what_the_env_showed(tmp_path):
    game, steps = "minatar/breakout", 600
    store = collect_random(game, steps, tmp_path / "s", seed=2, chunk_size=10_000, progress=False)
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["observation"] == minatar_spec("breakout").to_json()
    assert manifest["fields"]["frame"]["shape"] == [4, 10, 10]
    assert manifest["env_protocol"] == "minatar" and manifest["sticky_action_prob"] == 0.1
    assert manifest["params"]["difficulty_ramping"] is True
    assert store.observation_spec == minatar_spec("breakout") and store.num_episodes > 5
    direct, labels = record_directly(game, steps, seed=2)
    np.testing.assert_array_equal(store.stack(np.arange(steps)), direct)
    assert store.label_names == LABEL_NAMES["breakout"]
    np.testing.assert_array_equal(store.gather_labels(np.arange(steps)), labels)
    assert store.verify() == []
    assert not store.has_ram and store.summary()["observation"]["channels"] == 4


def test_the_sampler_gives_batches_in_the_specs_shape(tmp_path):
    store = collect_random("minatar/seaquest", 800, tmp_path / "s", seed=0, progress=False)
    batch = SequenceSampler(store, batch_size=16, K=5, n_step=3, goal_window=10).sample()
    assert batch.obs.shape == (16, 6, 10, 10, 10) and batch.obs.dtype == np.uint8
    assert batch.bootstrap_obs.shape == batch.goal_obs.shape == (16, 10, 10, 10)
    # Each step's observation is that row's frame (no stack: frames = 1), zero once invalid.
    rows = batch.indices[:, None] + np.arange(6)
    expected = store.gather_frames(np.minimum(rows, len(store) - 1))
    expected[~batch.valid] = 0
    np.testing.assert_array_equal(batch.obs, expected)


def test_a_stacked_minatar_spec_round_trips(tmp_path):
    store = collect_random(
        "minatar/freeway",
        300,
        tmp_path / "s",
        seed=1,
        progress=False,
        env_kwargs={"frames": 2},
    )
    assert store.observation_spec == minatar_spec("freeway", frames=2)
    direct, _ = record_directly("minatar/freeway", 300, seed=1, frames=2)
    np.testing.assert_array_equal(store.stack(np.arange(300)), direct)
    batch = SequenceSampler(store, batch_size=8, K=2, n_step=0, goal_window=0).sample()
    assert batch.obs.shape == (8, 3, 14, 10, 10)
    np.testing.assert_array_equal(batch.obs[:, 0], direct[batch.indices])


def test_a_minatar_collection_refuses_an_atari_protocol(tmp_path):
    policy = RandomHoldPolicy(3)
    with pytest.raises(ValueError, match="'rlpyt' is an Atari frame protocol"):
        collect(policy, "minatar/breakout", 10, tmp_path / "s", env_protocol="rlpyt")
    assert not (tmp_path / "s").exists() and not (tmp_path / "s.partial").exists()


def test_atari_stores_keep_their_shape_and_older_manifests_read_as_atari(tmp_path):
    writer = TransitionStoreWriter.create(tmp_path / "a", game="Pong", source="t", chunk_size=8)
    for i in range(5):
        writer.append(np.full(FRAME_SHAPE, i, np.uint8), 0, 0.0, i == 4, i == 0)
    store = TransitionStore(writer.close())
    assert FRAME_SHAPE == (84, 84) and store.observation_spec == ATARI_SPEC
    assert store.manifest.fields["frame"]["shape"] == [84, 84]
    assert store.stack(np.array([4])).shape == (1, 4, 84, 84)
    assert store.stack(np.array([4]), history=2).shape == (1, 2, 84, 84)
    # A manifest written before the spec existed: no "observation" key, read as Atari's.
    path = tmp_path / "a" / "manifest.json"
    payload = json.loads(path.read_text())
    del payload["observation"]
    path.write_text(json.dumps(payload))
    old = TransitionStore(tmp_path / "a")
    assert old.manifest.observation is None and old.observation_spec == ATARI_SPEC
    # The spec is not part of the content identity: the same fingerprint, recomputed.
    assert old.manifest.content_fingerprint() == store.fingerprint


def test_a_manifest_whose_frame_row_disagrees_with_its_spec_is_refused(tmp_path):
    spec = ObservationSpec(4, 10, 10)
    writer = TransitionStoreWriter.create(
        tmp_path / "m",
        game="minatar/breakout",
        source="t",
        observation_spec=spec,
        env_protocol="minatar",
    )
    writer.append(np.zeros((4, 10, 10), np.uint8), 0, 0.0, True, True)
    writer.close()
    path = tmp_path / "m" / "manifest.json"
    payload = json.loads(path.read_text())
    payload["observation"]["channels"] = 6
    path.write_text(json.dumps(payload))
    with pytest.raises(StoreError, match=r"fields\['frame'\] has shape \[4, 10, 10\]"):
        TransitionStore(tmp_path / "m")
    payload["observation"] = {"channels": 4, "height": 10}
    path.write_text(json.dumps(payload))
    with pytest.raises(StoreError, match="'observation': needs keys"):
        TransitionStore(tmp_path / "m")


def test_labels_are_required_by_a_store_that_has_them(tmp_path):
    writer = TransitionStoreWriter.create(
        tmp_path / "l",
        game="minatar/breakout",
        source="t",
        observation_spec=minatar_spec("breakout"),
        env_protocol="minatar",
        label_names=("paddle_x", "bricks"),
    )
    frame = np.zeros((4, 10, 10), np.uint8)
    with pytest.raises(ValueError, match="records labels: pass labels"):
        writer.append(frame, 0, 0.0, False, True)
    writer.append(frame, 0, 0.0, True, True, labels=np.array([4, 30]))
    store = TransitionStore(writer.close())
    np.testing.assert_array_equal(store.gather_labels(np.array([0])), [[4, 30]])
    atari = TransitionStoreWriter.create(tmp_path / "a", game="Pong", source="t")
    atari.append(np.zeros(FRAME_SHAPE, np.uint8), 0, 0.0, True, True)
    with pytest.raises(StoreError, match="holds no game-state labels"):
        TransitionStore(atari.close()).gather_labels(np.array([0]))


def test_state_coverage_counts_distinct_grids(tmp_path):
    grids = np.zeros((4, 4, 10, 10), np.uint8)
    grids[1, 0, 9, 4] = 255
    grids[2, 0, 9, 4] = 255  # the same grid as row 1
    grids[3, 1, 0, 0] = 255
    ids = frame_cells(grids)
    assert ids[1] == ids[2] and len(set(ids.tolist())) == 3
    store = collect_random("minatar/breakout", 400, tmp_path / "s", seed=0, progress=False)
    distinct = len(np.unique(store.gather_frames(np.arange(400)).reshape(400, -1), axis=0))
    assert state_coverage(store)["cells"] == distinct
