"""Data sources of kind replay, weak and mixed in experiment files: the graph of the shipped
MinAtar-Replay file (each game's agent -> its replay's export -> Weak and Mixed -> SGI
pretrained on each), the refusals naming the key, a storage worker pulling the agent's
checkpoints, and a tiny experiment that makes a replay, selects Mixed and pretrains on it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from study_helpers import TINY_MAKER

from sgi_lab import experiments as ex
from sgi_lab.config import ConfigError
from sgi_lab.data.store import TransitionStore
from sgi_lab.experiments.cost import format_plan
from sgi_lab.experiments.data_tasks import dependency_order
from sgi_lab.experiments.state import storage_plan

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / "params" / "experiments" / "minatar_replay.yaml"


def test_the_minatar_replay_graph(tmp_path):
    graph = ex.expand(ex.load_experiment(REPLAY), tmp_path / "exp")
    out = graph.out
    replay = graph.task("data/replay__minatar-breakout")
    assert replay.deps == ("pretrain/maker__minatar-breakout",)
    assert replay.argv == (
        "export", "replay", str(out / "pretrain/maker__minatar-breakout"),
        str(out / "data/replay__minatar-breakout"),
    )  # fmt: skip
    assert (replay.stage, replay.steps) == ("export_replay", 1_000_000)
    weak = graph.task("data/weak__minatar-breakout")
    assert weak.deps == (replay.id,) and weak.argv[-2:] == ("--weak", "0.1")
    assert weak.steps == 100_000
    mixed = graph.task("data/mixed__minatar-breakout")
    assert mixed.argv[3:] == ("--mixed", "100000", "--seed", "0", "--segment", "1000")
    maker = graph.task("pretrain/maker__minatar-breakout")
    assert maker.argv[:2] == ("finetune", "--params") and maker.steps == 1_000_000
    assert graph.params_files[maker.argv[2]]["config"]["ssl"] == "none"
    ids = [t.id for t in graph.tasks]
    assert all(ids.index(d) < ids.index(t.id) for t in graph.tasks for d in t.deps)
    # a file that only makes data: every source is made, and the report waits for them all
    assert graph.counts() == {"data": 15, "pretrain": 5, "finetune": 0, "probe": 0, "report": 1}
    assert set(graph.task("report").deps) == set(ids) - {"report"}
    plan = format_plan(graph)
    assert "sgi-lab export replay" in plan and "export_replay" in plan
    assert "sgi-lab select" in plan and "select_replay" in plan
    # a storage worker pulls the agent's checkpoints (the replay is in the last), a pretraining
    # run reading a store does not
    inputs = dict(storage_plan(graph, replay, "file:///tmp/store")["inputs"])
    assert inputs["pretrain/maker__minatar-breakout"] == ()


def test_the_mixed_study_reads_the_replays_selection_where_it_is_made(tmp_path):
    study = ex.load_experiment(ROOT / "params" / "experiments" / "minatar_mixed.yaml")
    made = tmp_path / "replay"
    graph = ex.expand(
        dataclasses.replace(study, parameters={"minatar_replay": str(made)}), tmp_path
    )
    for draw in range(3):
        task = graph.task(f"pretrain/sgi_m__d{draw}__minatar-breakout")
        assert task.deps == ()  # a folder source: read, never made or copied here
        assert str(made / "data/mixed__minatar-breakout") in task.argv
    agents = [a for t in graph.tasks if t.kind == "finetune" for a in t.agents]
    assert len(agents) == 3 * 2 * 15 and graph.counts()["data"] == 0
    assert [m.split(": ")[0] for m in graph.missing_data] == ["data.mixed"]
    assert study.question.primary == ["reduced_lr__sgi_m", "naive__sgi_m"]


def test_dependency_order_is_stable_and_puts_inputs_first():
    class T:
        def __init__(self, id, deps=()):
            self.id, self.deps = id, deps

    tasks = [T("d", ("a",)), T("x"), T("a"), T("e", ("d", "outside"))]
    assert [t.id for t in dependency_order(tasks)] == ["x", "a", "d", "e"]


BASE = """
name: t
games: [minatar/breakout]
data:
{data}
pretrain:
  - {{name: maker, kind: agent, params: params/finetune/minatar_none.yaml}}
  - {{name: sgi, params: params/pretrain/minatar_sgi.yaml, data: {uses}}}
finetune:
  - {{name: f, params: params/finetune/minatar_reduced_lr.yaml, pretrain: [sgi]}}
"""


@pytest.mark.parametrize(
    ("data", "uses", "message"),
    [
        ("  r: {source: replay}", "r", r"data.r.src: required"),
        ("  r: {source: replay, src: sgi}", "r", r"data.r.src: 'sgi' is a pretraining config"),
        ("  r: {source: replay, src: nobody}", "r", r"data.r.src: 'nobody' names no agent"),
        ("  m: {source: mixed, src: rr}", "m", r"data.m.src: 'rr' names no replay"),
        (
            "  r: {source: random, steps: 10}\n  w: {source: weak, src: r}",
            "w",
            r"data.w.src: 'r' is not a data source of kind replay",
        ),
        (
            "  r: {source: replay, src: maker}\n  w: {source: weak, src: r, fraction: 1.5}",
            "w",
            r"data.w.fraction: in \(0, 1\]",
        ),
        (
            "  r: {source: replay, src: maker}\n  m: {source: mixed, src: r, segment: 1}",
            "m",
            r"data.m: segment at least 2",
        ),
    ],
)
def test_bad_replay_sources_are_named(tmp_path, data, uses, message):
    path = tmp_path / "exp.yaml"
    path.write_text(BASE.format(data=data, uses=uses))
    with pytest.raises(ConfigError, match=message):
        ex.load_experiment(path)


def test_folders_stand_for_a_run_or_a_replay_made_elsewhere(tmp_path):
    path = tmp_path / "exp.yaml"
    data = "  m: {source: mixed, src: '/stores/replay_{game}', steps: 500, segment: 50}"
    path.write_text(BASE.format(data=data, uses="m"))
    graph = ex.expand(ex.load_experiment(path), tmp_path / "exp")
    mixed = graph.task("data/m__minatar-breakout")
    assert mixed.deps == () and mixed.argv[1] == "/stores/replay_minatar/breakout"
    assert not [t for t in graph.tasks if t.id.startswith("data/") and t is not mixed]


TINY = (
    """
name: tiny_replay
games: [minatar/breakout]
seeds: [0]
data:
  replay: {source: replay, src: maker}
  mixed: {source: mixed, src: replay, steps: 60, seed: 1, segment: 20}
pretrain:
"""
    + TINY_MAKER
    + """  - name: sgi_m
    params: params/pretrain/minatar_sgi.yaml
    data: mixed
    set: {hidden_size: 32, steps: 3, batch_size: 8, spr_steps: 3, n_step: 3, goal_window: 10, log_every: 1, checkpoint_every: 3, prefetch: 0}
finetune:
  - name: reduced_lr
    params: params/finetune/minatar_reduced_lr.yaml
    pretrain: [sgi_m]
    set: {hidden_size: 32, steps: 30, batch_size: 4, spr_steps: 2, n_step: 3, learning_starts: 15, eps_steps: 16, log_every: 10, checkpoint_every: 30, eval_episodes: 1, eval_envs: 1}
"""
)


@pytest.mark.smoke
def test_a_tiny_experiment_makes_a_replay_selects_mixed_and_pretrains_on_it(tmp_path):
    pytest.importorskip("minatar")
    file = tmp_path / "tiny.yaml"
    file.write_text(TINY)
    out = tmp_path / "exp"
    summary = ex.run_experiment(file, out, max_parallel=1, progress=False)
    assert summary["counts"]["done"] == 6, summary
    replay = TransitionStore(out / "data" / "replay__minatar-breakout")
    assert len(replay) == 120 and replay.manifest.params["checkpoints"] == [60, 120]
    mixed = TransitionStore(out / "data" / "mixed__minatar-breakout")
    assert len(mixed) == 60 and mixed.manifest.params["of"]["fingerprint"] == replay.fingerprint
    status = json.loads((out / "pretrain" / "sgi_m__minatar-breakout" / "status.json").read_text())
    assert status["state"] == "finished"
    assert status.get("data_fingerprint", mixed.fingerprint) == mixed.fingerprint
