"""The run lifecycle every stage shares: foreign folders refused, one config check on resume,
crash litter cleaned, unreadable checkpoints skipped, unfinished runs never count as results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sgi_lab.base.files import LOCK_FILE, RunFolderError, atomic_write_text, clean_temp_files
from sgi_lab.config import ConfigError, FinetuneConfig, PretrainConfig, build_config, to_dict
from sgi_lab.runs.folder import RUNTIME_KEYS, FinetuneRun, RunDir
from sgi_lab.runs.status import UnfinishedRunError, pretrained_source, require_finished, run_kind

CONFIG = {"lr": 1e-4, "steps": 10, "device": "cpu", "encoder": "nature"}


def tree(root):
    return sorted(
        (str(p.relative_to(root)), p.read_bytes() if p.is_file() else None) for p in root.rglob("*")
    )


def started(path, kind="pretrain", config=CONFIG, **kw):
    run = RunDir.open(path, kind, config, **kw)
    run.start(0, params="t")
    return run


def test_fresh_run_writes_nothing_until_start(tmp_path):
    run = RunDir.open(tmp_path / "run", "pretrain", CONFIG)
    assert not (tmp_path / "run").exists() and not run.resuming
    run.start(0)
    status = run.status()
    assert status["state"] == "running" and status["kind"] == "pretrain" and status["step"] == 0
    assert run.saved_config() == CONFIG and run_kind(tmp_path / "run") == "pretrain"
    run.finish(10, model="m")
    assert not run.finished  # a finished status without its final model is no evidence
    (run.path / "model.pt").write_bytes(b"model")
    assert run.finished and run.status()["message"] == ""


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_that_is_not_our_run_is_refused_untouched(tmp_path, overwrite):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "config.yaml").write_text("my: own\n")
    (thesis / "metrics.jsonl").write_text("precious\n")
    before = tree(tmp_path)
    with pytest.raises(RunFolderError, match="thesis: not empty and not an sgi-lab run"):
        RunDir.open(thesis, "finetune", CONFIG, overwrite=overwrite)
    (thesis / "status.json").write_text('{"foo": 1}')  # a status.json that is not ours
    before = tree(tmp_path)
    with pytest.raises(RunFolderError, match="thesis"):
        RunDir.open(thesis, "pretrain", CONFIG, overwrite=overwrite)
    assert tree(tmp_path) == before


def test_another_kind_of_run_is_refused_and_overwrite_keeps_foreign_files(tmp_path):
    run = started(tmp_path / "run")
    (run.path / "notes.txt").write_text("mine")
    (run.path / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunFolderError, match="holds a pretrain run, not a finetune run"):
        RunDir.open(run.path, "finetune", CONFIG, overwrite=True)
    fresh = RunDir.open(run.path, "pretrain", {**CONFIG, "lr": 0.5}, overwrite=True)
    assert sorted(p.name for p in run.path.iterdir()) == [LOCK_FILE, "notes.txt"]
    fresh.start(0)
    assert fresh.saved_config()["lr"] == 0.5


def test_legacy_run_without_kind_is_recognised(tmp_path):
    legacy = tmp_path / "old"
    legacy.mkdir()
    (legacy / "config.yaml").write_text("lr: 0.0001\nsteps: 10\ndevice: cpu\nencoder: nature\n")
    atomic_write_text(legacy / "status.json", json.dumps({"state": "interrupted", "step": 3}))
    assert run_kind(legacy) == ""
    run = RunDir.open(legacy, "finetune", CONFIG)
    run.start(3)
    assert run.status()["kind"] == "finetune" and run.status()["state"] == "running"


def test_one_config_check_on_resume_names_every_changed_key(tmp_path):
    run = started(tmp_path / "run")
    (run.path / "model.pt").write_bytes(b"model")
    run.finish(10)
    assert {"device", "threads"} <= RUNTIME_KEYS
    again = RunDir.open(run.path, "pretrain", {**CONFIG, "device": "cuda"})  # runtime: fine
    assert again.finished
    with pytest.raises(ConfigError, match=r"\['encoder', 'steps'\].*steps: 10 -> 20"):
        RunDir.open(run.path, "pretrain", {**CONFIG, "steps": 20, "encoder": "resnet"})


def test_inputs_are_recorded_and_checked_on_resume(tmp_path):
    run = started(tmp_path / "run", inputs={"data": "abc"})
    assert run.status()["inputs"] == {"data": "abc"}
    RunDir.open(run.path, "pretrain", CONFIG, inputs={"data": "abc"})
    with pytest.raises(ConfigError, match="started on data abc, not xyz"):
        RunDir.open(run.path, "pretrain", CONFIG, inputs={"data": "xyz"})


def test_failure_is_recorded_with_its_reason(tmp_path):
    run = RunDir.open(tmp_path / "run", "finetune", CONFIG)
    with pytest.raises(ValueError), run:
        raise ValueError("before start")  # not started: nothing written
    assert not run.path.exists()
    run.start(0)
    with pytest.raises(KeyboardInterrupt), run:
        raise KeyboardInterrupt
    assert run.status()["state"] == "failed" and "interrupted" in run.status()["message"]
    with pytest.raises(RuntimeError), run:
        raise RuntimeError("disk full")
    assert run.status()["message"] == "RuntimeError: disk full"


def test_temp_files_of_killed_writes_are_cleaned_on_resume(tmp_path):
    run = started(tmp_path / "run")
    run.save_checkpoint(5, {"x": torch.zeros(2)}, "pretrain")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    dead_pid = int(dead.stdout)
    litter = [
        run.checkpoints_dir / f".ckpt_00000010.pt.{dead_pid}.tmp",
        run.path / f".status.json.{dead_pid}.tmp",
        run.path / f".config.yaml.{dead_pid}.tmp",
    ]
    for path in litter:
        path.write_bytes(b"half a checkpoint")
    alive = run.path / f".metrics.jsonl.{os.getppid()}.tmp"  # a live writer's file stays
    alive.write_text("x")
    user = run.path / "my.tmp"  # not our pattern: stays
    user.write_text("x")
    resumed = RunDir.open(run.path, "pretrain", CONFIG)
    assert not any(p.exists() for p in litter)
    assert (
        alive.exists() and user.exists() and resumed.latest_checkpoint().name == "ckpt_00000005.pt"
    )
    assert clean_temp_files(run.path) == []


def test_newest_unreadable_checkpoint_falls_back_with_a_warning(tmp_path):
    run = started(tmp_path / "run", keep_checkpoints=3)
    run.save_checkpoint(5, {"x": torch.ones(2)}, "pretrain")
    newest = run.save_checkpoint(10, {"x": torch.zeros(2)}, "pretrain")
    newest.write_bytes(newest.read_bytes()[:100])  # torn
    with pytest.warns(UserWarning, match=r"ckpt_00000010.pt.*resuming from ckpt_00000005.pt"):
        payload = run.load_latest("pretrain")
    assert payload["step"] == 5
    (run.checkpoints_dir / "ckpt_00000005.pt").write_bytes(b"junk")
    with pytest.raises(Exception, match="ckpt_00000010.pt"):
        run.load_latest("pretrain")


def test_unfinished_runs_never_count_as_results(tmp_path):
    run = started(tmp_path / "run", kind="finetune")
    with pytest.raises(UnfinishedRunError, match="unfinished run.*--allow-unfinished"):
        require_finished(run.path, "report")
    assert require_finished(run.path, "report", allow_unfinished=True) is False
    run.finish(10)
    with pytest.raises(UnfinishedRunError, match="model.pt is missing"):
        require_finished(run.path, "report")  # finished only on positive evidence
    (run.path / "model.pt").write_bytes(b"model")
    assert require_finished(run.path, "report") is True


def test_finetuning_from_an_unfinished_pretraining_run_needs_a_named_checkpoint(tmp_path):
    run = started(tmp_path / "pre")
    ckpt = run.save_checkpoint(5, {"x": torch.ones(1)}, "pretrain")
    with pytest.raises(ConfigError, match=r"pretrained: .*never finished.*ckpt_00000005.pt"):
        pretrained_source(run.path)
    assert pretrained_source(ckpt) == ckpt  # named explicitly: the user's choice
    (run.path / "model.pt").write_bytes(b"m")
    run.finish(10)
    assert pretrained_source(run.path) == run.path / "model.pt"
    # a finetuning agent is a source too (a study's positive control), once finished
    agent = started(tmp_path / "ft", kind="finetune")
    with pytest.raises(ConfigError, match="never finished"):
        pretrained_source(agent.path)
    other = started(tmp_path / "collected", kind="collect")
    with pytest.raises(ConfigError, match="a collect run, not a pretraining run"):
        pretrained_source(other.path)
    with pytest.raises(ConfigError, match="no such"):
        pretrained_source(tmp_path / "typo")


def test_finetune_run_readers(tmp_path):
    run = started(tmp_path / "ft", kind="finetune", config={"game": "Pong"})
    with run.metrics_logger() as log:
        log.log(5, **{"episode/return": 3.0, "episode/clipped_return": 1.0, "episode/length": 9})
        log.log(10, **{"losses/rl": 0.5})
    atomic_write_text(run.path / "eval.json", json.dumps({"mean": 2.0}))
    reader = FinetuneRun(run.path)
    assert reader.evaluation == {"mean": 2.0} and reader.transfer is None
    assert reader.config == {"game": "Pong"} and len(reader.metrics()) == 2
    assert reader.episodes().to_dict("records") == [
        {"step": 5, "return": 3.0, "clipped_return": 1.0, "length": 9.0}
    ]
    assert "running" in repr(reader)


@pytest.mark.parametrize(
    "cls,key,value,message",
    [
        (PretrainConfig, "steps", 0, "steps: must be positive, got 0"),
        (PretrainConfig, "steps", -5, "steps: must be positive"),
        (PretrainConfig, "batch_size", 0, "batch_size: must be positive"),
        (PretrainConfig, "checkpoint_every", 0, "checkpoint_every: must be positive"),
        (PretrainConfig, "lr", -1.0, "lr: must be positive"),
        (PretrainConfig, "lr", float("nan"), "lr: must be a finite number"),
        (FinetuneConfig, "seed", -1, "seed: must be >= 0"),
        (FinetuneConfig, "lr", float("inf"), "lr: must be a finite number"),
        (FinetuneConfig, "log_every", 0, "log_every: must be positive"),
    ],
)
def test_non_positive_counts_and_rates_are_config_errors_naming_the_key(cls, key, value, message):
    with pytest.raises(ConfigError, match=message):
        build_config(cls, {key: value})


def test_every_default_config_passes_the_range_checks():
    for cls in (PretrainConfig, FinetuneConfig):
        build_config(cls, to_dict(cls()))


def test_a_run_records_the_code_and_machine_that_made_it_and_each_change(tmp_path, monkeypatch):
    import sgi_lab.base.files as files_module

    repo = str(Path(files_module.__file__).resolve().parents[2])
    head = subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    run = started(tmp_path / "run")
    (entry,) = run.status()["provenance"]
    assert entry["step"] == 0 and entry["commit"] == (head or None)
    assert isinstance(entry["dirty"], bool) == bool(head)
    assert entry["cpu"] == files_module.cpu_model() and entry["torch"] == torch.__version__
    assert entry["sgi_lab"] and entry["python"] == sys.version.split()[0]

    run.fail("stopped at step 4", step=4)
    resumed = RunDir.open(run.path, "pretrain", CONFIG)
    resumed.start(4)
    assert len(resumed.status()["provenance"]) == 1  # same code, same machine: one entry

    real = files_module.provenance
    monkeypatch.setattr(files_module, "provenance", lambda: {**real(), "cpu": "Another CPU"})
    moved = RunDir.open(run.path, "pretrain", CONFIG)
    moved.start(7)
    first, second = moved.status()["provenance"]
    assert first == entry and second["step"] == 7 and second["cpu"] == "Another CPU"


def test_provenance_without_a_clone_has_no_commit(tmp_path, monkeypatch):
    import sgi_lab.base.files as files_module

    monkeypatch.setattr(files_module, "_git", lambda root, *args: None)
    info = files_module.provenance()
    assert info["commit"] is None and info["dirty"] is None and info["torch"] == torch.__version__


def test_provenance_never_writes_the_clones_git_index(tmp_path):
    """A plain ``git status`` refreshes .git/index after a file's stat changed; ours must not
    (the clone is the user's, and their own git command may hold the index lock)."""
    import sgi_lab.base.files as files_module

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.txt").write_text("a")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    index = tmp_path / ".git" / "index"
    before = index.stat().st_mtime_ns
    os.utime(tmp_path / "a.txt", ns=(before + 10**9, before + 10**9))  # stale stat info
    assert files_module._git(tmp_path, "status", "--porcelain", "--untracked-files=no") == ""
    assert index.stat().st_mtime_ns == before
    git("status", "--porcelain")  # the check is able to fail: plain git status writes it
    assert index.stat().st_mtime_ns != before
