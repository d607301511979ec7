"""The Random collector under either Atari env protocol (dopamine, rlpyt): the store's frames are
those of `make_env` with that protocol, the manifest records it, a store holds one protocol
(resuming or re-running with the other is refused, nothing touched), older stores read as
dopamine, and the CLI, experiment files and pretraining runs carry it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sgi_lab import experiments as ex
from sgi_lab.config import ConfigError
from sgi_lab.data import StoreError, TransitionStore
from sgi_lab.data.collect import collect_random
from sgi_lab.data.store_format import ENV_PROTOCOLS, MANIFEST, StoreFolderError
from sgi_lab.envs import ENV_PROTOCOLS as ENV_FACTORY_PROTOCOLS
from sgi_lab.envs import make_env
from sgi_lab.envs.atari import PREPROCESSING
from sgi_lab.launch.cli import main

CAP = 400  # raw frames: Pong's random play never ends a game this soon, so the cap ends each
TINY = dict(seed=5, chunk_size=512, progress=False, env_kwargs={"max_episode_frames": CAP})


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("protocols")
    return {p: collect_random("pong", 260, root / p, env_protocol=p, **TINY) for p in PREPROCESSING}


def _replay(store: TransitionStore, protocol: str) -> tuple[np.ndarray, np.ndarray]:
    """The newest frame and RAM of every state `make_env` shows when the store's actions are
    played from the same seed (one chunk: only episode ends reset)."""
    env = make_env(
        "pong", seed=5, train=False, preprocessing=protocol, record_ram=True, max_episode_frames=CAP
    )
    frames, rams = [], []
    obs, info = env.reset(seed=5)
    for action in store.actions:
        frames.append(obs[-1])
        rams.append(info["ram"])
        obs, _, terminated, truncated, info = env.step(int(action))
        if terminated or truncated:
            obs, info = env.reset()
    env.close()
    return np.stack(frames), np.stack(rams)


def test_the_store_format_knows_the_env_protocols():
    # Atari's frame protocols, then MinAtar's: the store format's copy (no emulator imported
    # to read a store) equals the environments' own list.
    assert ENV_PROTOCOLS == ENV_FACTORY_PROTOCOLS == (*PREPROCESSING, "minatar")


@pytest.mark.parametrize("protocol", PREPROCESSING)
def test_frames_are_make_envs_of_that_protocol_and_the_manifest_says_which(stores, protocol):
    store = stores[protocol]
    assert store.manifest.env_protocol == protocol
    assert store.summary()["env_protocol"] == protocol
    frames, rams = _replay(store, protocol)
    np.testing.assert_array_equal(store.gather_frames(np.arange(len(store))), frames)
    np.testing.assert_array_equal(store.gather_ram(np.arange(len(store))), rams)
    assert store.verify() == []


def test_the_protocols_differ_as_documented(stores):
    dopamine, rlpyt = stores["dopamine"], stores["rlpyt"]
    # The same seed draws the same Random actions, up to the first episode end (each episode
    # starts a fresh hold, and the episodes end at other steps).
    np.testing.assert_array_equal(dopamine.actions[:100], rlpyt.actions[:100])
    # Another resize and other reset no-ops (rows 16, 17): the first frames differ.
    assert not np.array_equal(dopamine.gather_frames(0), rlpyt.gather_frames(0))
    # The episode cap (row 21): 100 steps, truncated (no terminal) vs 101 steps, terminated.
    assert list(dopamine.episode_starts[:3]) == [0, 100, 200]
    assert not dopamine.terminals.any()
    assert list(rlpyt.episode_starts[:3]) == [0, 101, 202]
    assert list(np.flatnonzero(rlpyt.terminals)) == [100, 201]


def test_a_store_holds_one_protocol_rerunning_with_the_other_is_refused(stores):
    store = stores["rlpyt"]
    manifest = (store.path / MANIFEST).read_bytes()
    again = collect_random("pong", 260, store.path, env_protocol="rlpyt", **TINY)
    assert again.fingerprint == store.fingerprint  # complete, same settings: a no-op
    with pytest.raises(StoreFolderError, match=r"'env_protocol': \('rlpyt', 'dopamine'\)"):
        collect_random("pong", 260, store.path, env_protocol="dopamine", **TINY)
    assert (store.path / MANIFEST).read_bytes() == manifest
    with pytest.raises(ValueError, match="env_protocol: must be one of dopamine, rlpyt, got 'ale'"):
        collect_random("pong", 10, store.path.parent / "x", env_protocol="ale", progress=False)
    with pytest.raises(ValueError, match=r"env_kwargs\['preprocessing'\]: pass env_protocol"):
        collect_random("pong", 10, store.path.parent / "x", env_kwargs={"preprocessing": "rlpyt"})
    assert not (store.path.parent / "x").exists()


def _interrupt_after_two_chunks(monkeypatch, out: Path, **kwargs) -> None:
    import sgi_lab.data.store_writer as store_writer

    real = store_writer.TransitionStoreWriter._flush_chunk

    def dying(self):
        if len(self.manifest.chunks) == 2:
            raise KeyboardInterrupt
        real(self)

    with monkeypatch.context() as patch:
        patch.setattr(store_writer.TransitionStoreWriter, "_flush_chunk", dying)
        with pytest.raises(KeyboardInterrupt):
            collect_random("breakout", 300, out, **kwargs)
    assert out.with_name(out.name + ".partial").exists() and not out.exists()


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_resuming_with_the_other_protocol_is_refused_and_touches_nothing(tmp_path, monkeypatch):
    kwargs = dict(seed=2, chunk_size=64, progress=False, env_kwargs={"max_episode_frames": 400})
    out = tmp_path / "resumed"
    _interrupt_after_two_chunks(monkeypatch, out, env_protocol="rlpyt", **kwargs)
    partial = tmp_path / "resumed.partial"
    # What a killed writer leaves, which a resume would remove: a temp file and a stray chunk.
    (partial / "chunks" / ".frame_00002.npy.99.tmp").write_bytes(b"half")
    (partial / "chunks" / "action_00002.npy").write_bytes(b"stray")
    before = _snapshot(partial)
    with pytest.raises(StoreError) as refused:
        collect_random("breakout", 300, out, env_protocol="dopamine", **kwargs)
    message = str(refused.value)
    assert str(partial) in message and "'rlpyt'" in message and "'dopamine'" in message
    assert "--env-protocol rlpyt" in message
    assert _snapshot(partial) == before and not out.exists()
    # Through the command line: the same refusal, exit 2.
    argv = ["collect", "random", "--game", "breakout", "--steps", "300", "--seed", "2"]
    argv += ["--out", str(out), "--chunk-size", "64", "--no-progress"]
    assert main(argv) == 2 and _snapshot(partial) == before
    # Resumed in its own protocol it equals an uninterrupted rlpyt collection.
    resumed = collect_random("breakout", 300, out, env_protocol="rlpyt", **kwargs)
    straight = collect_random(
        "breakout", 300, tmp_path / "straight", env_protocol="rlpyt", **kwargs
    )
    assert resumed.manifest.env_protocol == "rlpyt"
    np.testing.assert_array_equal(
        resumed.gather_frames(np.arange(300)), straight.gather_frames(np.arange(300))
    )
    assert resumed.fingerprint == straight.fingerprint and resumed.verify() == []


def _drop_protocol(manifest_path: Path) -> None:
    payload = json.loads(manifest_path.read_text())
    del payload["env_protocol"]
    manifest_path.write_text(json.dumps(payload))


def test_a_store_older_than_the_field_reads_as_dopamine(tmp_path, monkeypatch):
    store = collect_random("pong", 120, tmp_path / "old", seed=0, progress=False)
    _drop_protocol(store.path / MANIFEST)
    old = TransitionStore(store.path)
    assert old.manifest.env_protocol == "dopamine" and old.summary()["env_protocol"] == "dopamine"
    assert old.fingerprint == old.manifest.content_fingerprint() and old.verify() == []
    # Re-running its command is still a no-op; asking for rlpyt is refused.
    assert collect_random("pong", 120, store.path, seed=0, progress=False).fingerprint == (
        old.fingerprint
    )
    with pytest.raises(StoreFolderError, match="env_protocol"):
        collect_random("pong", 120, store.path, seed=0, env_protocol="rlpyt", progress=False)
    # An interrupted collection older than the field resumes as dopamine only.
    kwargs = dict(seed=2, chunk_size=64, progress=False)
    out = tmp_path / "old_partial"
    _interrupt_after_two_chunks(monkeypatch, out, **kwargs)
    _drop_protocol(tmp_path / "old_partial.partial" / MANIFEST)
    with pytest.raises(StoreError, match="in the env protocol 'dopamine', asked to resume in"):
        collect_random("breakout", 300, out, env_protocol="rlpyt", **kwargs)
    resumed = collect_random("breakout", 300, out, **kwargs)
    assert len(resumed) == 300 and resumed.manifest.env_protocol == "dopamine"
    # A value no sgi-lab writes is refused, naming the key.
    payload = json.loads((store.path / MANIFEST).read_text())
    (store.path / MANIFEST).write_text(json.dumps({**payload, "env_protocol": "ale"}))
    with pytest.raises(StoreError, match=r"'env_protocol' must be one of dopamine, rlpyt"):
        TransitionStore(store.path)


def test_cli_collects_in_either_protocol_and_info_shows_it(tmp_path, capsys):
    out = tmp_path / "cli_rlpyt"
    argv = ["collect", "random", "--game", "pong", "--steps", "150", "--seed", "1"]
    argv += ["--chunk-size", "64", "--no-progress"]
    assert main([*argv, "--out", str(out), "--env-protocol", "rlpyt"]) == 0
    assert json.loads(capsys.readouterr().out)["env_protocol"] == "rlpyt"
    assert TransitionStore(out).manifest.env_protocol == "rlpyt"
    assert main(["info", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["env_protocol"] == "rlpyt"
    # The default is gymnasium's protocol; re-running into the rlpyt store is refused.
    assert main([*argv, "--out", str(tmp_path / "cli_dopamine")]) == 0
    assert TransitionStore(tmp_path / "cli_dopamine").manifest.env_protocol == "dopamine"
    capsys.readouterr()
    assert main([*argv, "--out", str(out)]) == 2
    assert "'env_protocol': ('rlpyt', 'dopamine')" in capsys.readouterr().err
    # The exploratory collector plays gymnasium's env only: refused, not ignored.
    explore = ["collect", "exploratory", "--game", "pong", "--steps", "10", "--no-progress"]
    assert main([*explore, "--out", str(tmp_path / "e"), "--env-protocol", "rlpyt"]) == 2
    assert "only `collect random` plays the authors' env" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()
    with pytest.raises(SystemExit):
        main([*argv, "--out", str(tmp_path / "bad"), "--env-protocol", "ale"])
    assert "invalid choice: 'ale'" in capsys.readouterr().err


EXPERIMENT = """
name: protocols
games: [Pong]
data:
  random: {%s}
pretrain: [{name: a, params: params/pretrain/smoke.yaml, data: random}]
finetune: [{name: f, params: params/finetune/smoke.yaml, pretrain: [a]}]
"""
ROOT = Path(__file__).resolve().parents[2]


def _experiment(tmp_path: Path, data_entry: str) -> ex.Experiment:
    path = tmp_path / "exp.yaml"
    text = EXPERIMENT % data_entry
    text = text.replace("params/", f"{ROOT}/params/")
    path.write_text(text)
    return ex.load_experiment(path)


def test_experiment_data_entries_take_the_protocol_to_the_collector(tmp_path, capsys):
    entry = "source: random, steps: 120"
    graph = ex.expand(_experiment(tmp_path, f"{entry}, env_protocol: rlpyt"), tmp_path / "out")
    task = next(t for t in graph.tasks if t.kind == "data")
    assert task.argv[task.argv.index("--env-protocol") + 1] == "rlpyt"
    assert main(list(task.argv)) == 0  # the command the executors run
    assert TransitionStore(task.folder).manifest.env_protocol == "rlpyt"
    default = ex.expand(_experiment(tmp_path, entry), tmp_path / "out2")
    task = next(t for t in default.tasks if t.kind == "data")
    assert task.argv[task.argv.index("--env-protocol") + 1] == "dopamine"
    with pytest.raises(ConfigError, match=r"data\.random\.env_protocol"):
        _experiment(tmp_path, f"{entry}, env_protocol: ale")
    for other in ("source: exploratory", "source: folder, src: /x"):
        with pytest.raises(
            ConfigError, match=r"data\.random\.env_protocol: 'rlpyt' is for source 'random' only"
        ):
            _experiment(tmp_path, f"{other}, env_protocol: rlpyt")


def test_a_pretraining_run_records_the_protocol_of_its_data(stores, tmp_path):
    from sgi_lab.config import PretrainConfig, build_config
    from sgi_lab.runs.status import read_status
    from sgi_lab.train.pretrain import pretrain

    config = build_config(
        PretrainConfig,
        dict(encoder="nature", batch_size=8, steps=2, log_every=1, checkpoint_every=2, prefetch=0),
    )
    pretrain(config, stores["rlpyt"], tmp_path / "run", progress=False)
    status = read_status(tmp_path / "run")
    assert status["data_env_protocol"] == "rlpyt" and status["state"] == "finished"
