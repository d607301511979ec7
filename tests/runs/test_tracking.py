"""The tools researchers already use: TensorBoard event files beside
metrics.jsonl with its keys and steps, purged on resume as metrics.jsonl is; W&B offline as an
option; both off or missing without stopping a run."""

from __future__ import annotations

import importlib.util
import sys
import time
import warnings

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from sgi_lab.base.files import read_jsonl
from sgi_lab.config import FinetuneConfig, PretrainConfig
from sgi_lab.data.collect import collect_random
from sgi_lab.runs import tracking
from sgi_lab.runs.folder import RunDir
from sgi_lab.runs.tracking import (
    TENSORBOARD_ENV,
    WANDB_ENV,
    Trackers,
    TrackingSettingError,
    scalars,
)
from sgi_lab.train import finetune as ft
from sgi_lab.train.pretrain import pretrain


@pytest.fixture(autouse=True)
def default_tracking(monkeypatch):
    """The defaults whatever the shell running the tests sets: TensorBoard on, W&B off."""
    monkeypatch.delenv(TENSORBOARD_ENV, raising=False)
    monkeypatch.delenv(WANDB_ENV, raising=False)


def event_files(folder):
    return sorted(p for p in folder.glob("events.out.tfevents.*") if p.is_file())


def tensorboard_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard shows of a folder: every scalar tag's (step, value) pairs."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {
        tag: [(e.step, pytest.approx(e.value)) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


def jsonl_scalars(path) -> dict[str, list[tuple[int, float]]]:
    """The same view of metrics.jsonl: every plottable key's (step, value) pairs."""
    out: dict[str, list[tuple[int, float]]] = {}
    for row in read_jsonl(path):
        for key, value in scalars(row).items():
            out.setdefault(key, []).append((row["step"], value))
    return out


def test_event_files_hold_the_rows_keys_and_steps(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.metrics_logger() as log:
        log.log(10, **{"losses/total": 1.5, "losses/spr": -0.25, "charts/SPS": 7})
        log.log(20, **{"losses/total": 1.0, "probe": float("nan"), "done": True, "game": "Pong"})
    (event,) = event_files(run.path)
    assert event.parent == run.metrics_path.parent  # beside metrics.jsonl
    shown = tensorboard_scalars(run.path)
    assert shown == {
        "losses/total": [(10, 1.5), (20, 1.0)],
        "losses/spr": [(10, -0.25)],
        "charts/SPS": [(10, 7.0)],
        "done": [(20, 1.0)],
    }
    assert shown == jsonl_scalars(run.metrics_path)  # same keys, steps and values


def test_resume_purges_what_metrics_jsonl_drops(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.metrics_logger() as log:
        for step in (100, 200, 300, 400):
            log.log(step, loss=step / 100)
    # A crash after the checkpoint at step 200: rows 300 and 400 are logged again on resume.
    with pytest.warns(UserWarning, match="2 row"), run.metrics_logger(resume_step=200) as log:
        log.log(300, loss=30.0)
        log.log(500, loss=50.0)
    assert len(event_files(run.path)) == 2  # the first session's file is kept, not rewritten
    assert tensorboard_scalars(run.path) == {
        "loss": [(100, 1.0), (200, 2.0), (300, 30.0), (500, 50.0)]
    }
    assert tensorboard_scalars(run.path) == jsonl_scalars(run.metrics_path)


def test_a_fresh_start_removes_the_earlier_event_files(tmp_path, monkeypatch):
    """--overwrite (or a restart before the first checkpoint) empties metrics.jsonl: the earlier
    session's curves go with it."""
    run = RunDir(tmp_path / "run")
    with run.metrics_logger() as log:
        log.log(5, loss=9.0)
    first = event_files(run.path)
    with run.metrics_logger() as log:
        log.log(1, loss=1.0)
    assert not set(first) & set(event_files(run.path))
    assert tensorboard_scalars(run.path) == {"loss": [(1, 1.0)]}
    monkeypatch.setenv(TENSORBOARD_ENV, "0")  # switched off, the stale curves go all the same
    with run.metrics_logger() as log:
        log.log(1, loss=2.0)
    assert event_files(run.path) == []


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_switched_off(tmp_path, monkeypatch, value):
    monkeypatch.setenv(TENSORBOARD_ENV, value)
    run = RunDir(tmp_path / "run")
    with run.metrics_logger() as log:
        log.log(1, loss=1.0)
    assert event_files(run.path) == [] and read_jsonl(run.metrics_path) == [
        {"step": 1, "loss": 1.0}
    ]


@pytest.mark.parametrize(("env", "value"), [(TENSORBOARD_ENV, "maybe"), (WANDB_ENV, "ofline")])
def test_a_setting_that_means_nothing_is_named(tmp_path, monkeypatch, env, value):
    monkeypatch.setenv(env, value)
    with pytest.raises(TrackingSettingError, match=rf"^{env}='{value}': use ") as info:
        Trackers(tmp_path)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing written
    run = RunDir(tmp_path / "run")
    run.metrics_path.write_text('{"step": 1, "loss": 1.0}\n')
    for resume_step in (None, 0):  # refused before metrics.jsonl is emptied or cut
        with pytest.raises(TrackingSettingError, match=f"^{env}="):
            run.metrics_logger(resume_step=resume_step)
    assert read_jsonl(run.metrics_path) == [{"step": 1, "loss": 1.0}]


def test_a_missing_tensorboard_is_one_line_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    run = RunDir(tmp_path / "run")
    with pytest.warns(UserWarning) as caught, run.metrics_logger() as log:
        log.log(1, loss=1.0)
    (line,) = [str(w.message) for w in caught]
    assert line == (
        "TensorBoard: not installed (pip install tensorboard); metrics.jsonl is written as always"
    )
    assert event_files(run.path) == [] and len(read_jsonl(run.metrics_path)) == 1


def test_a_missing_wandb_is_one_line_with_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv(WANDB_ENV, "offline")
    monkeypatch.setitem(sys.modules, "wandb", None)
    run = RunDir(tmp_path / "run")
    with pytest.warns(UserWarning) as caught, run.metrics_logger() as log:
        log.log(1, loss=1.0)
    (line,) = [str(w.message) for w in caught]
    assert line == (
        "W&B (SGI_LAB_WANDB=offline): not installed (pip install 'sgi-lab[wandb]'); "
        "metrics.jsonl is written as always"
    )
    assert len(event_files(run.path)) == 1  # TensorBoard is unaffected
    assert not (run.path / "wandb").exists()


def test_a_tracker_that_breaks_mid_run_stops_with_one_line(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    log = run.metrics_logger()

    def broken(step, values):
        raise OSError("No space left on device")

    monkeypatch.setattr(log.trackers.mirrors[0], "log", broken)
    with pytest.warns(UserWarning, match=r"^TensorBoardMirror: stopped \(OSError: No space"):
        log.log(1, loss=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, not per row
        log.log(2, loss=2.0)
        log.close()
    assert [r["step"] for r in read_jsonl(run.metrics_path)] == [1, 2]


def test_wandb_offline_writes_inside_each_run_folder(tmp_path, monkeypatch):
    """Two agents of a population log at once, each to its own offline W&B run."""
    if importlib.util.find_spec("wandb") is None:
        pytest.skip("wandb is not installed (pip install 'sgi-lab[wandb]')")
    monkeypatch.setenv(WANDB_ENV, "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv(TENSORBOARD_ENV, "0")
    runs = [RunDir.open(tmp_path / f"s{seed}", "finetune", {"seed": seed}) for seed in (0, 1)]
    logs = []
    for run in runs:
        run.start(0)
        logs.append(run.metrics_logger())
    assert [type(m).__name__ for log in logs for m in log.trackers.mirrors] == ["WandbMirror"] * 2
    wandb_runs = [log.trackers.mirrors[0].run for log in logs]
    for step in (1, 2, 3):
        for seed, log in enumerate(logs):
            log.log(step, **{"losses/total": seed + 1.0 / step})
    for seed, wandb_run in enumerate(wandb_runs):
        # W&B commits a step's row when a later step comes (rows of one step merge), the
        # last one at the end
        assert wandb_run.summary["losses/total"] == pytest.approx(seed + 1 / 2)
        assert wandb_run.config["seed"] == seed and wandb_run.name == f"s{seed}"
        assert wandb_run.job_type == "finetune"
    for log in logs:
        log.close()
    for run in runs:
        (offline,) = (run.path / "wandb").glob("offline-run-*")
        (records,) = offline.glob("*.wandb")  # what `wandb sync` uploads
        assert records.stat().st_size > 0


def test_a_resumed_event_file_sorts_after_the_earlier_ones(tmp_path):
    """TensorBoard reads a folder's files in name order, and names start with the second."""
    now = int(time.time())
    earlier = tmp_path / f"events.out.tfevents.{now:010d}.host.99999.7"
    earlier.write_bytes(b"")
    tracking._after_event_files([earlier])
    assert int(time.time()) > now


@pytest.mark.smoke
@pytest.mark.usefixtures("one_thread")
def test_every_training_run_has_its_tensorboard_curves(tmp_path):
    """`tensorboard --logdir outputs/runs` shows a pretraining run and each agent of a
    finetuning population, each with its metrics.jsonl's keys and steps."""
    pytest.importorskip("minatar")
    store = collect_random("minatar/breakout", 200, tmp_path / "data", seed=3, progress=False)
    pretrain(PretrainConfig(**PRETRAIN), store, tmp_path / "pretrain", progress=False)
    configs = ft.population_configs(
        FinetuneConfig(**FINETUNE, pretrained=str(tmp_path / "pretrain")), seeds=(0, 1)
    )
    outs = ft.population_folders(tmp_path / "finetune", configs)
    ft.finetune_population(configs, outs, progress=False)
    folders = [tmp_path / "pretrain", *outs]
    assert len(folders) == 3
    for folder in folders:
        assert len(event_files(folder)) == 1, folder
        shown, logged = tensorboard_scalars(folder), jsonl_scalars(folder / "metrics.jsonl")
        assert shown == logged and len(logged) >= 3, folder
    assert "losses/total" in tensorboard_scalars(outs[1])


PRETRAIN = {
    "encoder": "minatar",
    "hidden_size": 32,
    "steps": 2,
    "batch_size": 4,
    "spr_steps": 3,
    "n_step": 3,
    "goal_window": 10,
    "log_every": 1,
    "checkpoint_every": 2,
    "prefetch": 0,
    "cpu_amp": False,  # bf16 on a CPU is slower at this size
    "channels_last": False,
}
FINETUNE = {
    "game": "minatar/breakout",
    "encoder": "minatar",
    "hidden_size": 32,
    "steps": 24,
    "batch_size": 4,
    "updates_per_step": 1,
    "spr_steps": 2,
    "n_step": 3,
    "learning_starts": 12,
    "eps_steps": 13,
    "eval_episodes": 1,
    "eval_envs": 1,
    "log_every": 8,
    "checkpoint_every": 24,
    "cpu_amp": False,
    "channels_last": False,
}


def test_the_cli_refuses_a_mistyped_switch_before_any_folder(tmp_path, monkeypatch, capsys):
    from sgi_lab.launch.cli import main

    monkeypatch.setenv("SGI_LAB_WANDB", "offlne")
    out = tmp_path / "run"
    argv = ["pretrain", "--params", "params/pretrain/smoke.yaml", "--data", str(tmp_path)]
    assert main([*argv, "--out", str(out)]) != 0
    assert "SGI_LAB_WANDB" in capsys.readouterr().err
    assert not out.exists()


def test_overwriting_a_run_removes_its_event_files(tmp_path):
    from sgi_lab.runs.folder import RunDir
    from sgi_lab.runs.tracking import event_files

    run = RunDir(tmp_path / "run")
    (run.path / "events.out.tfevents.1.host").write_bytes(b"old")
    (run.path / "notes.txt").write_text("mine")
    run._clear()
    assert event_files(run.path) == [] and (run.path / "notes.txt").read_text() == "mine"
