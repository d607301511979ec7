"""Probes nothing loses or misreads: concurrent writers keep every entry, stale and unfinished
results, stores verified before probing, the probe store's identity, one line naming the input,
a model from another run."""

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
import yaml
from test_probes import synthetic_store

from sgi_lab.analysis.probe_study import objective_summary, probe_frame
from sgi_lab.data import TransitionStoreWriter
from sgi_lab.launch.cli import main
from sgi_lab.probes.probe_data import FORMAT
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
    assert json.loads((run / "probes.json").read_text())["format"] == FORMAT


# -- a small store and run ----------------------------------------------------------------------


def small_store(
    path, episodes: int = 8, length: int = 30, game: str = "Pong", seed: int = 0, actions: int = 6
):
    """test_probes' synthetic store (frames drawing Pong's ball_x, RAM holding it), smaller."""
    return synthetic_store(
        path,
        episodes=episodes,
        length=length,
        game=game,
        seed=seed,
        num_actions=actions,
        random_actions=True,
    )


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


@pytest.mark.slow  # ~30 s on 2 cores: two processes each import torch and probe
def test_two_sgi_lab_probe_processes_on_one_run_keep_both_results(tmp_path):
    stores = [small_store(tmp_path / f"s{k}", seed=k) for k in range(2)]
    run = tmp_path / "run"
    pretrain(stores[0], run)
    command = [sys.executable, "-m", "sgi_lab.launch.cli", "probe", str(run), "--no-progress"]
    procs = [
        subprocess.Popen(
            [*command, "--data", str(s.path), "--max-frames", "120", "--threads", "1"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in stores
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "Traceback" not in err, err
    fingerprints = {e["store"]["fingerprint"] for e in read_probes(run)}
    assert fingerprints == {s.fingerprint for s in stores}


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
    assert rc == 0 and "Probes (linear probes" not in out
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
    frame = probe_frame([run])  # notebooks, the explorer and studies read this
    assert frame["unfinished"].tolist() == [True]
    assert set(objective_summary(frame)["unfinished"]) == {1}
    # The run finishes: the checkpoint's result is not the run's result any more.
    kept.rename(model)
    (run / "status.json").write_text(json.dumps(status))
    assert read_probes(run) == []
    rc, out, _ = run_cli(capsys, ["report", run])
    assert rc == 0 and "Probes (linear probes" not in out and "(unfinished)" not in out


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
    assert rc == 0 and "Probes (linear probes" in out
    rc, out, err = run_cli(capsys, probe)
    assert rc == 0 and json.loads(out)["computed"] is False


# -- item 10: a model from another run ----------------------------------------------------------


def test_a_model_from_another_run_is_refused_naming_the_keys(tmp_path, capsys):
    store = small_store(tmp_path / "s")
    run, other = tmp_path / "run", tmp_path / "other"
    pretrain(store, run)
    pretrain(store, other, "--set", "spr_coefficient=0.0", "--set", "goal_weight=0.0")
    shutil.copy2(other / "model.pt", run / "model.pt")
    before = sorted(p.name for p in run.iterdir())
    rc, _, err = run_cli(capsys, ["probe", run, "--data", store.path, "--no-progress"])
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "model.pt: not this run's model" in err and "spr_coefficient" in err, err
    assert sorted(p.name for p in run.iterdir()) == before


# -- item 4: a store is verified before it is probed --------------------------------------------


def _edit_manifest(store_path: Path, **changes) -> None:
    path = store_path / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("flipped byte", "damaged store, refusing to probe it"),
        # Pong's six actions under a manifest saying Breakout (4): the store reader, the
        # fingerprint or the probe's own claim check refuses it, whichever comes first.
        ("game Breakout", "4 action"),
        ("game Breakout, no fingerprint", "4 action"),
        ("18 actions", "the manifest says 18 actions, but Pong has 6"),
        ("fewer transitions", "num_transitions is 100"),
    ],
)
def test_a_damaged_or_misdescribed_store_is_not_probed(tmp_path, capsys, damage, message):
    store = small_store(tmp_path / "s")
    if damage == "flipped byte":
        chunk = sorted((store.path / "chunks").glob("frame_*.npy"))[0]
        data = bytearray(chunk.read_bytes())
        data[-10] ^= 0xFF
        chunk.write_bytes(bytes(data))
    elif damage == "game Breakout":
        _edit_manifest(store.path, game="Breakout", num_actions=4)
    elif damage == "game Breakout, no fingerprint":  # an older store records none
        _edit_manifest(store.path, game="Breakout", num_actions=4, fingerprint=None)
    elif damage == "18 actions":
        _edit_manifest(store.path, num_actions=18)
    else:
        _edit_manifest(store.path, num_transitions=100)
    out = tmp_path / "random"
    argv = ["probe", "--random-init", "nature", "--out", out, "--data", store.path]
    rc, _, err = run_cli(capsys, [*argv, "--no-progress"])
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"--data: {store.path}" in err and message in err, err
    assert not out.exists()  # nothing probed, nothing written


# -- items 7, 9: options named, bad values refused up front --------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-frames", "0", "--max-frames 0: at least 3"),
        ("--max-frames", "-5", "--max-frames -5: at least 3"),
        ("--split-seed", "-1", "--split-seed -1: a seed"),
        ("--seed", str(2**70), f"--seed {2**70}: a seed"),
        ("--threads", "-3", "--threads -3: at least 0"),
        ("--device", "tpu", "--device tpu: one of auto, cpu, cuda"),
    ],
)
def test_probe_options_are_refused_naming_them(tmp_path, capsys, option, value, message):
    store = small_store(tmp_path / "s", episodes=4)
    out = tmp_path / "random"
    argv = ["probe", "--random-init", "nature", "--out", out, "--data", store.path, option, value]
    rc, _, err = run_cli(capsys, [*argv, "--no-progress"])
    assert rc == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_probe_on_cuda_without_cuda_names_the_option(tmp_path, capsys):
    store = small_store(tmp_path / "s", episodes=4)
    argv = ["probe", "--random-init", "nature", "--out", tmp_path / "r", "--data", store.path]
    rc, _, err = run_cli(capsys, [*argv, "--device", "cuda", "--no-progress"])
    assert rc == 2 and "--device cuda: CUDA is not available" in err, err


def _probe_experiment(tmp_path, probe: dict, games=("Pong",), data=None) -> Path:
    spec = {
        "name": "x",
        "games": list(games),
        "data": data or {"r": {"source": "random", "steps": 100}},
        "probe": [{"name": "p", "data": "r", "pretrain": ["none"], **probe}],
    }
    file = tmp_path / "x.yaml"
    file.write_text(yaml.safe_dump(spec))
    return file


@pytest.mark.parametrize(
    ("probe", "games", "message"),
    [
        ({"max_frames": 0}, ["Pong"], "probe[0].max_frames: at least 3"),
        ({"max_frames": -5}, ["Pong"], "probe[0].max_frames: at least 3"),
        ({"seeds": [0, 0]}, ["Pong"], "probe[0].seeds: distinct seeds in [0, 2**63), got [0, 0]"),
        ({"seeds": [-1]}, ["Pong"], "probe[0].seeds"),
        ({"seeds": [2**70]}, ["Pong"], "probe[0].seeds"),
        ({"split_seed": -1}, ["Pong"], "probe[0].split_seed: a seed in [0, 2**63)"),
        ({}, ["Alien"], "probe[0]: games: Alien"),
    ],
)
def test_experiment_probe_values_are_refused_before_anything_runs(
    tmp_path, capsys, probe, games, message
):
    file = _probe_experiment(tmp_path, probe, games)
    out = tmp_path / "exp"
    rc, _, err = run_cli(capsys, ["experiment", file, "--out", out, "--dry-run"])
    assert rc == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_a_folder_store_a_probe_cannot_read_is_refused_at_dry_run(tmp_path, capsys):
    no_ram = TransitionStoreWriter.create(
        tmp_path / "noram", game="Pong", source="random", num_actions=6, chunk_size=50
    )
    no_ram.append_many(
        frame=np.zeros((40, 84, 84), np.uint8),
        action=np.zeros(40, np.int32),
        reward=np.zeros(40, np.float32),
        terminal=np.zeros(40, np.uint8),
        first=(np.arange(40) % 10 == 0).astype(np.uint8),
    )
    no_ram.close()
    breakout = small_store(tmp_path / "pong_frames")
    for src, message in (
        (tmp_path / "noram", "this store holds no RAM"),
        (breakout.path, None),
    ):
        data = {"r": {"source": "folder", "src": str(src)}}
        file = _probe_experiment(tmp_path, {}, ["Breakout"] if message is None else ["Pong"], data)
        rc, _, err = run_cli(capsys, ["experiment", file, "--out", tmp_path / "e", "--dry-run"])
        assert rc == 2 and len(err.splitlines()) == 1 and "data.r" in err, err
        assert (message or "holds Pong frames, not Breakout's") in err, err


# -- item 5: the probe store's identity ----------------------------------------------------------


def test_probe_data_of_another_game_is_refused_the_training_data_warned_and_recorded(tmp_path):
    from sgi_lab.config import ConfigError
    from sgi_lab.probes import ProbeInputError
    from sgi_lab.probes.probe_data import check_probe_data
    from sgi_lab.runs.folder import RunDir

    training = small_store(tmp_path / "train")
    probe_a = small_store(tmp_path / "probe", seed=1)
    breakout = small_store(tmp_path / "breakout", game="Breakout", actions=4)
    with pytest.raises(ProbeInputError, match=r"^probe_data: .*breakout holds Breakout frames"):
        check_probe_data(breakout.path, training)
    with pytest.warns(UserWarning, match="probe_data: .* is the training data itself"):
        check_probe_data(training.path, training)
    _, identity = check_probe_data(probe_a.path, training)
    assert identity == {"probe_data": probe_a.fingerprint}
    # Recorded with the run's inputs: a resume on another store at the same path is refused.
    run = tmp_path / "run"
    opened = RunDir.open(run, "pretrain", {"steps": 4}, inputs={"data": "d", **identity})
    opened.start()
    opened.fail("killed")
    shutil.rmtree(probe_a.path)
    probe_b = small_store(tmp_path / "probe", seed=2)  # replaced between a kill and the resume
    _, other = check_probe_data(probe_b.path, training)
    assert other != identity
    before = (run / "status.json").read_bytes()
    with pytest.raises(ConfigError, match=r"started on probe_data .*probe_data names another"):
        RunDir.open(run, "pretrain", {"steps": 4}, inputs={"data": "d", **other})
    assert (run / "status.json").read_bytes() == before


@pytest.mark.slow  # a finetuning run of 40 steps: ~30 s on 2 cores
def test_a_finetuning_folder_holding_another_configs_model_is_refused(tmp_path, capsys):
    run = tmp_path / "ft"
    argv = ["finetune", "--params", "params/finetune/smoke.yaml", "--game", "pong"]
    argv += ["--set", "steps=40", "--set", "learning_starts=20", "--out", str(run)]
    assert main([*argv, "--no-progress"]) == 0
    from sgi_lab.analysis.probe_encoders import load_probe_encoder

    assert load_probe_encoder(run).kind == "finetune"  # its own model: accepted
    other = tmp_path / "other"
    shutil.copytree(run, other)
    config = yaml.safe_load((other / "config.yaml").read_text())
    (other / "config.yaml").write_text(yaml.safe_dump({**config, "spr_coefficient": 99.0}))
    store = small_store(tmp_path / "s", episodes=4)
    capsys.readouterr()
    rc, _, err = run_cli(capsys, ["probe", other, "--data", store.path, "--no-progress"])
    assert rc == 2 and "not this run's model" in err and "spr_coefficient" in err, err
    assert not (other / "probes.json").exists()


def test_a_probe_of_another_games_store_or_shape_is_refused_in_one_line(tmp_path, capsys):
    """A Pong run on a Breakout store of the same shape (its probes would be saved in the Pong
    run under Breakout's name), a random Atari encoder on a MinAtar store (a raw kernel-size
    error before) and a run on a store of another shape: one line each, exit 2, nothing
    written."""
    pong = small_store(tmp_path / "pong")
    breakout = small_store(tmp_path / "breakout", game="Breakout", actions=4)
    run = tmp_path / "run"
    pretrain(pong, run)
    before = sorted(p.name for p in run.iterdir())
    rc, _, err = run_cli(capsys, ["probe", run, "--data", breakout.path, "--no-progress"])
    assert rc == 2 and "trained on Pong" in err and "holds Breakout frames" in err
    assert sorted(p.name for p in run.iterdir()) == before  # no probes.json
    pytest.importorskip("minatar")
    from sgi_lab.data.collect import collect_random

    grid = collect_random("minatar/breakout", 300, tmp_path / "grid", seed=0, progress=False)
    out = tmp_path / "random"
    argv = ["probe", "--random-init", "nature", "--data", grid.path, "--out", out]
    rc, _, err = run_cli(capsys, [*argv, "--no-progress"])
    assert rc == 2 and "--random-init: 'nature' is an Atari encoder" in err
    assert not out.exists()
    rc, _, err = run_cli(capsys, ["probe", run, "--data", grid.path, "--no-progress"])
    assert rc == 2 and "reads 4 channels of 84x84" in err and "gives 4 of 10x10" in err
