"""The console RAM in stores: the collectors record ALE's RAM of every state, checksummed; stores
without it still open; ``sgi-lab info`` says whether a store has it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import sgi_lab.data.collect as collect_module
import sgi_lab.envs as envs_module
import sgi_lab.exploratory.collector as explore_module
from sgi_lab.config import ExploreConfig
from sgi_lab.data import StoreError, TransitionStore
from sgi_lab.data.collect import RandomHoldPolicy, collect
from sgi_lab.data.store_writer import TransitionStoreWriter
from sgi_lab.exploratory.collector import collect_exploratory
from sgi_lab.launch.cli import main


class RamRecordingPolicy(RandomHoldPolicy):
    """The Random policy, reading ALE's RAM straight from the emulator at every call."""

    def __init__(self, envs: list, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.envs = envs
        self.ram: list[np.ndarray] = []

    def __call__(self, obs):
        self.ram.append(self.envs[-1].unwrapped.ale.getRAM().copy())
        return super().__call__(obs)


def test_random_collection_stores_ales_ram_of_every_state(tmp_path, monkeypatch):
    made = []
    make_env = envs_module.make_env

    def capture(*args, **kwargs):
        made.append(make_env(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(collect_module, "make_env", capture)
    policy = RamRecordingPolicy(made, num_actions=4, seed=1)
    store = collect(
        policy,
        "breakout",
        700,
        tmp_path / "rec",
        seed=3,
        chunk_size=256,  # chunk boundaries reset the game: RAM after a seeded reset too
        progress=False,
        env_kwargs={"max_episode_frames": 800},
    )
    assert store.has_ram and store.num_episodes >= 3
    ram = store.gather_ram(np.arange(len(store)))
    assert ram.shape == (700, 128) and ram.dtype == np.uint8
    np.testing.assert_array_equal(ram, np.stack(policy.ram))
    assert len(np.unique(ram, axis=0)) > 100  # it changes from state to state
    # Checksummed like the other fields: a flipped byte is found.
    assert store.verify() == []
    chunk = store.path / "chunks" / "ram_00001.npy"
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))
    problems = TransitionStore(store.path).verify()
    assert len(problems) == 1 and "ram_00001.npy" in problems[0]


def test_exploratory_collection_stores_ales_ram_of_every_state(tmp_path, monkeypatch):
    import sgi_lab.envs

    config = ExploreConfig(
        num_envs=2,
        rollout_steps=16,
        epochs=1,
        minibatches=1,
        conv_width=4,
        feature_dim=8,
        hidden_size=8,
        forward_blocks=1,
        ob_norm_steps=20,
        max_episode_frames=200,  # 50 agent steps: episodes end inside the run
        chunk_size=64,
        asynchronous=False,
        device="cpu",
        threads=1,
    )
    made = []
    make_vector_env = sgi_lab.envs.make_vector_env

    def capture(*args, **kwargs):
        made.append(make_vector_env(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(explore_module, "make_vector_env", capture)
    seen: list[list[np.ndarray]] = [[] for _ in range(config.num_envs)]

    def record(obs, actions):
        for i, env in enumerate(made[-1].env.envs):
            seen[i].append(env.unwrapped.ale.getRAM().copy())

    before = torch.get_num_threads()
    try:
        store = collect_exploratory(
            "pong", 300, tmp_path / "e", seed=1, config=config, progress=False, on_step=record
        )
    finally:
        torch.set_num_threads(before)
    assert store.has_ram and store.num_episodes >= 4
    ram = store.gather_ram(np.arange(len(store)))
    # Each env's rows are written episode by episode; match every stored episode to its env's
    # stream of RAM at the position its frames say.
    streams = [np.stack(s) for s in seen]
    matched = 0
    for e in range(store.num_episodes):
        rows = np.arange(store.episode_starts[e], store.episode_ends[e] + 1)
        for stream in streams:
            hits = np.flatnonzero((stream == ram[rows[0]]).all(axis=1))
            if any(
                start + len(rows) <= len(stream)
                and np.array_equal(stream[start : start + len(rows)], ram[rows])
                for start in hits
            ):
                matched += 1
                break
    assert matched == store.num_episodes


def _tiny_store(path, ram: bool):
    writer = TransitionStoreWriter.create(path, game="Pong", source="test", num_actions=6, ram=ram)
    for t in range(5):
        frame = np.full((84, 84), t, np.uint8)
        extra = {"ram": np.full(128, t, np.uint8)} if ram else {}
        writer.append(frame, 0, 0.0, t == 4, t == 0, **extra)
    return TransitionStore(writer.close())


def test_stores_without_ram_open_and_say_so(tmp_path, capsys):
    old = _tiny_store(tmp_path / "old", ram=False)
    assert not old.has_ram and old.summary()["ram"] is False
    assert "ram" not in json.loads((old.path / "manifest.json").read_text())["fields"]
    with pytest.raises(StoreError, match="holds no RAM"):
        old.gather_ram(np.arange(2))
    new = _tiny_store(tmp_path / "new", ram=True)
    np.testing.assert_array_equal(new.gather_ram(np.array([[1, 3]]))[0, :, 0], [1, 3])
    assert main(["info", str(new.path), "--verify"]) == 0
    out = capsys.readouterr().out
    assert '"ram": true' in out and "verify: ok" in out
    assert main(["info", str(old.path)]) == 0
    assert '"ram": false' in capsys.readouterr().out


def test_a_store_with_ram_refuses_rows_without_it(tmp_path):
    writer = TransitionStoreWriter.create(tmp_path / "s", game="Pong", source="test", ram=True)
    with pytest.raises(ValueError, match="records RAM"):
        writer.append(np.zeros((84, 84), np.uint8), 0, 0.0, False, True)
    plain = TransitionStoreWriter.create(tmp_path / "p", game="Pong", source="test")
    with pytest.raises(ValueError, match="no RAM field"):
        plain.append(np.zeros((84, 84), np.uint8), 0, 0.0, False, True, np.zeros(128, np.uint8))
