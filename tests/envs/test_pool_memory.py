"""EnvPool's workers writing their rows into shared memory: the same numbers as through pipes,
arrays the caller owns, and no segment left in /dev/shm whatever way the pool ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sgi_lab.envs.pool import EnvPool, EnvWorkerError
from sgi_lab.envs.pool_memory import SEGMENT_PREFIX, SharedRows, segment_bytes

SHM = Path("/dev/shm")
needs_dev_shm = pytest.mark.skipif(not SHM.is_dir(), reason="segments listed in /dev/shm")


def segments() -> set[str]:
    """This process's pool segments now in /dev/shm (none where there is no /dev/shm)."""
    return {p.name for p in SHM.glob(f"{SEGMENT_PREFIX}{os.getpid()}-*")}


def _atari_available() -> bool:
    try:
        from sgi_lab.envs import make_env

        make_env("Breakout", seed=0).close()
    except Exception:  # ale-py or its ROMs missing
        return False
    return True


GAMES = {
    # Whole games capped at 160 raw frames (40 steps): several ends and resets per agent.
    "atari": (["Pong", "Breakout", "Boxing", "Breakout"], {"max_episode_frames": 160}),
    # Random play ends MinAtar's Breakout and Asterix within tens of steps; training mode.
    "minatar": (["minatar/breakout", "minatar/asterix"] * 3, {"train": True}),
}


@pytest.mark.parametrize("family", ["atari", "minatar"])
def test_shared_memory_gives_exactly_the_pipe_steps(family):
    """Twin pools (pipes, shared memory), same games, seeds and actions: every observation,
    reward and flag equal, dtypes too, through `step`, masked `step` and evaluation's
    `step_active`, across episode ends; and nothing a step returned changes at the next step
    (the finetuning loop keeps ``obs`` while it steps)."""
    if family == "atari" and not _atari_available():
        pytest.skip("ale-py with its ROMs is not installed")
    if family == "minatar":
        pytest.importorskip("minatar")
    games, kwargs = GAMES[family]
    kwargs = {"train": False, **kwargs}
    n = len(games)
    seeds = list(range(10, 10 + n))
    rng = np.random.default_rng(3)
    ends, before = 0, segments()
    with (
        EnvPool(games, seeds, workers=1, shared_memory=False, **kwargs) as piped,
        EnvPool(games, seeds, workers=2, **kwargs) as shared,
    ):
        assert shared.shared_memory and not piped.shared_memory
        first = shared.reset()
        np.testing.assert_array_equal(first, piped.reset())
        held, snapshot = (first,), (first.copy(),)
        for t in range(150):
            actions = rng.integers(0, 3, n)
            mask = rng.random(n) < 0.7
            if t < 50:
                want, got = piped.step(actions), shared.step(actions)
            elif t < 100:
                want, got = piped.step(actions, mask), shared.step(actions, mask)
            else:  # evaluation's path: the active rows only
                want, got = piped.step_active(actions, mask), shared.step_active(actions, mask)
            for x, y in zip(want, got, strict=True):
                assert x.dtype == y.dtype and x.shape == y.shape
                np.testing.assert_array_equal(x, y)
            for x, y in zip(held, snapshot, strict=True):
                np.testing.assert_array_equal(x, y)  # the caller's arrays stay as they were
            assert not any(np.shares_memory(x, shared._pool.rows.obs) for x in got)
            held, snapshot = got, tuple(x.copy() for x in got)
            ends += int(np.sum(got[2] | got[3]))
    assert ends >= 6  # episodes ended and were reset in both pools
    assert segments() == before  # close() unlinked the segment


@needs_dev_shm
def test_segments_are_unlinked_on_close_and_when_a_worker_dies():
    """(Atari workers start in a fraction of MinAtar's time, which imports seaborn.)"""
    before = segments()
    with EnvPool(["Pong"] * 4, [0, 1, 2, 3], workers=2) as pool:
        (name,) = segments() - before
        assert pool._pool.rows.name == name
        assert (SHM / name).stat().st_size >= segment_bytes(4, (4, 84, 84), np.uint8)
        pool.reset()
        survivor, victim = pool._pool.procs
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        assert segments() - before == {name}  # the pool has not looked yet
        with pytest.raises(EnvWorkerError) as err:
            pool.step(np.zeros(4, np.int64))
    message = str(err.value)
    assert "\n" not in message and err.value.__cause__ is None
    assert f"environment worker 1 (pid {victim.pid}; environments 2-3" in message
    assert "died (exit code -9); the pool is closed" in message
    assert segments() == before
    assert survivor.exitcode == 0  # the other worker was ended by the pool's close
    with pytest.raises(RuntimeError, match="used after close"):
        pool.step(np.zeros(4, np.int64))
    pool.close()  # again (the with block closed it too): nothing left to do


@needs_dev_shm
def test_a_worker_that_cannot_build_its_environments_says_why_in_one_line():
    before = segments()
    with pytest.raises(EnvWorkerError) as err:
        EnvPool(["Pong", "Breakout"], [0, 1], workers=2, noop_max=-1)
    message = str(err.value)
    assert "\n" not in message and "environment worker 0 (pid " in message
    assert "environments 0-0: Pong) failed: ValueError: noop_max must be >= 0" in message
    assert segments() == before


EXIT_SCRIPT = """
import os, signal, sys
import numpy as np
from sgi_lab.envs.pool import EnvPool

if __name__ == "__main__":
    pool = EnvPool(["Pong", "Breakout"], [0, 1], workers=2)
    pool.reset()
    pool.step(np.zeros(2, np.int64))
    print(pool._pool.rows.name, flush=True)
    if sys.argv[1] == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
"""


@needs_dev_shm
@pytest.mark.parametrize("how", ["exits", "killed"])
def test_a_pool_nobody_closed_leaves_no_segment(tmp_path, how):
    """An interpreter that exits with a pool open ends its workers (it used to hang on them)
    and unlinks the segment; one killed outright leaves it to multiprocessing's resource
    tracker, which unlinks it once the workers have read the end of their pipes."""
    script = tmp_path / "leave_open.py"
    script.write_text(EXIT_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, str(script), how], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == (0 if how == "exits" else -signal.SIGKILL), done.stderr
    name = done.stdout.split()[-1]
    assert name.startswith(SEGMENT_PREFIX)
    deadline = time.monotonic() + 20
    while (SHM / name).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (SHM / name).exists()


def test_short_of_room_in_dev_shm_the_pool_falls_back_to_pipes(monkeypatch):
    monkeypatch.setattr("sgi_lab.envs.pool.free_bytes", lambda: 1000)
    with pytest.warns(UserWarning, match=r"/dev/shm has 0.0 MiB free.*need 0.1 MiB.*through pipes"):
        pool = EnvPool(["Pong", "Breakout"], [0, 1], workers=1)
    with pool:
        assert not pool.shared_memory and pool._pool.rows is None
        assert pool.reset().shape == (2, 4, 84, 84)
        assert pool.step(np.zeros(2, np.int64))[0].shape == (2, 4, 84, 84)


def test_shared_rows_lay_out_aligned_arrays_and_copy_what_they_hand_out():
    rows = SharedRows.create(3, (2, 5), np.uint8)
    try:
        seen = SharedRows.attach(rows.spec)
        seen.obs[1] = 7
        seen.rewards[:] = [0.5, -1.0, 2.0]
        seen.terminals[2] = True
        for name in ("obs", "rewards", "raw_rewards", "actions", "active"):
            assert getattr(rows, name).ctypes.data % 64 == 0
        obs, rewards, terminated, truncated, raw, terminals = rows.step_rows(
            np.array([False, True, True])
        )
        assert obs.shape == (2, 2, 5) and (obs[0] == 7).all() and not obs[1].any()
        np.testing.assert_array_equal(rewards, np.float32([-1.0, 2.0]))
        np.testing.assert_array_equal(terminals, [False, True])
        everything = rows.step_rows()
        seen.obs[:] = 9
        assert not (everything[0] == 9).any() and not (obs == 9).any()
        seen.close()
    finally:
        rows.close()
    rows.close()  # twice is fine
    assert not (SHM / rows.spec[0]).exists() or not SHM.is_dir()


def test_a_step_interrupted_before_its_answers_leaves_the_pool_refusing_steps(monkeypatch):
    """A Ctrl-C between a step's command and its answers: a next step would read the old
    answers while the workers still write the shared rows, so it is refused instead."""

    def interrupted() -> None:
        raise KeyboardInterrupt

    with EnvPool(["Pong", "Breakout"], [0, 1], workers=1) as pool:
        pool.reset()
        with monkeypatch.context() as patch:
            patch.setattr(pool, "_replies", interrupted)
            with pytest.raises(KeyboardInterrupt):
                pool.step(np.zeros(2, np.int64))
        with pytest.raises(RuntimeError, match="a step was interrupted before its end"):
            pool.step(np.zeros(2, np.int64))


@pytest.mark.smoke
def test_the_transport_benchmark_times_both_ways(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import pool_transport

    out = tmp_path / "transport.json"
    argv = ["pool_transport.py", "--families", "atari", "--envs", "2", "--block", "20"]
    argv += ["--rounds", "1", "--active", "0.5", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    pool_transport.main()
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["family"] == "atari" and row["envs"] == 2 and row["steps_per_block"] == 10
    for kind in ("pipes", "shared memory"):
        assert row[kind]["env_steps_per_s"] > 0 and len(row[kind]["blocks_wall_s"]) == 1
    assert row["speedup"] == pytest.approx(
        row["pipes"]["ms_per_step"] / row["shared memory"]["ms_per_step"], rel=0.01
    )
    assert result["cpu"] and result["cpus"] >= 1
