"""`sgi-lab status`: how far runs have got; "did you mean" for mistyped games, params, folders."""

from __future__ import annotations

import json
import os
import time

import pytest

from sgi_lab.base.files import FolderLock
from sgi_lab.config import ConfigError, read_params
from sgi_lab.envs.games import UnknownGameError, canonical_game
from sgi_lab.launch import status_command
from sgi_lab.launch.cli import main


def _run(folder, state, step, steps, rows, kind="pretrain", age_s=5.0, **extra):
    folder.mkdir(parents=True)
    updated = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - age_s))
    record = {"state": state, "kind": kind, "step": step, "updated": updated, **extra}
    (folder / "status.json").write_text(json.dumps(record))
    (folder / "config.yaml").write_text(f"steps: {steps}\nbatch_size: 32\n")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    then = time.time() - age_s  # the run last wrote both then
    os.utime(folder / "metrics.jsonl", (then, then))
    return folder


@pytest.fixture
def runs(tmp_path):
    """Two running runs (their writers hold their folders' locks: this process stands in for
    them) and a finished one."""
    root = tmp_path / "outputs"
    pretrain = _run(
        root / "runs" / "pretrain__sgi_m__Pong__s0",
        "running",
        1000,
        5000,
        [
            {"step": 900, "losses/total": 2.5, "charts/samples_per_s": 3200.0},
            {"step": 1000, "losses/total": 2.0, "charts/samples_per_s": 6400.0},
        ],
    )
    finetune = _run(
        root / "runs" / "finetune__x" / "Pong__s0",
        "running",
        40_000,
        100_000,
        [{"step": 40_000, "episode/return": -19.0, "charts/sps": 20.0}],
        kind="finetune",
        age_s=3 * 3600,
    )
    done = _run(root / "demo" / "pretrain", "finished", 200, 200, [{"step": 200}])
    (done / "model.pt").write_bytes(b"final model")
    (done / "checkpoints").mkdir()
    (done / "checkpoints" / "status.json").write_text(json.dumps({"state": "running"}))
    locks = [FolderLock(pretrain, "a pretrain run"), FolderLock(finetune, "a finetune run")]
    yield root
    for lock in locks:
        lock.release()


def test_run_progress_rate_eta_and_metrics(runs):
    p = status_command.run_progress(runs / "runs" / "pretrain__sgi_m__Pong__s0")
    assert (p["stage"], p["state"], p["step"], p["steps"]) == ("pretrain", "running", 1000, 5000)
    assert p["rate"] == pytest.approx(200.0)  # 6400 samples/s at batch 32, the newest row
    assert p["eta_s"] == pytest.approx(20.0)  # 4000 steps left at 200 steps/s
    assert p["metrics"] == {"losses/total": 2.0} and not p["stale"]
    silent = status_command.run_progress(runs / "runs" / "finetune__x" / "Pong__s0")
    assert silent["stale"] and silent["eta_s"] == pytest.approx(3000.0)
    assert status_command.run_progress(runs / "demo" / "pretrain")["eta_s"] is None


def test_a_running_run_that_logs_between_checkpoints_is_not_silent(tmp_path):
    """A MinAtar finetuning run checkpoints every 10,000 steps: its status.json says step 0 for
    its first half hour while metrics.jsonl logs every 1,000 steps. The logged step is its
    progress, and a fresh log is a sign of life."""
    folder = _run(
        tmp_path / "naive__sgi" / "minatar-breakout__s0",
        "running",
        0,
        10_000,
        [{"step": 6000, "charts/sps": 5.0}, {"step": 6700, "episode/return": 5.0}],
        kind="finetune",
        age_s=30 * 60,
    )
    os.utime(folder / "metrics.jsonl")  # logged just now
    lock = FolderLock(folder, "a finetune run")
    try:
        p = status_command.run_progress(folder)
    finally:
        lock.release()
    assert (p["state"], p["step"]) == ("running", 6700)
    assert not p["stale"] and p["age_s"] < 60
    assert p["eta_s"] == pytest.approx(3300 / 5.0)


def test_status_command_lists_every_run(runs, capsys):
    assert main(["status", str(runs)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "stage", "state", "step"]
    pretrain = next(line for line in lines if "pretrain__sgi_m" in line)
    assert "1,000/5,000 (20%)" in pretrain and "200/s" in pretrain and "20s" in pretrain
    assert "total 2" in pretrain
    finetune = next(line for line in lines if "finetune__x" in line)
    # Silent for 3 hours, but its process holds the folder's lock: alive, perhaps stuck.
    assert "silent: stuck?" in finetune and "50m00s" in finetune and "return -19" in finetune
    assert "demo/pretrain " in out and "checkpoints" not in out
    assert "3 run(s); 1 running; 1 silent" in out

    assert main(["status", str(runs), "--state", "finished"]) == 0
    assert "pretrain__sgi_m" not in capsys.readouterr().out


def test_info_on_a_run_folder_shows_its_status(runs, capsys):
    assert main(["info", str(runs / "demo" / "pretrain")]) == 0
    out = capsys.readouterr().out
    assert "is a run folder, not a store" in out and "finished" in out
    assert "manifest" not in out


def test_did_you_mean_for_folders_games_and_params(runs, tmp_path, capsys):
    assert main(["status", str(runs / "runs" / "pretrain__sgi_m__Pong__s1")]) == 2
    err = capsys.readouterr().err
    assert "no such folder; did you mean" in err and "pretrain__sgi_m__Pong__s0" in err
    assert main(["report", str(runs / "rnus" / "finetune__x")]) == 2
    assert f"did you mean {runs / 'runs'}?" in capsys.readouterr().err
    assert main(["evaluate", str(runs / "runs" / "finetune__y")]) == 2
    assert "finetune__x" in capsys.readouterr().err

    with pytest.raises(UnknownGameError, match="did you mean MsPacman"):
        canonical_game("MsPackman")
    params = tmp_path / "params"
    params.mkdir()
    (params / "sgi_m.yaml").write_text("name: sgi_m\n")
    with pytest.raises(ConfigError, match="no such params file; did you mean .*sgi_m.yaml"):
        read_params(params / "sgi_n.yaml")


# -- static figures (PNG/SVG/PDF through kaleido) ----------------------------------------------


def test_figure_formats_are_checked_and_refused_with_what_to_install(tmp_path, monkeypatch, capsys):
    import plotly.graph_objects as go

    from sgi_lab import notebook
    from sgi_lab.launch import notebook_runner

    assert notebook.figure_formats("PNG, .svg") == ["png", "svg"]
    monkeypatch.setenv(notebook.FIGURE_FORMATS_ENV, "pdf")
    assert notebook.figure_formats() == ["pdf"]
    with pytest.raises(ValueError, match=r"\['bmp'\] unknown"):
        notebook.figure_formats("png,bmp")
    for module in (notebook, notebook_runner):  # save_figure's, and sgi-lab run's check
        monkeypatch.setattr(module, "static_export_problem", lambda: "kaleido is not installed")
    with pytest.raises(RuntimeError, match="cannot write pdf figures: kaleido is not installed"):
        notebook.save_figure(go.Figure(), tmp_path, "f")
    assert (tmp_path / "figures" / "f.html").exists()  # the HTML is written first
    assert main(["run", "datasets", "--figure-formats", "png", "--out-root", str(tmp_path)]) == 2
    assert "--figure-formats png: kaleido is not installed" in capsys.readouterr().err
    assert not list(tmp_path.glob("datasets*"))  # refused before anything ran


@pytest.mark.smoke
def test_save_figure_writes_static_images_offline(tmp_path):
    """kaleido drives the local Chromium; nothing is fetched (the tier has no network)."""
    import plotly.graph_objects as go

    from sgi_lab import notebook

    problem = notebook.static_export_problem()
    if problem:
        pytest.skip(problem)
    fig = go.Figure(go.Scatter(y=[1, 3, 2])).update_layout(title="a figure")
    notebook.save_figure(fig, tmp_path, "curve", formats="svg,png")
    svg = (tmp_path / "figures" / "curve.svg").read_text()
    assert svg.startswith("<svg") and "a figure" in svg
    assert (tmp_path / "figures" / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- what status says is true -------------------------------------------------------------------


def test_status_tells_dead_torn_and_modelless_runs_as_interrupted(runs, tmp_path, capsys):
    # Killed (kill -9) a minute ago: says running, but no process holds its lock.
    dead = _run(runs / "runs" / "dead", "running", 10, 100, [{"step": 10, "charts/sps": 1.0}])
    # Torn status.json beside checkpoints; an empty one; finished without model.pt.
    torn = _run(runs / "runs" / "torn", "running", 20, 100, [])
    (torn / "status.json").write_text('{"state": "runn')
    (torn / "checkpoints").mkdir()
    (torn / "checkpoints" / "ckpt_00000020.pt").write_bytes(b"x")
    empty = _run(runs / "runs" / "empty", "running", 0, 100, [])
    (empty / "status.json").write_text("")
    (empty / "checkpoints").mkdir()
    (empty / "checkpoints" / "ckpt_00000030.pt").write_bytes(b"x")
    _run(runs / "runs" / "nomodel", "finished", 100, 100, [])
    before = {p: p.stat().st_mtime_ns for p in runs.rglob("*")}
    assert main(["status", str(runs), "--state", "interrupted"]) == 0
    out = capsys.readouterr().out
    shown = {line.split()[0]: line for line in out.splitlines()[1:] if line.startswith("runs/")}
    assert set(shown) == {"runs/dead", "runs/torn", "runs/empty", "runs/nomodel"}, out
    assert "process is gone" in shown["runs/dead"]
    assert "20/100" in shown["runs/torn"] and "torn" in shown["runs/torn"]
    assert "30/100" in shown["runs/empty"]
    assert "model.pt is missing" in shown["runs/nomodel"]
    p = status_command.run_progress(dead)
    assert p["state"] == "interrupted" and p["eta_s"] is None
    # The live runs are still running; the finished one with its model is finished.
    assert (
        status_command.run_progress(runs / "runs" / "pretrain__sgi_m__Pong__s0")["state"]
        == "running"
    )
    assert status_command.run_progress(runs / "demo" / "pretrain")["state"] == "finished"
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*")} == before  # status only reads


def test_status_follows_symlinked_folders_without_looping(runs, tmp_path, capsys):
    view = tmp_path / "view"
    view.mkdir()
    (view / "linked").symlink_to(runs / "runs")
    (runs / "runs" / "loop").symlink_to(runs)  # a link back up: no endless walk
    assert main(["status", str(view)]) == 0
    out = capsys.readouterr().out
    assert "linked/pretrain__sgi_m__Pong__s0" in out and "linked/finetune__x" in out, out
    assert out.count("demo/pretrain") == 1 and "3 run(s)" in out, out  # each run once


def test_one_bad_status_is_named_and_the_others_listed(runs, capsys):
    _run(runs / "runs" / "odd", "running", {"a": 1}, "many", [{"step": "x"}])
    bad = _run(runs / "runs" / "bad", "failed", 5, 10, [])
    (bad / "status.json").write_text(
        json.dumps(
            {"state": "failed", "kind": "pretrain", "step": 5, "updated": ["not", "a", "time"]}
        )
    )
    assert main(["status", str(runs)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "runs/odd" in captured.out and "runs/bad" in captured.out
    assert "pretrain__sgi_m" in captured.out


def test_a_finished_finetuning_run_shows_its_evaluation_score(tmp_path, capsys):
    """`sgi-lab status` gives a finished run's score from its eval.json (mean, episodes, the
    normalised score under its name); a run without a readable eval.json shows none."""
    root = tmp_path / "outputs"
    done = _run(root / "ft" / "Pong__s0", "finished", 100, 100, [{"step": 100}], kind="finetune")
    (done / "model.pt").write_bytes(b"final model")
    evaluation = {"mean": -12.5, "episodes": 100, "hns": 0.2166, "normalization": "HNS"}
    (done / "eval.json").write_text(json.dumps({**evaluation, "max_frames": 108_000}))
    capped = _run(root / "ft" / "Pong__s1", "finished", 100, 100, [{"step": 100}], kind="finetune")
    (capped / "model.pt").write_bytes(b"final model")
    smoke = {**evaluation, "episodes": 2, "max_frames": 2_000}  # the demo's capped evaluation
    (capped / "eval.json").write_text(json.dumps(smoke))
    grid = _run(root / "ft" / "breakout", "finished", 100, 100, [{"step": 100}], kind="finetune")
    (grid / "model.pt").write_bytes(b"final model")
    minatar = {
        "mean": 5.5,
        "episodes": 10,
        "normalized_score": 0.5305,
        "normalization": "MinAtar score",
    }
    (grid / "eval.json").write_text(json.dumps(minatar))
    torn = _run(
        root / "ft" / "Seaquest__s0", "finished", 100, 100, [{"step": 100}], kind="finetune"
    )
    (torn / "model.pt").write_bytes(b"final model")
    (torn / "eval.json").write_text('{"mean": ')
    assert status_command.run_progress(done)["evaluation"] == {
        "mean": -12.5,
        "episodes": 100,
        "normalized": 0.2166,
        "normalization": "HNS",
        "caveat": None,  # the paper's protocol: 100 episodes capped at 108,000 frames
    }
    assert status_command.run_progress(torn)["evaluation"] is None
    assert main(["status", str(root)]) == 0
    out = capsys.readouterr().out
    paper = next(line for line in out.splitlines() if "Pong__s0" in line)
    assert "eval -12.5 over 100 episodes, HNS 0.217" in paper and "comparable" not in paper
    line = next(line for line in out.splitlines() if "Pong__s1" in line)
    assert "eval -12.5 over 2 episodes, HNS 0.217 (2 episodes, cap 2,000 frames" in line
    assert "not comparable with the paper" in line
    assert "eval 5.5 over 10 episodes, MinAtar score 0.530" in out
    seaquest = next(line for line in out.splitlines() if "Seaquest" in line)
    assert "eval" not in seaquest


def test_a_run_stopped_cleanly_is_listed_as_stopped_not_failed(tmp_path, capsys):
    """A time limit or SIGTERM ends a run at a checkpoint with state failed and RunStopped's
    message (failure_reason): status says stopped, with how to resume; an error stays failed."""
    from sgi_lab.runs.stopping import RunStopped, failure_reason

    root = tmp_path / "outputs"
    why = failure_reason(RunStopped(1731, "SIGTERM received"))
    _run(root / "stopped", "failed", 1731, 2000, [], message=why)
    _run(
        root / "evaluation", "failed", 2000, 2000, [], message=failure_reason(RunStopped(None, "x"))
    )
    _run(root / "ctrl_c", "failed", 5, 2000, [], message=failure_reason(KeyboardInterrupt()))
    _run(root / "broken", "failed", 10, 2000, [], message="FloatingPointError: loss is nan")
    states = {f.name: status_command.run_progress(f)["state"] for f in root.iterdir()}
    assert states == {
        "stopped": "stopped",
        "evaluation": "stopped",
        "ctrl_c": "stopped",
        "broken": "failed",
    }
    assert main(["status", str(root), "--state", "stopped"]) == 0
    out = capsys.readouterr().out
    shown = {line.split()[0] for line in out.splitlines()[1:] if line.startswith("stopped")}
    assert shown == {"stopped"}, out
    assert "re-run the same command to resume" in out and "broken" not in out
    assert main(["status", str(root), "--state", "failed"]) == 0
    assert "loss is nan" in capsys.readouterr().out


def test_a_run_restored_from_an_archive_is_listed_as_restored_with_its_score(tmp_path, capsys):
    """Finished, no model.pt, and a restored.json whose files are unchanged: ``restored`` (not
    interrupted), with its evaluation; once a restored file changes it is interrupted again."""
    from sgi_lab.runs.status import RESTORED_FILE, file_sha256

    root = tmp_path / "outputs"
    run = _run(root / "ft" / "minatar-breakout__s0", "finished", 100, 100, [], kind="finetune")
    evaluation = {"mean": 3.0, "episodes": 30, "normalized_score": 0.28}
    (run / "eval.json").write_text(json.dumps(evaluation | {"normalization": "MinAtar score"}))
    files = {n: file_sha256(run / n) for n in ("status.json", "eval.json")}
    (run / RESTORED_FILE).write_text(json.dumps({"files": files}))
    progress = status_command.run_progress(run)
    assert progress["state"] == "restored" and progress["error"] is None
    assert progress["evaluation"]["normalized"] == 0.28
    assert main(["status", str(root), "--state", "restored"]) == 0
    assert "restored  100/100 (100%)" in (out := capsys.readouterr().out)
    assert "eval 3 over 30 episodes, MinAtar score 0.280" in out
    (run / "eval.json").write_text(json.dumps(evaluation | {"mean": 9.0}))
    assert status_command.run_progress(run)["state"] == "interrupted"


def test_each_experiment_folder_gets_its_tasks_and_whether_its_driver_lives(tmp_path, capsys):
    """An experiment's line: its tasks by state from its driver's record, and the driver alive
    (holding the folder's lock: this process stands in for it), killed (tasks running, no
    lock) or not running; a report's copy (no tasks) gets none."""
    from sgi_lab.experiments.scheduler import STATES
    from sgi_lab.experiments.state import STATE_FILE

    assert status_command.EXPERIMENT_RECORD == STATE_FILE
    assert set(status_command.TASK_STATES) == set(STATES)
    root = tmp_path / "outputs"

    def experiment(name, states):
        folder = root / "experiments" / name
        _run(folder / "pretrain" / "a", "finished", 10, 10, [])
        tasks = {f"finetune/t{i}": {"kind": "finetune", "state": s} for i, s in enumerate(states)}
        (folder / STATE_FILE).write_text(json.dumps({"name": name, "tasks": tasks}))
        return folder

    live = experiment("live", ["pending", "done", "running", "done"])
    experiment("killed", ["running", "failed"])
    experiment("stopped", ["pending", "done"])
    copy = root / "results" / "live"
    copy.mkdir(parents=True)
    (copy / STATE_FILE).write_text(json.dumps({"name": "live", "tasks": {}}))
    lock = FolderLock(live, "the experiment 'live'")
    try:
        assert main(["status", str(root)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert (
            f"experiment live: 4 tasks: 2 done, 1 running, 1 pending; its driver running (PID {os.getpid()})"
            in out
        )
        assert (
            "experiment killed: 2 tasks: 1 running, 1 failed; no driver holds it (killed?): re-run its command to resume"
            in out
        )
        assert "experiment stopped: 2 tasks: 1 done, 1 pending; no driver running" in out
        assert sum(line.startswith("experiment live") for line in out) == 1  # not the copy
        assert main(["status", str(live)]) == 0  # the experiment folder itself
        assert capsys.readouterr().out.splitlines()[-1].startswith("experiment live: 4 tasks")
    finally:
        lock.release()
    fresh = tmp_path / "fresh"  # an experiment whose first task has not begun: no run folder
    fresh.mkdir()
    (fresh / STATE_FILE).write_text(json.dumps({"name": "fresh", "tasks": {"data/x": {}}}))
    assert main(["status", str(fresh)]) == 0
    out = capsys.readouterr().out
    assert "no run folders" in out and "experiment fresh: 1 tasks: 1 pending; no driver" in out
