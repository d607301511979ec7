"""Minari export and import: a store -> Minari -> store round trip bit for bit (frames, RAM,
labels, manifest), through the CLI too; a dataset Minari's own DataCollector wrote imports and
samples."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import numpy as np
import pytest

from sgi_lab.data.sampler import SequenceSampler
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_writer import TransitionStoreWriter
from sgi_lab.envs.spec import ATARI_SPEC, minatar_spec
from sgi_lab.launch.cli import main

minari = pytest.importorskip("minari", reason="Minari (the `minari` extra) is not installed")
pytest.importorskip("h5py", reason="Minari's HDF5 storage needs h5py (minari[hdf5])")


def _store(path: Path, spec, rows: int, ram: bool = False, labels: tuple = ()) -> TransitionStore:
    """A store of random rows: episodes of 5-40 rows, some ending in a terminal, some cut, one
    life-loss terminal inside an episode; chunks of 64 rows."""
    rng = np.random.default_rng(0)
    writer = TransitionStoreWriter.create(
        path, game="minatar/breakout" if labels else "Pong", source="random",
        params={"seed": 0}, num_actions=5, chunk_size=64, sticky_action_prob=0.1, ram=ram,
        env_protocol="minatar" if labels else "dopamine", observation_spec=spec,
        label_names=labels or None,
    )  # fmt: skip
    starts = np.cumsum(rng.integers(5, 40, size=rows))
    first = np.zeros(rows, dtype=np.uint8)
    first[0], first[starts[starts < rows]] = 1, 1
    terminal = np.zeros(rows, dtype=np.uint8)
    ends = np.flatnonzero(first[1:])  # the row before each episode start
    terminal[ends[::2]] = 1  # every other episode ends in a terminal, the others are cut
    terminal[ends[1] - 1] = 1  # a life loss: a terminal that does not start a new episode
    columns = {
        "frame": rng.integers(0, 256, size=(rows, *spec.frame_shape), dtype=np.uint8),
        "action": rng.integers(0, 5, size=rows),
        "reward": rng.normal(size=rows).astype(np.float32),
        "terminal": terminal,
        "first": first,
    }
    if ram:
        columns["ram"] = rng.integers(0, 256, size=(rows, 128), dtype=np.uint8)
    if labels:
        columns["labels"] = rng.integers(-50, 50, size=(rows, len(labels))).astype(np.int16)
    writer.append_many(**columns)
    writer.close()
    return TransitionStore(path)


def _same_folders(a: Path, b: Path) -> None:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    match, mismatch, errors = filecmp.cmpfiles(a, b, [str(f) for f in files], shallow=False)
    assert not mismatch and not errors and len(match) == len(files)


@pytest.mark.parametrize(
    "spec, ram, labels",
    [(ATARI_SPEC, True, ()), (minatar_spec("breakout"), False, ("ball_x", "ball_y"))],
    ids=["atari-ram", "minatar-labels"],
)
def test_a_store_goes_through_minari_and_back_bit_for_bit(tmp_path, spec, ram, labels):
    from sgi_lab.data.minari_exchange import MANIFEST_KEY, export_minari, import_minari

    store = _store(tmp_path / "store", spec, 300, ram=ram, labels=labels)
    out = export_minari(store, tmp_path / "minari")
    meta = json.loads((out / "data" / "metadata.json").read_text())
    assert meta["jpeg_encoding"] is False and meta["total_steps"] == len(store)
    assert meta["total_episodes"] == store.num_episodes
    assert meta[MANIFEST_KEY]["fingerprint"] == store.fingerprint
    # Minari reads it as any dataset: raw frames, one more observation than actions
    dataset = minari.MinariDataset(out / "data")
    episode = dataset[1]
    rows = np.arange(store.episode_starts[1], store.episode_ends[1] + 1)
    np.testing.assert_array_equal(episode.observations[:-1], store.gather_frames(rows))
    np.testing.assert_array_equal(episode.observations[-1], store.gather_frames(rows[-1:])[0])
    np.testing.assert_array_equal(episode.actions, store.actions[rows])
    assert episode.rewards.dtype == np.float32
    assert episode.terminations[-1] != episode.truncations[-1]
    back = import_minari(out, tmp_path / "back")
    assert back.fingerprint == store.fingerprint
    _same_folders(tmp_path / "store", tmp_path / "back")  # manifest.json and every chunk


def test_the_cli_exports_and_imports_and_refuses_to_overwrite(tmp_path, capsys):
    _store(tmp_path / "store", minatar_spec("breakout"), 200, labels=("x",))
    out, back = tmp_path / "minari", tmp_path / "back"
    assert main(["export", "minari", str(tmp_path / "store"), str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["transitions"] == 200
    assert summary["dataset_id"] == "sgi-lab/minatar-breakout/random-v0"
    assert main(["export", "minari", str(tmp_path / "store"), str(out)]) == 2  # not empty
    assert "not empty" in capsys.readouterr().err
    assert main(["import", "minari", "--src", str(out), "--out", str(back)]) == 0
    assert json.loads(capsys.readouterr().out)["transitions"] == 200
    _same_folders(tmp_path / "store", back)
    assert main(["import", "minari", "--src", str(out), "--out", str(back)]) == 2
    assert main(["import", "dqn-replay", "--src", str(out), "--out", str(tmp_path / "x")]) == 2
    assert "--game and --checkpoints required" in capsys.readouterr().err


@pytest.mark.parametrize("game", ["minatar/breakout", "breakout"])
def test_a_collected_random_store_goes_through_minari_and_back_bit_for_bit(tmp_path, game):
    """What a fresh clone does: collect a Random store (MinAtar's with its game-state labels,
    Atari's with its RAM), export it to Minari and import it back: the same chunk files and
    manifest, fingerprint included."""
    pytest.importorskip("minatar" if game.startswith("minatar") else "ale_py")
    store, out, back = tmp_path / "store", tmp_path / "minari", tmp_path / "back"
    argv = ["collect", "random", "--game", game, "--steps", "300", "--seed", "3"]
    assert main([*argv, "--out", str(store), "--no-progress"]) == 0
    assert main(["export", "minari", str(store), str(out)]) == 0
    assert main(["import", "minari", "--src", str(out), "--out", str(back)]) == 0
    _same_folders(store, back)
    back_store = TransitionStore(back)
    assert back_store.manifest.source == "random" and len(back_store) == 300
    assert back_store.has_ram == (game == "breakout")  # Atari's RAM
    assert back_store.has_labels == game.startswith("minatar")  # MinAtar's game-state labels


class GridWorld:
    """A 10x10 grid with 3 boolean channels (channels last, as MinAtar's gym envs), 3 actions;
    episodes end by a terminal or a 30-step time limit."""

    def __new__(cls):
        import gymnasium as gym

        class Env(gym.Env):
            observation_space = gym.spaces.Box(0, 1, (10, 10, 3), dtype=bool)
            action_space = gym.spaces.Discrete(3)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return self._obs(), {}

            def _obs(self):
                return self.np_random.random((10, 10, 3)) < 0.2

            def step(self, action):
                done = bool(self.np_random.random() < 0.05)
                return self._obs(), float(action == 1), done, False, {}

        return gym.wrappers.TimeLimit(Env(), max_episode_steps=30)


def test_a_dataset_minaris_collector_wrote_imports_samples_and_pretrains(tmp_path, monkeypatch):
    pytest.importorskip("jax", reason="Minari's DataCollector needs jax (minari[create])")
    from sgi_lab.data.minari_exchange import import_minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    env = minari.DataCollector(GridWorld())
    rng = np.random.default_rng(0)
    env.reset(seed=1)
    for _ in range(200):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(3)))
        if terminated or truncated:
            env.reset()
    dataset = env.create_dataset("test/grid-v0", algorithm_name="random", author="sgi-lab",
                                 author_email="-", code_permalink="-", description="test")  # fmt: skip
    store = import_minari(tmp_path / "datasets" / "test" / "grid-v0", tmp_path / "store")
    assert store.manifest.source == "minari" and store.manifest.env_protocol == "external"
    assert store.observation_spec.frame_shape == (3, 10, 10)
    assert store.manifest.params["dataset_id"] == "test/grid-v0"
    episodes = list(dataset.iterate_episodes())
    assert store.num_episodes == len(episodes) and len(store) == dataset.total_steps
    first = episodes[0]
    rows = np.arange(len(first.actions))
    want = np.moveaxis(first.observations[:-1], -1, 1).astype(np.uint8) * 255
    np.testing.assert_array_equal(store.gather_frames(rows), want)
    np.testing.assert_array_equal(store.actions[rows], first.actions)
    np.testing.assert_array_equal(store.terminals[rows], first.terminations)
    batch = SequenceSampler(store, batch_size=4, K=2, n_step=2, goal_window=5).sample()
    assert batch.obs.shape == (4, 3, 3, 10, 10)
    # and SGI pretrains on it: the encoder sized from the store's observation spec
    pretrained = tmp_path / "pretrain"
    sets = ["encoder=minatar", "hidden_size=32", "steps=3", "batch_size=8", "spr_steps=2",
            "n_step=2", "goal_window=5", "log_every=1", "checkpoint_every=3", "prefetch=0"]  # fmt: skip
    argv = [
        "pretrain",
        "--params",
        "params/pretrain/minatar_sgi.yaml",
        "--data",
        str(tmp_path / "store"),
    ]
    argv += [x for s in sets for x in ("--set", s)]
    assert main([*argv, "--out", str(pretrained), "--no-progress"]) == 0
    status = json.loads((pretrained / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 3
    assert (pretrained / "model.pt").is_file()
