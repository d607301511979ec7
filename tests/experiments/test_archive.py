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

import pandas as pd
import pytest

from sgi_lab import experiments as ex
from sgi_lab.analysis.minatar_study import per_seed_markdown, study_runs
from sgi_lab.base.files import RunFolderError
from sgi_lab.config import ConfigError
from sgi_lab.experiments.archive import (
    ARCHIVE_FILE,
    RESTORED_FILE,
    archive,
    kept,
    restore,
    restored_files,
)
from sgi_lab.experiments.state import task_done
from sgi_lab.launch.cli import main
from sgi_lab.runs.status import UnfinishedRunError, require_finished

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
    ex.scheduler._write_inputs(graph, graph.out)  # what run_graph writes first
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
    assert result == {"restored": [SGI, SCRATCH], "changed": [], "conflicts": []}
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


def test_a_tampered_archive_is_refused_by_file_before_anything_is_restored(archived, tmp_path):
    _, dest = archived
    (dest / "finetune/sgi_none/minatar-breakout__s0/eval.json").write_text("{}")
    fresh = study(tmp_path / "clone")
    with pytest.raises(RunFolderError, match=r"minatar-breakout__s0/eval.json is missing or diff"):
        restore(fresh, dest)
    assert not (fresh.out / "finetune").exists()


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


@pytest.mark.slow  # the smoke experiment for real: ~1-2 min
def test_the_archive_of_a_real_run_restores_into_a_fresh_folder(tmp_path):
    """The smoke experiment run with an archive; its folder deleted (a fresh clone); the same
    command again starts nothing (data and pretraining unneeded) and reports the same scores."""
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
