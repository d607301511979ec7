"""Issue 35 on probes: concurrent writers keep every entry (item 2), stale and unfinished
results (item 3), stores verified before probing (item 4), the probe store's identity (item 5),
one line naming the input (items 7, 9), a model from another run (item 10)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from sgi_lab.data import TransitionStore, TransitionStoreWriter
from sgi_lab.launch.cli import main
from sgi_lab.probes.results import read_probes

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sgi_lab.probes.results import write_probes

    path, tag, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    while not go.exists():
        time.sleep(0.01)
    for i in range(count):
        entry = {"encoder": {}, "store": {"fingerprint": f"{tag}-{i}"}, "settings": {"k": 1}}
        write_probes(path, entry)
    """
)


def test_two_processes_writing_one_probes_file_keep_every_entry(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    go = tmp_path / "go"
    count = 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(run / "probes.json"), tag, str(count), str(go)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    time.sleep(0.5)
    go.touch()  # both start writing at once
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    entries = read_probes(run)
    fingerprints = sorted(e["store"]["fingerprint"] for e in entries)
    assert fingerprints == sorted(f"{t}-{i}" for t in "ab" for i in range(count))
    assert json.loads((run / "probes.json").read_text())["format"] == 1


# -- a small store and run ----------------------------------------------------------------------


def small_store(path, episodes: int = 8, length: int = 30, game: str = "Pong", seed: int = 0):
    """A store whose frames draw Pong's ball_x (RAM byte 49) as a bright block."""
    rng = np.random.default_rng(seed)
    n = episodes * length
    values = rng.integers(0, 8, n)
    frames = np.zeros((n, 84, 84), np.uint8)
    for t, v in enumerate(values):
        frames[t, 30:40, 10 * v : 10 * v + 8] = 200
    frames[:, 80:84, 0:20] = rng.integers(0, 255, (n, 4, 20))
    rams = np.zeros((n, 128), np.uint8)
    rams[:, 49] = values
    writer = TransitionStoreWriter.create(
        path, game=game, source="random", num_actions=6, chunk_size=100, ram=True
    )
    first = np.zeros(n, np.uint8)
    first[::length] = 1
    writer.append_many(
        frame=frames,
        action=(values // 2).astype(np.int32),
        reward=(values == 7).astype(np.float32),
        terminal=np.roll(first, -1),
        first=first,
        ram=rams,
    )
    return TransitionStore(writer.close())


def pretrain(store, out, *extra) -> None:
    argv = ["pretrain", "--params", "params/pretrain/smoke.yaml", "--set", "steps=4"]
    argv += ["--set", "batch_size=4", "--set", "checkpoint_every=2", "--data", str(store.path)]
    assert main([*argv, "--out", str(out), "--no-progress", *extra]) == 0


def run_cli(capsys, argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err.strip()


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- item 3: stale and unfinished results -------------------------------------------------------


def test_overwrite_clears_probe_files_and_stale_entries_are_never_read(tmp_path, capsys):
    store = small_store(tmp_path / "s")
    run = tmp_path / "run"
    pretrain(store, run)
    probe = ["probe", run, "--data", store.path, "--no-progress", "--max-frames", "200"]
    assert run_cli(capsys, probe)[0] == 0
    old = (run / "probes.json").read_text()
    (run / "probes_ckpt_00000002.json").write_text(old)
    (run / "notes.txt").write_text("mine\n")
    pretrain(store, run, "--overwrite", "--set", "seed=1")
    assert not (run / "probes.json").exists() and not (run / "probes_ckpt_00000002.json").exists()
    assert (run / "notes.txt").read_text() == "mine\n"  # not the run's: kept
    # An old model's result put back (or left by a model retrained in place) is not read.
    (run / "probes.json").write_text(old)
    assert read_probes(run) == [] and len(read_probes(run, current_only=False)) == 1
    rc, out, _ = run_cli(capsys, ["report", run])
    assert rc == 0 and "Probes (test F1" not in out
    # ...and the probe runs again rather than taking it as done.
    rc, out, _ = run_cli(capsys, probe)
    assert rc == 0 and json.loads(out)["computed"] is True
    assert len(read_probes(run)) == 1


def test_a_probe_of_an_unfinished_run_is_marked_and_stale_once_it_finishes(tmp_path, capsys):
    store = small_store(tmp_path / "s")
    run = tmp_path / "run"
    pretrain(store, run)
    capsys.readouterr()
    model = run / "model.pt"
    kept = tmp_path / "model.pt"
    model.rename(kept)
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "state": "failed"}))
    probe = ["probe", run, "--data", store.path, "--no-progress", "--max-frames", "200"]
    rc, out, err = run_cli(capsys, [*probe, "--allow-unfinished"])
    assert rc == 0, err
    assert json.loads(out)["unfinished"] is True
    (entry,) = read_probes(run)
    assert entry["unfinished"] and entry["encoder"]["unfinished"]
    rc, out, _ = run_cli(capsys, ["report", run, "--allow-unfinished"])
    assert rc == 0 and "run (unfinished)" in out, out
    # The run finishes: the checkpoint's result is not the run's result any more.
    kept.rename(model)
    (run / "status.json").write_text(json.dumps(status))
    assert read_probes(run) == []
    rc, out, _ = run_cli(capsys, ["report", run])
    assert rc == 0 and "Probes (test F1" not in out and "(unfinished)" not in out


# -- item 7: a malformed entry ------------------------------------------------------------------


def test_a_malformed_entry_is_skipped_naming_the_file_and_entry(tmp_path, capsys):
    store = small_store(tmp_path / "s")
    run = tmp_path / "run"
    pretrain(store, run)
    probe = ["probe", run, "--data", store.path, "--no-progress", "--max-frames", "200"]
    assert run_cli(capsys, probe)[0] == 0
    payload = json.loads((run / "probes.json").read_text())
    payload["entries"] = [
        "junk",
        {"store": "x", "encoder": {}, "settings": {}},
        *payload["entries"],
    ]
    (run / "probes.json").write_text(json.dumps(payload))
    with pytest.warns(UserWarning, match=r"probes.json: entry 1: 'store' is a str"):
        assert len(read_probes(run)) == 1
    rc, out, err = run_cli(capsys, ["report", run])
    assert rc == 0 and "Probes (test F1" in out
    rc, out, err = run_cli(capsys, probe)
    assert rc == 0 and json.loads(out)["computed"] is False


# -- item 10: a model from another run ----------------------------------------------------------


def test_a_model_from_another_run_is_refused_naming_the_keys(tmp_path, capsys):
    store = small_store(tmp_path / "s")
    run, other = tmp_path / "run", tmp_path / "other"
    pretrain(store, run)
    pretrain(store, other, "--set", "spr_weight=0.0", "--set", "goal_weight=0.0")
    shutil.copy2(other / "model.pt", run / "model.pt")
    before = sorted(p.name for p in run.iterdir())
    rc, _, err = run_cli(capsys, ["probe", run, "--data", store.path, "--no-progress"])
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "model.pt: not this run's model" in err and "spr_weight" in err, err
    assert sorted(p.name for p in run.iterdir()) == before
