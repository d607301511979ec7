"""Collectors: stacks rebuilt from the store equal a direct recording; Geometric holds; crashes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sgi_lab.data import StoreError, TransitionStore
from sgi_lab.data.collect import RandomHoldPolicy, collect, collect_random


class RecordingPolicy(RandomHoldPolicy):
    """Acts like the Random policy and remembers every observation it was shown."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[np.ndarray] = []

    def __call__(self, obs):
        self.seen.append(obs.copy())
        return super().__call__(obs)


def test_store_stacks_equal_direct_recording_across_episodes(tmp_path):
    # A small frame cap forces truncated episodes; Breakout's random play also ends games.
    policy = RecordingPolicy(num_actions=4, seed=1)
    store = collect(
        policy,
        "breakout",
        900,
        tmp_path / "rec",
        seed=3,
        chunk_size=128,
        progress=False,
        env_kwargs={"max_episode_frames": 800},
    )
    assert len(store) == 900 == len(policy.seen)
    assert store.num_episodes >= 4  # episode boundaries are exercised
    recorded = np.stack(policy.seen)
    rebuilt = store.stack(np.arange(900))
    np.testing.assert_array_equal(rebuilt, recorded)
    # Every episode's first stack is [0, 0, 0, f0].
    assert not rebuilt[store.episode_starts, :3].any()
    assert store.manifest.params["seed"] == 3 and store.manifest.source == "policy"


def test_random_policy_hold_lengths_are_geometric_one_third():
    policy = RandomHoldPolicy(num_actions=6, p=1 / 3, seed=0)
    lengths, current = [], 0
    for _ in range(60_000):
        policy(None)
        current += 1
        if policy._left == 0:
            lengths.append(current)
            current = 0
    lengths = np.array(lengths)
    assert lengths.min() == 1
    assert lengths.mean() == pytest.approx(3.0, rel=0.03)
    assert (lengths == 1).mean() == pytest.approx(1 / 3, abs=0.015)
    assert lengths.var() == pytest.approx((1 - 1 / 3) / (1 / 3) ** 2, rel=0.1)


def test_collect_random_manifest(tmp_path):
    store = collect_random("pong", 300, tmp_path / "r", seed=0, chunk_size=100, progress=False)
    s = store.summary()
    assert s["transitions"] == 300 and store.num_actions == 6
    assert store.manifest.source == "random" and store.manifest.params["hold_p"] == pytest.approx(
        1 / 3
    )
    # Re-running with the same settings is a no-op; other settings are refused, nothing touched.
    stamp = (tmp_path / "r" / "manifest.json").stat().st_mtime_ns
    again = collect_random("pong", 300, tmp_path / "r", seed=0, chunk_size=100, progress=False)
    assert again.fingerprint == store.fingerprint
    assert (tmp_path / "r" / "manifest.json").stat().st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match="other settings"):
        collect_random("pong", 200, tmp_path / "r", progress=False)
    assert (tmp_path / "r" / "manifest.json").stat().st_mtime_ns == stamp


def test_interrupted_random_collection_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    import sgi_lab.data.store_writer as store_module

    kwargs = dict(seed=2, chunk_size=64, progress=False, env_kwargs={"max_episode_frames": 400})
    straight = collect_random("breakout", 300, tmp_path / "straight", **kwargs)
    # Die while writing the third chunk (after two finished ones), then resume.
    real = store_module.TransitionStoreWriter._flush_chunk

    def dying(self):
        if len(self.manifest.chunks) == 2:
            raise KeyboardInterrupt
        real(self)

    monkeypatch.setattr(store_module.TransitionStoreWriter, "_flush_chunk", dying)
    with pytest.raises(KeyboardInterrupt):
        collect_random("breakout", 300, tmp_path / "resumed", **kwargs)
    monkeypatch.setattr(store_module.TransitionStoreWriter, "_flush_chunk", real)
    assert (tmp_path / "resumed.partial").exists() and not (tmp_path / "resumed").exists()
    resumed = collect_random("breakout", 300, tmp_path / "resumed", **kwargs)
    np.testing.assert_array_equal(resumed.actions, straight.actions)
    np.testing.assert_array_equal(resumed.firsts, straight.firsts)
    np.testing.assert_array_equal(
        resumed.gather_frames(np.arange(300)), straight.gather_frames(np.arange(300))
    )
    assert resumed.fingerprint == straight.fingerprint
    assert resumed.verify() == []


def test_overwrite_replaces_only_a_store_of_ours(tmp_path):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("years of work")
    with pytest.raises(FileExistsError, match="not an sgi-lab store"):
        collect_random("pong", 50, thesis, overwrite=True, progress=False)
    assert (thesis / "chapter1.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis"]
    store = collect_random("pong", 50, tmp_path / "s", chunk_size=32, progress=False)
    replaced = collect_random("pong", 40, tmp_path / "s", overwrite=True, progress=False)
    assert len(store) == 50 and len(replaced) == 40
    with pytest.raises(ValueError, match="chunk_size"):
        collect_random("pong", 50, tmp_path / "bad", chunk_size=0, progress=False)
    with pytest.raises(ValueError, match="seed"):
        collect_random("pong", 50, tmp_path / "bad", seed=-1, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s", "thesis"]


_CHILD = """
import sys
from sgi_lab.data.collect import collect_random
collect_random("pong", 6000, sys.argv[1], seed=0, chunk_size=200, progress=False)
"""


def test_killed_collection_never_opens_as_complete_and_resumes(tmp_path):
    out = tmp_path / "killed"
    partial = tmp_path / "killed.partial"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(out)])
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if len(list((partial / "chunks").glob("frame_*.npy"))) >= 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("collection made no progress")
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    assert not out.exists()
    with pytest.raises(StoreError, match="resume"):
        TransitionStore(out)
    store = collect_random("pong", 6000, out, seed=0, chunk_size=200, progress=False)
    assert len(store) == 6000 and not partial.exists()
    assert store.firsts[0]


def test_cli_collect_and_info(tmp_path, capsys):
    from sgi_lab.launch.cli import main

    out = tmp_path / "cli_store"
    args = ["collect", "random", "--game", "ALE/Pong-v5", "--steps", "200", "--seed", "1"]
    assert main([*args, "--out", str(out), "--chunk-size", "64", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert '"transitions": 200' in captured.out and "%|" not in captured.err
    assert main(["info", str(out)]) == 0
    assert '"game": "Pong"' in capsys.readouterr().out
    assert (
        main(
            ["collect", "random", "--game", "pongg", "--steps", "10", "--out", str(tmp_path / "x")]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "unknown Atari 100k game 'pongg'" in err and "MsPacman" in err


def test_a_seeded_minatar_reset_is_the_same_fresh_start_after_any_history():
    """What makes a killed MinAtar collection resume into the uninterrupted store: each chunk
    starts from a seeded reset, and minatar's own reset keeps the last action, which a sticky
    step replays. With every step sticky, the first steps after a seeded reset replay the last
    action: 0 from a fresh env, and now from an env with any history too."""
    pytest.importorskip("minatar")
    from sgi_lab.envs.minatar import MinAtarEnv

    def play(env, actions):
        return [env.step(a)[0] for a in actions]

    used = MinAtarEnv("minatar/breakout", seed=1, sticky_action_prob=0.0)
    used.reset(seed=1)
    play(used, [2] * 5)  # its last action: 2 (right)
    used.sticky_action_prob = used._env.sticky_action_prob = 1.0
    fresh = MinAtarEnv("minatar/breakout", seed=5, sticky_action_prob=1.0)
    a, b = used.reset(seed=7)[0], fresh.reset(seed=7)[0]
    np.testing.assert_array_equal(a, b)
    for x, y in zip(play(used, [1] * 6), play(fresh, [1] * 6), strict=True):
        np.testing.assert_array_equal(x, y)
