"""An experiment's results kept for a fresh clone (sgi_lab.experiments.archive): what an archive
holds and leaves out, a restore into an empty experiment folder (the tasks it completes are done,
what only they read is unneeded), and every refusal: a changed task, a tampered file, a user's
folder, a local file that differs."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sgi_lab import experiments as ex
from sgi_lab.analysis.score_matrices import read_score_matrices
from sgi_lab.base.files import RunFolderError
from sgi_lab.config import ConfigError
from sgi_lab.experiments import archive as archive_module
from sgi_lab.experiments import scheduler
from sgi_lab.experiments.archive import (
    ARCHIVE_FILE,
    RESTORED_FILE,
    archive,
    kept,
    restore,
    restored_files,
)
from sgi_lab.experiments.state import task_done
from sgi_lab.experiments.study_cost import cost_markdown, study_cost
from sgi_lab.launch.cli import main
from sgi_lab.runs.status import UnfinishedRunError, file_sha256, require_finished
from sgi_lab.studies.finetune_study import per_seed_markdown, study_runs

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "params" / "experiments" / "minatar_objectives.yaml"
SCRATCH, SGI = (
    "finetune/sgi_none/part1of4",
    "finetune/reduced_lr__sgi/part1of4",
)  # Asterix + Breakout


def study(out: Path, parameters: dict | None = None) -> ex.Graph:
    return ex.expand(ex.load_experiment(STUDY, parameters), out)


def finish_agents(graph: ex.Graph, task_id: str, base: float) -> None:
    """Hand-made finished agents of a finetuning task (score ``base + 0.1 seed``), with what an
    archive leaves out: weights, a checkpoint, TensorBoard events, the lock."""
    task = graph.task(task_id)
    for folder, (game, seed) in zip(task.agent_folders, task.agents, strict=True):
        score = base + 0.1 * seed
        (folder / "checkpoints").mkdir(parents=True)
        (folder / "checkpoints" / "ckpt_00002500.pt").write_bytes(b"weights")
        (folder / "model.pt").write_bytes(b"weights")
        (folder / "events.out.tfevents.1.vm.1.0").write_bytes(b"events")
        (folder / ".sgi-lab.lock").write_text("")
        status = {"state": "finished", "kind": "finetune", "step": 10000}
        (folder / "status.json").write_text(json.dumps(status))
        (folder / "config.yaml").write_text(f"game: {game}\nseed: {seed}\nsteps: 10000\n")
        evaluation = {"game": game, "mean": 10 * score, "scores": [10 * score]}
        evaluation |= {"normalized_score": score, "normalization": "MinAtar score"}
        (folder / "eval.json").write_text(json.dumps(evaluation))
        rows = [{"step": s, "episode/return": s / 1000 * score} for s in (1500, 9500)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def finish_pretraining(graph: ex.Graph, task_id: str) -> None:
    folder = graph.task(task_id).folder
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"weights")
    (folder / "status.json").write_text(json.dumps({"state": "finished", "step": 2000}))
    (folder / "config.yaml").write_text("steps: 2000\n")


@pytest.fixture
def archived(tmp_path):
    """The study with scratch and reduced-lr SGI finished on Asterix + Breakout (and SGI's two
    pretraining runs), archived into ``tmp_path / "archive"``."""
    graph = study(tmp_path / "first")
    graph.out.mkdir(parents=True)
    scheduler.write_inputs(graph, graph.out)  # what run_graph writes first
    finish_agents(graph, SCRATCH, 0.2)
    finish_agents(graph, SGI, 0.4)
    for game in ("asterix", "breakout"):
        finish_pretraining(graph, f"pretrain/sgi__minatar-{game}")
    dest = tmp_path / "archive"
    done = archive(graph, dest)
    assert sorted(done) == sorted(
        [SCRATCH, SGI, "pretrain/sgi__minatar-asterix", "pretrain/sgi__minatar-breakout"]
    )
    return graph, dest


def test_an_archive_keeps_the_results_and_leaves_out_weights_checkpoints_and_events(archived):
    graph, dest = archived
    index = json.loads((dest / ARCHIVE_FILE).read_text())
    assert index["experiment"] == "minatar_objectives"
    names = {Path(rel).name for rel in index["files"]}
    assert names >= {"status.json", "config.yaml", "eval.json", "metrics.jsonl", "experiment.yaml"}
    assert not {"model.pt", ".sgi-lab.lock"} & names
    assert not [r for r in index["files"] if "checkpoints" in r or "tfevents" in r]
    assert sorted(p.name for p in dest.rglob("*.pt")) == []
    agent = "finetune/sgi_none/minatar-breakout__s2"
    assert (dest / agent / "eval.json").read_text() == (graph.out / agent / "eval.json").read_text()
    assert "params/finetune__sgi_none.yaml" in index["files"]  # the archive reads as the study
    assert index["tasks"][SGI]["folders"][0] == "finetune/reduced_lr__sgi/minatar-asterix__s0"
    for rel in ("a/checkpoints/ckpt_1.pt", "a/.x.1.tmp", "events.out.tfevents.2", "model.pt"):
        assert not kept(rel)
    assert kept("probes.json") and kept("checkpoints.md")  # a folder called so, not a file


def test_a_restored_study_is_done_reads_the_same_and_needs_no_pretraining(archived, tmp_path):
    graph, dest = archived
    fresh = study(tmp_path / "clone")
    result = restore(fresh, dest)
    # SGI's pretraining runs have other readers (naive, frozen, probes) not archived: not restored
    assert result == {
        "restored": [SGI, SCRATCH], "changed": [], "conflicts": [], "left_alone": []
    }  # fmt: skip
    assert task_done(fresh.task(SCRATCH)) and task_done(fresh.task(SGI))
    assert not (fresh.task("pretrain/sgi__minatar-asterix").folder).exists()
    assert not list(fresh.out.rglob("model.pt"))
    # The study's tables from the restored folder are the original's.
    methods = ["none", "sgi"]
    assert per_seed_markdown(study_runs(fresh.out), methods=methods) == per_seed_markdown(
        study_runs(graph.out), methods=methods
    )
    # A second restore changes nothing; a restored file edited since is no longer evidence.
    assert restore(fresh, dest)["restored"] == [SGI, SCRATCH]
    agent = fresh.task(SCRATCH).agent_folders[0]
    assert "eval.json" in restored_files(agent)
    # A report reads its results; evaluating or finetuning from it needs the model it lacks.
    assert require_finished(agent, "report", results_only=True)
    with pytest.raises(UnfinishedRunError, match="final model.pt is missing"):
        require_finished(agent, "evaluate")
    (agent / "eval.json").write_text('{"mean": 99}')
    assert restored_files(agent) == {} and not task_done(fresh.task(SCRATCH))


def test_the_scheduler_restores_skips_and_leaves_what_only_restored_tasks_read(archived, tmp_path):
    """Restored: scratch and SGI on Asterix + Breakout; SGI's pretraining and its data are read
    by nothing else in this graph, so they are unneeded and nothing starts."""
    _, dest = archived
    full = study(tmp_path / "clone")
    keep = {SCRATCH, SGI, "pretrain/sgi__minatar-asterix", "pretrain/sgi__minatar-breakout"}
    keep |= {"data/random__minatar-asterix", "data/random__minatar-breakout"}
    graph = dataclasses.replace(full, tasks=tuple(t for t in full.tasks if t.id in keep))
    index_written = (dest / ARCHIVE_FILE).stat().st_mtime_ns
    events = []
    summary = ex.run_graph(
        graph, progress=False, archive=dest, on_event=lambda e, t, i: events.append((e, t.id))
    )
    assert {t for e, t in events if e == "skipped"} == {SCRATCH, SGI}
    assert {t for e, t in events if e == "unneeded"} == keep - {SCRATCH, SGI}
    assert not [e for e, _ in events if e == "started"]
    assert summary["counts"]["done"] == 2 and summary["counts"]["unneeded"] == 4
    # The archive is not rewritten by a run that finished nothing new.
    assert (dest / ARCHIVE_FILE).stat().st_mtime_ns == index_written
    index = json.loads((dest / ARCHIVE_FILE).read_text())
    assert set(index["tasks"]) == keep - {"data/random__minatar-asterix"} - {
        "data/random__minatar-breakout"
    }


def test_restoring_into_the_folder_the_archive_came_from_writes_nothing(archived):
    graph, dest = archived
    before = {p: p.stat().st_mtime_ns for p in graph.out.rglob("*")}
    assert restore(graph, dest)["restored"] == []  # the runs themselves are there
    assert {p: p.stat().st_mtime_ns for p in graph.out.rglob("*")} == before
    assert not list(graph.out.rglob(RESTORED_FILE))


def test_a_task_whose_command_or_params_changed_is_not_restored(archived, tmp_path):
    _, dest = archived
    changed = study(tmp_path / "clone", None)
    payload = changed.params_files[str(changed.out / "params" / "finetune__sgi_none.yaml")]
    payload["config"]["steps"] = 20000  # scratch at another budget: its own runs, not these
    result = restore(changed, dest)
    assert result["restored"] == [SGI]
    assert result["changed"] == [SCRATCH]
    assert not changed.task(SCRATCH).agent_folders[0].exists()


def test_a_local_folder_that_differs_is_left_as_it_is_and_named(archived, tmp_path):
    _, dest = archived
    fresh = study(tmp_path / "clone")
    agent = fresh.task(SCRATCH).agent_folders[1]
    agent.mkdir(parents=True)
    (agent / "eval.json").write_text('{"mean": 1}')  # the user's own (or a rerun's) result
    result = restore(fresh, dest)
    assert result["conflicts"] == ["finetune/sgi_none/minatar-asterix__s1 (eval.json differ)"]
    assert (agent / "eval.json").read_text() == '{"mean": 1}'
    assert not (agent / RESTORED_FILE).exists() and SCRATCH not in result["restored"]
    # "left as it is" holds: the task that would write into it fails before it runs, naming it
    assert result["left_alone"] == [agent]
    run = scheduler._Run(fresh, "local", None, None, 1, None, dest)
    run.skip_finished()
    run.refuse_conflicts(result["left_alone"])
    assert run.states[SCRATCH] == "failed"
    assert f"{agent} holds files that differ" in run.info[SCRATCH]["error"]
    assert run.states[SGI] == "done"  # the other task's folders came back whole


def test_a_tampered_archive_is_refused_by_file_before_anything_is_restored(archived, tmp_path):
    _, dest = archived
    (dest / "finetune/sgi_none/minatar-breakout__s0/eval.json").write_text("{}")
    fresh = study(tmp_path / "clone")
    with pytest.raises(RunFolderError, match=r"minatar-breakout__s0/eval.json is missing or diff"):
        restore(fresh, dest)
    assert not (fresh.out / "finetune").exists()


@pytest.mark.parametrize(
    "name",
    [
        "finetune/sgi_none/minatar-breakout__s0/../../../../payload.txt",
        "/tmp/payload.txt",
        "finetune/sgi_none/./x",
        "finetune\\..\\payload.txt",
    ],
)
def test_an_archive_naming_a_file_outside_its_folders_is_refused(archived, tmp_path, name):
    """A copied archive whose archive.json names a path out of its run folder (with the
    payload's true SHA-256, so the checksum check alone passes) restores nothing anywhere."""
    _, dest = archived
    payload = dest / "finetune/sgi_none/minatar-breakout__s0/payload.txt"
    payload.write_text("payload")
    index = json.loads((dest / ARCHIVE_FILE).read_text())
    index["files"][name] = file_sha256(payload)
    (dest / ARCHIVE_FILE).write_text(json.dumps(index))
    fresh = study(tmp_path / "deep" / "e6")
    with pytest.raises(RunFolderError, match="names the file .* refusing it"):
        restore(fresh, dest)
    assert not (tmp_path / "deep" / "payload.txt").exists()
    assert not (fresh.out / "finetune").exists()


def test_an_archive_write_cut_short_leaves_an_archive_that_restores(
    archived, tmp_path, monkeypatch
):
    """A re-archive whose copying is cut after one changed file: the index on disk describes
    only files it holds, so a fresh clone restores what it lists (and reruns the rest)."""
    graph, dest = archived
    for folder in graph.task(SCRATCH).agent_folders:  # the scratch agents' results change
        evaluation = json.loads((folder / "eval.json").read_text())
        (folder / "eval.json").write_text(json.dumps({**evaluation, "mean": 9.0}))
    calls = []

    def cut(source, target):
        if calls:
            raise KeyboardInterrupt  # the process killed mid-archive
        calls.append(target)
        shutil.copyfile(source, target)

    monkeypatch.setattr(archive_module, "_copy", cut)
    with pytest.raises(KeyboardInterrupt):
        archive(graph, dest)
    monkeypatch.undo()
    index = json.loads((dest / ARCHIVE_FILE).read_text())
    for rel, sha in index["files"].items():  # every file it lists is there, as listed
        assert file_sha256(dest / rel) == sha, rel
    assert SCRATCH not in index["tasks"] and SGI in index["tasks"]
    fresh = study(tmp_path / "clone")
    result = restore(fresh, dest)
    assert SGI in result["restored"] and SCRATCH not in result["restored"]
    assert archive(graph, dest)  # the next archive completes it
    assert SCRATCH in json.loads((dest / ARCHIVE_FILE).read_text())["tasks"]


def test_an_archive_folder_of_someone_else_is_refused(archived, tmp_path):
    graph, dest = archived
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="no readable archive.json"):
        archive(graph, mine)
    assert [p.name for p in mine.iterdir()] == ["todo.txt"]
    fresh = study(tmp_path / "never")  # a run with it is refused before its folder is made
    with pytest.raises(RunFolderError, match="no readable archive.json"):
        ex.run_graph(fresh, progress=False, archive=mine)
    assert not fresh.out.exists()
    other = json.loads((dest / ARCHIVE_FILE).read_text()) | {"experiment": "hns"}
    (dest / ARCHIVE_FILE).write_text(json.dumps(other))
    with pytest.raises(RunFolderError, match="holds experiment 'hns'"):
        archive(graph, dest)
    with pytest.raises(RunFolderError, match="inside the experiment folder"):
        archive(graph, graph.out / "archive")
    with pytest.raises(ValueError, match="archive and storage"):
        ex.run_graph(graph, progress=False, archive=dest, storage="memory://x")


def test_report_only_with_an_archive_restores_archives_and_reports(archived, tmp_path, capsys):
    _, dest = archived
    out = tmp_path / "clone"
    out.mkdir()
    (out / ex.STATE_FILE).write_text(json.dumps({"name": "minatar_objectives", "tasks": {}}))
    args = ["experiment", str(STUDY), "--out", str(out), "--archive", str(dest), "--report-only"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "restored 2 tasks" in printed and "archived 2 tasks" in printed
    assert "Finished agents: 12 of 180" in (out / "results.md").read_text()
    cost = (out / "results.md").read_text().split("## What it cost")[1]
    archived_rows = cost_markdown(study_cost(dest)).splitlines()  # (its encoders stay there)
    finetuned = [line for line in archived_rows if line.startswith("| `finetune/")]
    assert len(finetuned) == 2 and all(line in cost for line in finetuned)  # as was archived
    for name in ("scores.npz", "scores.json"):  # the per-seed matrices, kept in the archive
        assert (dest / name).read_bytes() == (out / name).read_bytes(), name
    kept_scores = read_score_matrices(dest / "scores.npz")  # the 12 archived agents' returns
    raw = np.concatenate([m[~np.isnan(m)] for m in kept_scores.raw.values()])
    by_hand = [10 * (base + 0.1 * seed) for base in (0.2, 0.4) for seed in (0, 1, 2)] * 2
    np.testing.assert_allclose(np.sort(raw), np.sort(by_hand), rtol=1e-12)
    # into a folder that does not exist yet: it becomes the experiment's, which a run goes on in
    new = tmp_path / "new"
    args = ["experiment", str(STUDY), "--out", str(new), "--archive", str(dest), "--report-only"]
    assert main(args) == 0
    assert json.loads((new / ex.STATE_FILE).read_text())["name"] == "minatar_objectives"
    ex.state.check_experiment_folder(new, "minatar_objectives")  # the real run accepts it


@pytest.mark.slow  # the smoke experiment for real: ~1-2 min
def test_the_archive_of_a_real_run_restores_into_a_fresh_folder(tmp_path):
    """The smoke experiment run with an archive; its folder deleted (a fresh clone); the same
    command again starts nothing (data and pretraining unneeded) and reports the same scores;
    its encoders rebuilt (--rebuild) are the archived runs again."""
    import pandas as pd

    smoke = ROOT / "params" / "experiments" / "smoke.yaml"
    out, dest = tmp_path / "smoke", tmp_path / "kept"
    summary = ex.run_experiment(smoke, out, max_parallel=2, progress=False, archive=dest)
    assert summary["counts"]["done"] == 7, summary
    before = pd.read_csv(out / "results.csv")
    index = json.loads((dest / ARCHIVE_FILE).read_text())
    assert len(index["tasks"]) == 4  # 2 pretraining runs, 2 populations
    assert not list(dest.rglob("*.pt")) and not (dest / "data").exists()
    shutil.rmtree(out)
    events = []
    summary = ex.run_experiment(
        smoke, out, progress=False, archive=dest, on_event=lambda e, t, i: events.append((e, t.id))
    )
    assert not [t for e, t in events if e == "started"], events
    assert {t for e, t in events if e == "unneeded"} == {
        "data/random__Pong", "data/random__Breakout", "pretrain/sgi_r__Pong",
        "pretrain/sgi_r__Breakout",
    }  # fmt: skip
    assert summary["counts"]["done"] == 3  # two populations and the report
    after = pd.read_csv(out / "results.csv")
    pd.testing.assert_frame_equal(before, after)
    # The encoders pretrained again (--rebuild, as a reuse by run: needs), with the threads a
    # task they had (max_parallel 2: one each; with two, Pong's differs from its second logged
    # step): the archived runs again, timings aside; the archive is not rewritten.
    index = (dest / ARCHIVE_FILE).read_text()
    summary = ex.run_experiment(
        smoke, out, max_parallel=2, progress=False, archive=dest, rebuild=["pretrain/*"]
    )
    errors = {k: v.get("error") for k, v in summary["tasks"].items() if v["state"] != "done"}
    assert summary["counts"]["done"] == 4, errors  # two datasets, two pretraining runs
    for game in ("Pong", "Breakout"):
        folder = out / "pretrain" / f"sgi_r__{game}"
        record = json.loads((folder / "rebuilt.json").read_text())
        assert record["same"] and record["steps"] > 0, record
        assert (folder / "model.pt").is_file()
    assert (dest / ARCHIVE_FILE).read_text() == index


def test_an_experiment_reusing_restored_pretraining_runs_builds_its_graph(tmp_path):
    """``run:`` (the 2x check reads the study's encoders) on a clone where those runs were
    restored from the study's archive: their config is there, their model is not; the graph
    builds, and a finished run without its model that was not restored is still refused."""
    from sgi_lab.runs.status import file_sha256

    runs = tmp_path / "study" / "pretrain"
    for game in ("minatar-breakout", "minatar-asterix"):
        folder = runs / f"sgi__{game}"
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps({"state": "finished", "kind": "pretrain"}))
        (folder / "config.yaml").write_text("encoder: minatar\nseed: 0\n")
    text = """
name: reusing
games: [minatar/breakout, minatar/asterix]
seeds: [0]
pretrain:
  - {name: sgi, run: "RUNS/sgi__{game}"}
finetune:
  - {name: reduced_lr, params: params/finetune/minatar_reduced_lr.yaml, pretrain: [sgi]}
""".replace("RUNS", str(runs))
    file = tmp_path / "reusing.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError, match="not finished"):
        ex.expand(ex.load_experiment(file), tmp_path / "reusing")
    for folder in runs.iterdir():
        files = {n: file_sha256(folder / n) for n in ("status.json", "config.yaml")}
        (folder / RESTORED_FILE).write_text(json.dumps({"files": files}))
    graph = ex.expand(ex.load_experiment(file), tmp_path / "reusing")
    assert graph.task("finetune/reduced_lr__sgi").encoder == "minatar"
    # Finetuning from one says why there is no model, not that the run never finished.
    from sgi_lab.runs.status import pretrained_source

    with pytest.raises(ConfigError, match="restored from an experiment archive"):
        pretrained_source(runs / "sgi__minatar-asterix")


def test_an_archive_reads_as_the_experiment_folder(archived):
    """The study tables straight from the archive (a clone that restored nothing yet)."""
    graph, dest = archived
    assert ex.load_graph(dest).experiment.name == "minatar_objectives"
    here, there = study_runs(graph.out), study_runs(dest)
    columns = [c for c in here.columns if c != "folder"]
    pd.testing.assert_frame_equal(here[columns], there[columns])
    assert there["finished"].sum() == 12


def test_the_dry_run_with_an_archive_says_what_a_restore_leaves_and_writes_nothing(
    archived, tmp_path, capsys
):
    _, dest = archived
    out = tmp_path / "clone"
    args = ["experiment", str(STUDY), "--out", str(out), "--archive", str(dest), "--dry-run"]
    assert main(args) == 0
    plan = capsys.readouterr().out
    assert "finetune/sgi_none/part1of4  [6 agents, ~0.35 GB as one population]  (done)" in plan
    assert (
        "finetune/reduced_lr__sgi/part1of4  [6 agents, ~0.35 GB as one population]  (done)" in plan
    )
    # archived, but read by tasks the archive lacks (naive, frozen, probes): trained again
    assert "pretrain/sgi__minatar-asterix  (done)" not in plan
    assert re.search(r"\nleft +161 ", plan), plan[-600:]
    assert not out.exists()


def test_the_dry_run_lists_tasks_in_the_order_first_gives_and_refuses_a_damaged_archive(
    archived, tmp_path, capsys
):
    """--dry-run prints the tasks as --first / --branch-first start them, and an archive whose
    files differ from its index is refused by file (a restore would refuse it: nothing in it
    is "done"); nothing is written either way."""
    _, dest = archived
    out = tmp_path / "clone"
    base = ["experiment", str(STUDY), "--out", str(out), "--dry-run"]
    assert main([*base, "--first", "finetune/naive__sgi/*"]) == 0
    plan = capsys.readouterr().out
    lines = [
        line.split()[0]
        for line in plan.splitlines()
        if line.startswith(("finetune/", "pretrain/", "data/"))
    ]
    first_finetune = next(line for line in lines if line.startswith("finetune/"))
    assert first_finetune.startswith("finetune/naive__sgi/"), lines[:8]
    assert main(base) == 0
    default = capsys.readouterr().out
    assert default != plan  # the order is the option's, not the graph's
    (dest / "finetune/sgi_none/minatar-breakout__s0/eval.json").write_text("{}")
    assert main([*base, "--archive", str(dest)]) == 2
    err = capsys.readouterr().err
    assert "minatar-breakout__s0/eval.json is missing or differs" in err
    assert not out.exists()


def test_report_only_refuses_storage_with_an_archive_and_locks_the_folder(
    archived, tmp_path, capsys
):
    from sgi_lab.base.files import FolderLock

    _, dest = archived
    out = tmp_path / "clone"
    base = ["experiment", str(STUDY), "--out", str(out), "--report-only"]
    assert main([*base, "--archive", str(dest), "--storage", "memory://x"]) == 2
    assert "with --storage it is refused" in capsys.readouterr().err
    assert not out.exists()
    out.mkdir()
    (out / ex.STATE_FILE).write_text(json.dumps({"name": "minatar_objectives", "tasks": {}}))
    lock = FolderLock(out, "a run of the experiment")
    lock._key += ".other"  # as if held by another process: this one's lock table forgets it
    import sgi_lab.base.files as files

    files._HELD.pop(str(out.resolve() / files.LOCK_FILE), None)
    try:
        assert main([*base, "--archive", str(dest)]) == 2
        assert "in use by another sgi-lab process" in capsys.readouterr().err
        assert not (out / "results.md").exists()
    finally:
        lock._fh.close()


# -- --rebuild: pretraining runs restored without their model, pretrained again ------------------

ASTERIX, BREAKOUT = "pretrain/sgi__minatar-asterix", "pretrain/sgi__minatar-breakout"


def curve(spr: float, speed: float) -> str:
    """A pretraining run's metrics.jsonl: two logged steps, with a timing that varies by run."""
    rows = [
        {"step": s, "losses/spr": spr * s, "grad_norm": 0.5, "charts/samples_per_s": speed}
        for s in (100, 200)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture
def rebuildable(tmp_path, monkeypatch):
    """SGI's two encoders archived with their curves, then restored into a fresh clone (no
    model), and task processes faked: a dataset is a tiny store, a pretraining run writes its
    model, a finished status and the curve ``spr`` (a list, so a test can change it)."""
    from tests.conftest import build_store

    graph = study(tmp_path / "first")
    graph.out.mkdir(parents=True)
    scheduler.write_inputs(graph, graph.out)
    for task_id in (ASTERIX, BREAKOUT):
        finish_pretraining(graph, task_id)
        (graph.task(task_id).folder / "config.yaml").write_text("encoder: minatar\nsteps: 2000\n")
        (graph.task(task_id).folder / "metrics.jsonl").write_text(curve(-1.0, 2600.0))
    dest = tmp_path / "archive"
    assert sorted(archive(graph, dest)) == [ASTERIX, BREAKOUT]
    spr, started = [-1.0], []

    def fake_run(argv, log, threads, cwd, memory_share=1.0):
        out = Path(argv[argv.index("--out") + 1])
        started.append(" ".join(a for a in argv if a in ("collect", "pretrain", "--overwrite")))
        if argv[0] == "collect":
            build_store(out, [{"length": 12, "terminal": True}])
        else:
            (out / "model.pt").write_bytes(b"rebuilt weights")
            (out / "metrics.jsonl").write_text(curve(spr[0], 1234.5))
            status = {"state": "finished", "kind": "pretrain", "step": 2000}
            (out / "status.json").write_text(json.dumps(status))
        return {"returncode": 0, "seconds": 1.0, "tail": ""}

    monkeypatch.setattr(ex.executors, "run_command", fake_run)
    return study(tmp_path / "clone"), dest, spr, started


def test_a_rebuild_pretrains_a_restored_run_again_and_checks_it_against_the_archive(rebuildable):
    """--rebuild runs only the matching pretraining run and its data, on top of what the archive
    restored; the same curve (timings aside) is the archived run again: rebuilt.json says so,
    the archive is left as it was, and a run: reusing it builds its graph."""
    fresh, dest, _, started = rebuildable
    index = (dest / ARCHIVE_FILE).read_text()
    events = []
    summary = ex.run_graph(
        fresh,
        progress=False,
        archive=dest,
        rebuild=["pretrain/sgi__*asterix"],
        on_event=lambda e, t, i: events.append((e, t.id)),
    )
    assert started == ["collect", "pretrain"]  # Breakout's run stays as restored, model-less
    assert [t for e, t in events if e == "done"] == ["data/random__minatar-asterix", ASTERIX]
    assert set(summary["tasks"]) == {"data/random__minatar-asterix", ASTERIX}
    folder = fresh.task(ASTERIX).folder
    record = json.loads((folder / "rebuilt.json").read_text())
    assert record["same"] is True and record["steps"] == 2 and record["max_difference"] == 0.0
    assert record["first_difference"] is None
    assert (dest / ARCHIVE_FILE).read_text() == index  # the original's results stay archived
    assert "1234.5" not in (dest / "pretrain/sgi__minatar-asterix/metrics.jsonl").read_text()
    assert not kept("rebuilt.json")
    # A run of the same command again: done, nothing started.
    started.clear()
    ex.run_graph(fresh, progress=False, archive=dest, rebuild=["pretrain/sgi__*asterix"])
    assert started == []


def test_a_rebuild_that_differs_fails_and_a_run_reusing_it_is_refused(rebuildable, tmp_path):
    """A rebuild whose curve is not the archived one fails and is refused by a run: reusing it;
    the rebuild run again starts that run over (--overwrite) and checks it again."""
    fresh, dest, spr, started = rebuildable
    spr[0] = -1.001  # another encoder: its loss differs by 0.1% from the first logged step
    summary = ex.run_graph(fresh, progress=False, archive=dest, rebuild=[ASTERIX], retries=0)
    entry = summary["tasks"][ASTERIX]
    assert entry["state"] == "failed"
    assert "not the archived run" in entry["error"] and "'step': 100" in entry["error"]
    record = json.loads((fresh.task(ASTERIX).folder / "rebuilt.json").read_text())
    assert record["same"] is False
    assert record["first_difference"] == {
        "step": 100, "key": "losses/spr", "rebuilt": -100.1, "archived": -100.0,
    }  # fmt: skip
    assert record["max_difference"] == pytest.approx(0.001 / 1.001)
    text = f"""
name: reusing
games: [minatar/asterix]
seeds: [0]
pretrain:
  - {{name: sgi, run: "{fresh.out}/pretrain/sgi__{{game}}"}}
finetune:
  - {{name: reduced_lr, params: params/finetune/minatar_reduced_lr.yaml, pretrain: [sgi]}}
"""
    file = tmp_path / "reusing.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError, match=r"pretrained again \(--rebuild\).*not the archived"):
        ex.expand(ex.load_experiment(file), tmp_path / "reusing")
    # Rebuilt again as it should be (the archived run's threads and settings): the same run.
    spr[0], started[:] = -1.0, []
    summary = ex.run_graph(fresh, progress=False, archive=dest, rebuild=[ASTERIX], retries=0)
    assert summary["tasks"][ASTERIX]["state"] == "done", summary["tasks"][ASTERIX]["error"]
    assert started == ["pretrain --overwrite"]  # its data was done
    assert json.loads((fresh.task(ASTERIX).folder / "rebuilt.json").read_text())["same"] is True
    assert ex.expand(ex.load_experiment(file), tmp_path / "reusing").task(
        "finetune/reduced_lr__sgi"
    )


def test_compare_rebuilt_reads_every_logged_value_but_timings(tmp_path):
    from sgi_lab.experiments.archive import compare_rebuilt

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "metrics.jsonl").write_text(curve(-1.0, 1.0))
    (b / "metrics.jsonl").write_text(curve(-1.0, 9.0) + "not json\n")
    assert compare_rebuilt(a, b) == {
        "same": True, "steps": 2, "max_difference": 0.0, "first_difference": None,
        "across_resumes": [],
    }  # fmt: skip
    (b / "metrics.jsonl").write_text(curve(-1.0, 9.0).replace('"grad_norm": 0.5, ', ""))
    result = compare_rebuilt(a, b)  # a key one run logged and the other did not
    assert result["first_difference"] == {
        "step": 100, "key": "grad_norm", "rebuilt": 0.5, "archived": None,
    }  # fmt: skip
    assert result["same"] is False and result["max_difference"] is None
    (b / "metrics.jsonl").write_text(curve(-1.0, 9.0).splitlines()[0] + "\n")
    assert compare_rebuilt(a, b)["first_difference"] == {
        "steps": "rebuilt logged 2 rows, the archive 1"
    }
    (b / "metrics.jsonl").write_text(curve(-1.0 + 1e-7, 9.0))  # within the tolerance
    assert compare_rebuilt(a, b)["same"] is True


def test_a_rebuild_forgives_only_the_row_logged_across_a_resume_of_the_archived_run(tmp_path):
    """The archived run resumed at step 150 (between its logged 100 and 200), before the
    logging window was checkpointed: its row 200 is a mean over 50 steps and may differ; every
    other row, and a resume at a logged step, is compared as ever."""
    from sgi_lab.experiments.archive import compare_rebuilt

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "metrics.jsonl").write_text(curve(-1.0, 1.0))
    (b / "metrics.jsonl").write_text(
        curve(-1.0, 1.0).replace('"losses/spr": -200.0', '"losses/spr": -190.0')
    )
    assert compare_rebuilt(a, b)["first_difference"]["step"] == 200  # no resume recorded
    for resumed_at, same in ((150, True), (100, False)):
        provenance = [{"step": 0}, {"step": resumed_at}]
        (b / "status.json").write_text(json.dumps({"state": "finished", "provenance": provenance}))
        result = compare_rebuilt(a, b)
        assert result["same"] is same, result
        assert result["across_resumes"] == ([200] if same else [])
    (b / "metrics.jsonl").write_text(curve(-2.0, 1.0))  # row 100 differs too: not forgiven
    (b / "status.json").write_text(json.dumps({"provenance": [{"step": 0}, {"step": 150}]}))
    assert compare_rebuilt(a, b)["first_difference"]["step"] == 100


def test_the_rebuild_flag_refuses_what_it_cannot_do_before_anything_is_written(
    archived, tmp_path, capsys
):
    _, dest = archived
    out = tmp_path / "clone"
    base = ["experiment", str(STUDY), "--out", str(out)]
    for args, message in [
        (["--rebuild", "pretrain/s__*"], "--rebuild: needs --archive DIR"),
        (["--rebuild", "pretrain/s__*", "--dry-run"], "--rebuild: needs --archive DIR"),
        (["--archive", str(dest), "--rebuild", "finetune/*"], "matches no pretraining task"),
        (
            ["--archive", str(dest), "--rebuild", "pretrain/s__*", "--report-only"],
            "not go with --report-only",
        ),
    ]:
        assert main([*base, *args]) != 0
        assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="--rebuild: needs --archive DIR"):
        ex.run_graph(study(out), progress=False, rebuild=["pretrain/s__*"])
    assert not out.exists()
    # The dry run shows the cut-down graph: the runs and their data, nothing else.
    assert main([*base, "--archive", str(dest), "--rebuild", "pretrain/sgi__*", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "pretrain/sgi__minatar-seaquest" in plan and "data/random__minatar-seaquest" in plan
    assert "finetune/" not in plan and "pretrain/s__minatar" not in plan
