"""Run folders kept at a storage URI (sgi_lab.experiments.storage, ``sgi-lab experiment --storage``):
the push/pull round trip on ``memory://`` and ``file://``, one task run in a scratch folder,
and (slow) the smoke experiment through a ``file://`` storage, killed and resumed from it, and
on a local Ray."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import kill_once_a_pretraining_run_finishes, run_mtimes

from sgi_lab import experiments as ex
from sgi_lab.experiments.storage import RunStorage, run_in_scratch, scratch_root

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "params" / "experiments" / "smoke.yaml"


def _run_folder(path: Path) -> Path:
    (path / "checkpoints").mkdir(parents=True)
    (path / "checkpoints" / "ckpt_00000002.pt").write_bytes(b"\x00ckpt")
    (path / "model.pt").write_bytes(b"\x00\x01model")
    (path / "status.json").write_text(json.dumps({"state": "finished"}))
    return path


def _tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_push_pull_round_trip(tmp_path, scheme):
    uri = f"memory://rt-{tmp_path.name}" if scheme == "memory" else (tmp_path / "store").as_uri()
    storage = RunStorage(uri)
    run = _run_folder(tmp_path / "local" / "sgi_r__Pong")
    pushed = storage.push(run, "pretrain/sgi_r__Pong")
    assert pushed[-1] == "status.json"  # the finished mark arrives last
    assert storage.exists("pretrain/sgi_r__Pong/model.pt")
    assert not storage.exists("pretrain/sgi_r__Breakout")
    assert storage.read_json("pretrain/sgi_r__Pong/status.json") == {"state": "finished"}
    assert storage.read_json("pretrain/sgi_r__Pong/missing.json") is None

    back = tmp_path / "back"
    storage.pull("pretrain/sgi_r__Pong", back / "all")
    assert _tree(back / "all") == _tree(run)
    storage.pull("pretrain/sgi_r__Pong", back / "light", exclude=("checkpoints",))
    assert sorted(_tree(back / "light")) == ["model.pt", "status.json"]
    assert storage.pull("pretrain/nothing", back / "none") == []

    # A push mirrors the folder: a pruned checkpoint is gone from the storage too.
    (run / "checkpoints" / "ckpt_00000002.pt").unlink()
    (run / "checkpoints" / "ckpt_00000004.pt").write_bytes(b"new")
    storage.push(run, "pretrain/sgi_r__Pong")
    assert storage.files("pretrain/sgi_r__Pong") == [
        "checkpoints/ckpt_00000004.pt",
        "model.pt",
        "status.json",
    ]
    storage.write_text("experiment.json", '{"counts": {}}')
    assert storage.read_json("experiment.json") == {"counts": {}}
    if scheme == "file":
        assert (tmp_path / "store" / "pretrain" / "sgi_r__Pong" / "model.pt").exists()


def test_storage_plan_pulls_only_what_a_task_needs(tmp_path):
    graph = ex.expand(ex.load_experiment(SMOKE), tmp_path / "smoke")
    uri = "memory://plan"
    plan = ex.storage_plan(graph, graph.task("pretrain/sgi_r__Pong"), uri)
    assert plan["inputs"] == [("params", ()), ("data/random__Pong", ())]
    assert plan["outputs"] == ["pretrain/sgi_r__Pong"]
    assert plan["log"] == "logs/pretrain__sgi_r__Pong.log"
    plan = ex.storage_plan(graph, graph.task("finetune/reduced_lr__sgi_r"), uri)
    assert plan["inputs"][1:] == [
        ("pretrain/sgi_r__Pong", ("checkpoints",)),
        ("pretrain/sgi_r__Breakout", ("checkpoints",)),
    ]
    # Its agents' run folders, not the shared population folder (parts of a population split
    # by max_agents push only their own agents).
    assert plan["outputs"] == [
        "finetune/reduced_lr__sgi_r/Pong__s0",
        "finetune/reduced_lr__sgi_r/Breakout__s0",
    ]
    plan = ex.storage_plan(graph, graph.task("data/random__Pong"), uri)
    assert plan["outputs"] == ["data/random__Pong", "data/random__Pong.partial"]


def test_a_task_runs_in_scratch_and_pushes_its_folder_even_when_it_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("SGI_LAB_SCRATCH", str(tmp_path / "scratch"))
    storage = RunStorage((tmp_path / "store").as_uri())
    _run_folder(tmp_path / "src")
    storage.push(tmp_path / "src", "pretrain/a__Pong")
    storage.write_text("params/finetune__f.yaml", "name: f\n")
    out = tmp_path / "exp"  # the driver's folder: the worker never writes there
    seen = {}

    def fake_run_command(argv, log, threads, cwd=None):
        folder = Path(argv[argv.index("--out") + 1])
        pretrained = Path(argv[argv.index("--pretrained") + 1])
        seen["inputs"] = sorted(_tree(pretrained))
        seen["params"] = Path(argv[argv.index("--params") + 1]).read_text()
        seen["resumed"] = (folder / "checkpoints" / "ckpt_1.pt").exists()
        (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
        (folder / "checkpoints" / "ckpt_1.pt").write_bytes(b"partial")
        (folder / "status.json").write_text('{"state": "failed"}')  # as a run that failed
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        Path(log).write_text(Path(log).read_text() + "boom\n" if Path(log).exists() else "boom\n")
        return {"returncode": 1, "seconds": 0.1, "tail": "boom", "argv": argv}

    argv = ["finetune", "--params", str(out / "params" / "finetune__f.yaml")]
    argv += ["--pretrained", str(out / "pretrain" / "a__Pong"), "--out", str(out / "finetune/f")]
    plan = {
        "uri": storage.uri,
        "out": str(out),
        "task": "finetune/f",
        "inputs": [("params", ()), ("pretrain/a__Pong", ("checkpoints",))],
        "outputs": ["finetune/f"],
        "log": "logs/finetune__f.log",
    }
    result = run_in_scratch(argv, 1, None, plan, fake_run_command)
    assert result["returncode"] == 1
    assert not any(str(out) in a for a in result["argv"])
    assert seen == {"inputs": ["model.pt", "status.json"], "params": "name: f\n", "resumed": False}
    assert storage.files("finetune/f") == ["checkpoints/ckpt_1.pt", "status.json"]  # partial
    assert not out.exists() and not list((tmp_path / "scratch").rglob("*.pt"))
    # A retry (on any machine) starts from the pushed checkpoint; the log accumulates.
    run_in_scratch(argv, 1, None, plan, fake_run_command)
    assert seen["resumed"]
    assert RunStorage(storage.uri).fs.cat_file(storage.path(plan["log"])) == b"boom\nboom\n"


def test_a_push_cut_off_anywhere_keeps_a_checkpoint_in_the_storage(tmp_path, monkeypatch):
    storage = RunStorage((tmp_path / "store").as_uri())
    storage.push(_run_folder(tmp_path / "v1"), "pretrain/a")  # ckpt 2, finished
    v2 = _run_folder(tmp_path / "v2")  # the run went on: ckpt 4, ckpt 2 pruned
    (v2 / "checkpoints" / "ckpt_00000002.pt").rename(v2 / "checkpoints" / "ckpt_00000004.pt")
    put = storage.fs.put_file
    for cut in ("ckpt_00000004.pt", "model.pt", "status.json"):

        def cut_off(source, target, cut=cut, **kwargs):
            if target.endswith(cut):
                raise OSError("worker killed")
            return put(source, target, **kwargs)

        monkeypatch.setattr(storage.fs, "put_file", cut_off)
        with pytest.raises(OSError):
            storage.push(v2, "pretrain/a")
        kept = [f for f in storage.files("pretrain/a") if f.startswith("checkpoints/")]
        assert kept, cut  # the old checkpoint goes only once the new one is in
        assert storage.read_json("pretrain/a/status.json") == {"state": "finished"}
        monkeypatch.setattr(storage.fs, "put_file", put)
        storage.push(_run_folder(tmp_path / f"again-{cut}"), "pretrain/a")  # back to v1
    storage.push(v2, "pretrain/a")
    assert storage.files("pretrain/a") == [
        "checkpoints/ckpt_00000004.pt",
        "model.pt",
        "status.json",
    ]


def test_a_folder_whose_first_push_was_cut_off_is_started_afresh(tmp_path, monkeypatch):
    # A worker killed mid-way through a run's first push left a checkpoint but no status.json:
    # the run would refuse such a folder ("not an sgi-lab run"), so the task starts afresh.
    monkeypatch.setenv("SGI_LAB_SCRATCH", str(tmp_path / "scratch"))
    storage = RunStorage((tmp_path / "store").as_uri())
    storage.write_text("pretrain/a/checkpoints/ckpt_00000002.pt", "cut off")
    storage.write_text("pretrain/b/checkpoints/ckpt_00000002.pt", "pushed whole")
    storage.write_text("pretrain/b/status.json", '{"state": "failed"}')
    out = tmp_path / "exp"
    seen = {}

    def fake_run_command(argv, log, threads, cwd=None):
        folder = Path(argv[argv.index("--out") + 1])
        seen[folder.name] = sorted(_tree(folder)) if folder.exists() else None
        _run_folder(tmp_path / "made" / folder.name)
        shutil.copytree(tmp_path / "made" / folder.name, folder, dirs_exist_ok=True)
        return {"returncode": 0, "seconds": 0.1, "tail": ""}

    for name in ("a", "b"):
        plan = {"uri": storage.uri, "out": str(out), "task": f"pretrain/{name}", "inputs": []}
        plan |= {"outputs": [f"pretrain/{name}"], "log": f"logs/{name}.log"}
        run_in_scratch(["pretrain", "--out", str(out / "pretrain" / name)], 1, None, plan,
                       fake_run_command)  # fmt: skip
    assert seen == {"a": None, "b": ["checkpoints/ckpt_00000002.pt", "status.json"]}
    assert b"a push cut off" in storage.fs.cat_file(storage.path("logs/a.log"))
    assert storage.read_json("pretrain/a/status.json") == {"state": "finished"}  # replaced
    assert storage.fs.cat_file(storage.path("pretrain/a/checkpoints/ckpt_00000002.pt")) == (
        b"\x00ckpt"
    )


def test_finished_tasks_are_read_from_the_storage(tmp_path):
    # Runs finished in the storage (by workers elsewhere) are skipped; nothing runs.
    graph = ex.expand(ex.load_experiment(SMOKE), tmp_path / "exp")
    storage = RunStorage(f"memory://done-{tmp_path.name}")
    finished = json.dumps({"state": "finished"})
    for task in graph.tasks:
        name = task.folder.relative_to(graph.out).as_posix()
        if task.kind == "data":
            storage.write_text(f"{name}/manifest.json", "{}")
        elif task.kind == "pretrain":
            storage.write_text(f"{name}/model.pt", "")
            storage.write_text(f"{name}/status.json", finished)
        for folder in task.agent_folders:
            agent = folder.relative_to(graph.out).as_posix()
            storage.write_text(f"{agent}/eval.json", "{}")
            storage.write_text(f"{agent}/checkpoints/ckpt_00000020.pt", "")
            if folder != task.agent_folders[-1] or task.id != "finetune/sgi_none":
                storage.write_text(f"{agent}/status.json", finished)
    assert not ex.stored_task_done(graph, graph.task("finetune/sgi_none"), storage)
    storage.write_text(f"{agent}/status.json", finished)
    events = []
    summary = ex.run_graph(
        graph,
        progress=False,
        storage=storage.uri,
        on_event=lambda e, t, i: events.append((e, t.id)),
    )
    skipped = {t for e, t in events if e == "skipped"}
    assert skipped == {t.id for t in graph.tasks if t.kind != "report"}
    assert not {e for e, t in events if e == "started"}
    assert storage.read_json("experiment.json")["counts"] == summary["counts"]
    assert storage.exists("experiment.yaml") and storage.files("params")
    # The report reads a mirror of the finetuning runs (without checkpoints) in --out.
    mirrored = sorted(p.relative_to(graph.out).as_posix() for p in graph.out.rglob("eval.json"))
    assert len(mirrored) == 4 and not list(graph.out.rglob("*.pt"))
    assert not (graph.out / "data").exists() and not (graph.out / "pretrain").exists()


def test_the_storage_cannot_be_the_experiment_folder(tmp_path):
    graph = ex.expand(ex.load_experiment(SMOKE), tmp_path / "exp")
    with pytest.raises(ValueError, match="is --out itself"):
        ex.run_graph(graph, progress=False, storage=(tmp_path / "exp").as_uri())


def test_cli_takes_a_storage_uri(tmp_path):
    from sgi_lab.launch.cli import build_parser

    args = build_parser().parse_args(
        ["experiment", str(SMOKE), "--out", str(tmp_path), "--storage", "s3://bucket/exp"]
    )
    assert args.storage == "s3://bucket/exp"


# -- end to end (slow) --------------------------------------------------------------------------


@pytest.mark.slow
def test_smoke_experiment_through_a_storage_uri_killed_and_resumed(tmp_path, monkeypatch):
    store, scratch = tmp_path / "store", tmp_path / "scratch"
    env = {**os.environ, "SGI_LAB_SCRATCH": str(scratch)}
    first = tmp_path / "first"
    cmd = [sys.executable, "-m", "sgi_lab.launch.cli", "experiment", str(SMOKE), "--out"]
    cmd += [str(first), "--storage", store.as_uri(), "--max-parallel", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    kill_once_a_pretraining_run_finishes(proc, store)  # run folders live in the storage
    before = run_mtimes(store)
    assert any(k.startswith("data/") for k in before)
    assert not (first / "data").exists() and not (first / "pretrain").exists()

    # Resumed from another folder: what finished is read from the storage, not from --out.
    out = tmp_path / "second"
    events = []
    monkeypatch.setenv("SGI_LAB_SCRATCH", str(scratch))
    summary = ex.run_experiment(
        SMOKE,
        out,
        max_parallel=2,
        progress=False,
        storage=store.as_uri(),
        on_event=lambda e, t, i: events.append((e, t.id)),
    )
    assert summary["counts"]["done"] == 7, summary
    skipped = {t for e, t in events if e == "skipped"}
    assert {"data/random__Pong", "data/random__Breakout"} <= skipped
    after = run_mtimes(store)
    for key, mtime in before.items():  # finished tasks were not run again
        if "/".join(key.split("/")[:2]) in skipped:
            assert after[key] == mtime, key
    # Every run folder is in the storage; workers wrote nothing under --out but the mirror.
    graph = ex.expand(ex.load_experiment(SMOKE), out)
    storage = RunStorage(store.as_uri())
    assert all(ex.stored_task_done(graph, t, storage) for t in graph.tasks if t.kind != "report")
    assert (store / "experiment.json").exists() and (store / "report.html").exists()
    assert not (out / "data").exists() and not (out / "pretrain").exists()
    ran = {t for e, t in events if e == "started"}
    assert ran and not any(  # each task ran in its own scratch folder, removed afterwards
        (scratch_root(store.as_uri()) / t.replace("/", "__")).exists() for t in ran
    )
    # The report, built from the mirror in --out.
    import pandas as pd

    per_game = pd.read_csv(out / "results.csv")
    assert set(per_game["method"]) == {"reduced_lr@sgi_r", "sgi_none"}
    assert (out / "report.html").exists()
    agents = sorted(p.parent.name for p in (out / "finetune").rglob("eval.json"))
    assert agents == ["Breakout__s0", "Breakout__s0", "Pong__s0", "Pong__s0"]
    assert not list((out / "finetune").rglob("checkpoints"))
    state = json.loads((store / "experiment.json").read_text())
    assert state["counts"]["done"] == 7


@pytest.mark.slow
def test_smoke_experiment_on_ray_through_a_storage_uri(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("SGI_LAB_SCRATCH", str(tmp_path / "scratch"))
    store, out = tmp_path / "store", tmp_path / "out"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = ex.run_experiment(
            SMOKE, out, executor="ray", progress=False, storage=store.as_uri()
        )
    finally:
        ray.shutdown()
    assert summary["counts"]["done"] == 7, summary
    graph = ex.expand(ex.load_experiment(SMOKE), out)
    storage = RunStorage(store.as_uri())
    assert all(ex.stored_task_done(graph, t, storage) for t in graph.tasks if t.kind != "report")
    assert (out / "report.html").exists() and not (out / "pretrain").exists()
    assert (out / "logs" / "pretrain__sgi_r__Pong.log").exists()
