"""Experiments as task graphs (sgi_lab.experiments): the shipped files' graphs, validation,
the dry run, retries and failures, and (slow) the smoke experiment end to end, resumed after a
kill, and on a real local Ray cluster."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import kill_once_a_pretraining_run_finishes, run_mtimes

from sgi_lab import experiments as ex
from sgi_lab.base.files import FolderLock
from sgi_lab.config import ConfigError
from sgi_lab.experiments.data_tasks import data_used
from sgi_lab.launch.cli import main

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "params" / "experiments").glob("*.yaml"))
SMOKE = ROOT / "params" / "experiments" / "smoke.yaml"
DQN = {"dqn_replay": "/data/dqn_replay"}


def graph_of(name: str, tmp_path: Path, parameters: dict | None = None) -> ex.Graph:
    file = ROOT / "params" / "experiments" / f"{name}.yaml"
    return ex.expand(ex.load_experiment(file, parameters), tmp_path / name)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


# -- graphs of the shipped files ----------------------------------------------------------------


def test_shipped_experiment_files():
    names = {f.stem for f in FILES}
    assert {"hns", "architecture", "objectives", "finetune_schemes"} <= names
    assert {"finetune_objectives", "baselines", "smoke"} <= names


def finished_pretraining_runs(pattern: str, games, encoder: str = "minatar") -> None:
    """Stand-ins for another experiment's finished pretraining runs (``run:``), one per game."""
    from sgi_lab.runs.folder import run_name

    for game in games:
        folder = Path(pattern.replace("{game}", run_name(game)))
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps({"state": "finished", "kind": "pretrain"}))
        (folder / "config.yaml").write_text(f"encoder: {encoder}\nseed: 0\n")
        (folder / "model.pt").write_bytes(b"")


@pytest.mark.parametrize("file", FILES, ids=[f.stem for f in FILES])
def test_every_experiment_expands(file, tmp_path, monkeypatch):
    experiment = ex.load_experiment(file, DQN if "dqn_replay" in _params(file) else None)
    reused = [p for p in experiment.pretrain if p.run]
    if reused:  # the runs it reuses, as the experiment that made them leaves them
        monkeypatch.chdir(tmp_path)
        for spec in reused:
            finished_pretraining_runs(spec.run, experiment.games)
    graph = ex.expand(experiment, tmp_path / "exp")
    games, seeds = experiment.games, experiment.seeds
    used = data_used(experiment, {})  # what pretraining and probes read, and the replays
    collected = {d for d in used if experiment.data[d].source != "folder"}  # a folder: no task
    counts = graph.counts()
    assert counts["data"] == len(collected) * len(games)
    assert counts["pretrain"] == (len(experiment.pretrain) - len(reused)) * len(games)
    # one finetuning task per (finetuning, pretraining) config and observation spec (MinAtar
    # games of different channel counts train apart)
    groups = {ex.graph.observation_spec(g) for g in games}
    branches = sum(len(f.pretrain) for f in experiment.finetune)
    if not experiment.share_populations:
        assert counts["finetune"] == branches * len(groups)
    random = [len(p.seeds) for p in experiment.probe if "none" in p.pretrain]
    runs = sum(len(p.pretrain) - ("none" in p.pretrain) for p in experiment.probe)
    assert counts["probe"] == (runs + sum(random)) * len(games)
    assert counts["report"] == 1 and not graph.dropped
    ids = [t.id for t in graph.tasks]
    assert len(set(ids)) == len(ids)
    for task in graph.tasks:  # dependency order: every input comes earlier
        assert all(ids.index(d) < ids.index(task.id) for d in task.deps)
        assert task.folder == graph.out or graph.out in task.folder.parents
    agents: dict[str, set] = {}
    finetunes = [t for t in graph.tasks if t.kind == "finetune"]
    folders = [f for t in finetunes for f in t.agent_folders]
    # a config's own seeds (a drawn pretraining config deals the experiment's to its draws)
    seeds_of = {
        f"{f.name}__{b}" if b != "none" else f.name: f.seeds if f.seeds is not None else seeds
        for f in experiment.finetune
        for b in f.pretrain
    }
    assert len(folders) == len(set(folders)) == len(games) * sum(map(len, seeds_of.values()))
    for task in finetunes if experiment.share_populations else ():
        # configs that may share a population together, one observation spec each
        assert len({ex.graph.observation_spec(g) for g, _ in task.agents}) == 1
        assert len(task.agent_folders) == len(task.agents)
        assert "--agents" in task.argv and all(d.startswith("pretrain/") for d in task.deps)
    for task in finetunes if not experiment.share_populations else ():
        # all games of one observation spec x seeds as a population; every pair once
        group, own = {g for g, _ in task.agents}, seeds_of[task.folder.name]
        assert set(task.agents) == {(g, s) for g in group for s in own}
        assert len({ex.graph.observation_spec(g) for g in group}) == 1
        assert len(task.agent_folders) == len(group) * len(own)
        assert all(d.startswith("pretrain/") for d in task.deps)
        assert len(task.deps) in (0, len(group))
        config = agents.setdefault(task.folder.name, set())
        assert not config & set(task.agents)
        config |= set(task.agents)
    if not experiment.share_populations:
        assert all(
            pairs == {(g, s) for g in games for s in seeds_of[name]}
            for name, pairs in agents.items()
        )
    report = graph.task("report")
    readers = {t.id for t in graph.tasks if t.kind in ("finetune", "probe")}
    # a file that only makes data: the report waits for everything it makes
    assert set(report.deps) == (readers or {t.id for t in graph.tasks} - {"report"})


def _params(file: Path) -> dict:
    import yaml

    return yaml.safe_load(file.read_text()).get("parameters") or {}


def test_hns_graph_hand_counted(tmp_path):
    # 26 games: Random, Exploratory, Weak, Mixed datasets; SGI-R/E/W/M; 4 populations from
    # them + SGI-None; 10 seeds.
    graph = graph_of("hns", tmp_path, DQN)
    assert graph.counts() == {"data": 104, "pretrain": 104, "finetune": 5, "probe": 0, "report": 1}
    assert len(graph.tasks) == 214
    assert sum(len(t.deps) for t in graph.tasks) == 104 + 4 * 26 + 5
    task = graph.task("finetune/reduced_lr__sgi_w")
    assert len(task.agents) == 260
    assert task.deps[0] == "pretrain/sgi_w__Alien"
    assert graph.task("pretrain/sgi_w__Pong").deps == ("data/weak__Pong",)
    # Weak: checkpoint 0 of each of the 5 DQN runs (the paper's 5M steps); Mixed: one run.
    task = graph.task("data/weak__Pong")
    argv = task.argv
    srcs = tuple(f"/data/dqn_replay/Pong/{r}/replay_logs" for r in range(1, 6))
    assert argv[:9] == ("import", "dqn-replay", "--src", *srcs, "--checkpoints")
    assert argv[9:12] == ("0", "--samples", "1000000") and task.steps == 5_000_000
    mixed = graph.task("data/mixed__Pong")
    assert mixed.argv[3:5] == ("/data/dqn_replay/Pong/1/replay_logs", "--checkpoints")
    assert mixed.steps == 3_000_000
    assert graph.task("finetune/sgi_none").deps == ()
    # Without the DQN Replay folder the Weak and Mixed branches are dropped, and said so.
    graph = graph_of("hns", tmp_path, None)
    assert graph.counts() == {"data": 52, "pretrain": 52, "finetune": 3, "probe": 0, "report": 1}
    assert any("dqn_replay" in note for note in graph.dropped)


def test_max_agents_splits_each_population_into_tasks_of_some_games_x_some_seeds(tmp_path):
    """hns with max_agents 60: each 26 x 10 population becomes 5 tasks of 26 games x 2 seeds,
    the same agents and run folders as one task, each part its own pretraining deps."""
    whole = graph_of("hns", tmp_path, DQN)
    file = ROOT / "params" / "experiments" / "hns.yaml"
    import dataclasses

    experiment = dataclasses.replace(ex.load_experiment(file, DQN), max_agents=60)
    graph = ex.expand(experiment, tmp_path / "split")
    assert graph.counts() == {"data": 104, "pretrain": 104, "finetune": 25, "probe": 0, "report": 1}
    parts = [t for t in graph.tasks if t.id.startswith("finetune/reduced_lr__sgi_w/")]
    assert [t.id.rsplit("/", 1)[1] for t in parts] == [f"part{k}of5" for k in range(1, 6)]
    one = whole.task("finetune/reduced_lr__sgi_w")
    rel = [f.relative_to(graph.out) for t in parts for f in t.agent_folders]
    assert sorted(rel) == sorted(f.relative_to(whole.out) for f in one.agent_folders)
    for k, task in enumerate(parts):
        assert len(task.agents) == 52 and {s for _, s in task.agents} == {2 * k, 2 * k + 1}
        argv = list(task.argv)
        assert argv[argv.index("--seed") + 1] == f"{2 * k},{2 * k + 1}"
        assert argv[argv.index("--out") + 1] == str(task.folder)
        assert len(task.deps) == 26 and task.steps == 52 * 100_000
    assert set(graph.task("report").deps) == {t.id for t in graph.tasks if t.kind == "finetune"}
    # A part of one agent runs in that agent's folder (a population of one writes its --out).
    tiny = dataclasses.replace(
        ex.load_experiment(ROOT / "params/experiments/smoke.yaml"), max_agents=1
    )
    graph = ex.expand(tiny, tmp_path / "tiny")
    task = graph.task("finetune/sgi_none/part2of2")
    argv = list(task.argv)
    assert task.agents == (("Breakout", 0),)
    assert argv[argv.index("--out") + 1] == str(graph.out / "finetune/sgi_none/Breakout__s0")
    assert task.agent_folders == (graph.out / "finetune/sgi_none/Breakout__s0",)
    with pytest.raises(ConfigError, match="max_agents"):
        text = (ROOT / "params/experiments/smoke.yaml").read_text() + "max_agents: 0\n"
        ex.load_experiment(write(tmp_path, text))


def test_finetune_schemes_graph_hand_counted(tmp_path):
    graph = graph_of("finetune_schemes", tmp_path, DQN)
    assert graph.counts() == {"data": 26, "pretrain": 26, "finetune": 4, "probe": 0, "report": 1}
    assert sum(len(t.deps) for t in graph.tasks) == 26 + 3 * 26 + 4
    naive = graph.task("finetune/naive__sgi_m")
    assert "--pretrained" in naive.argv and naive.steps == 260 * 100_000
    params = graph.params_files[str(graph.out / "params" / "finetune__naive__sgi_m.yaml")]
    assert params["name"] == "naive" and params["config"]["scheme"] == "naive"


def test_finetune_encoder_follows_pretraining(tmp_path):
    graph = graph_of("architecture", tmp_path, DQN)
    encoders = {t.id: t.encoder for t in graph.tasks if t.kind == "finetune"}
    assert encoders == {
        "finetune/reduced_lr__sgi_m_s": "nature",
        "finetune/reduced_lr__sgi_m": "resnet",
        "finetune/reduced_lr__sgi_m_l": "resnet_l",
        "finetune/sgi_none": "resnet",
    }


# -- validation ---------------------------------------------------------------------------------


BASE = """
name: t
games: [Pong]
data: {random: {source: random, steps: 100}}
pretrain: [{name: a, params: params/pretrain/smoke.yaml, data: random}]
finetune: [{name: f, params: params/finetune/smoke.yaml, pretrain: [a]}]
"""


@pytest.mark.parametrize(
    "change, key",
    [
        ("gamez: [Pong]\n", "gamez"),
        ("seeds: ['0']\n", "seeds[0]"),
        ("parameters: 3\n", "parameters"),
        ("resources: {pretrain: {num_gpu: 1}}\n", "resources.pretrain"),
    ],
)
def test_bad_top_level_keys_are_named(tmp_path, change, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        ex.load_experiment(write(tmp_path, BASE + change))


def test_bad_nested_keys_are_named(tmp_path):
    text = BASE.replace("data: random}]", "data: random, paramz: 1}]")
    with pytest.raises(ConfigError, match=r"pretrain\[0\]\.paramz|paramz"):
        ex.load_experiment(write(tmp_path, text))
    text = BASE.replace("steps: 100", "steps: many")
    with pytest.raises(ConfigError, match=r"data\.random\.steps"):
        ex.load_experiment(write(tmp_path, text))
    # One checker for params and experiment files (config.check_value): the same words.
    text = BASE.replace("steps: 100", "steps: 1.5")
    with pytest.raises(
        ConfigError, match=r"exp\.yaml: data\.random\.steps: expected an integer, got 1\.5$"
    ):
        ex.load_experiment(write(tmp_path, text))
    text = BASE.replace("data: random}]", "data: nowhere}]")
    with pytest.raises(ConfigError, match=r"pretrain\[0\]\.data: 'nowhere'"):
        ex.load_experiment(write(tmp_path, text))
    text = BASE.replace("pretrain: [a]", "pretrain: [b]")
    with pytest.raises(ConfigError, match=r"finetune\[0\]\.pretrain: 'b'"):
        ex.load_experiment(write(tmp_path, text))
    with pytest.raises(ConfigError, match="games"):
        ex.load_experiment(write(tmp_path, BASE.replace("[Pong]", "[Pongg]")))
    with pytest.raises(ConfigError, match="not declared"):
        ex.load_experiment(write(tmp_path, BASE), {"dqn_replay": "/x"})
    # dqn_replay runs: {run} in src and runs go together, runs distinct.
    dqn = "{w: {source: dqn_replay, src: '/d/{game}/%s/replay_logs', checkpoints: [0]%s}}"
    for src, runs in (("{run}", ""), ("1", ", runs: [1, 2]"), ("{run}", ", runs: [1, 1]")):
        text = BASE.replace("{random: {source: random, steps: 100}}", dqn % (src, runs))
        text = text.replace("data: random}", "data: w}")
        with pytest.raises(ConfigError, match=r"data\.w\.runs"):
            ex.load_experiment(write(tmp_path, text))


def test_bad_overrides_are_named_against_the_experiment_file(tmp_path):
    text = BASE.replace("data: random}]", "data: random, set: {stepz: 3}}]")
    with pytest.raises(ConfigError, match=r"exp\.yaml: pretrain\[0\]\.set\.stepz: unknown key"):
        ex.load_experiment(write(tmp_path, text))


# -- dry run ------------------------------------------------------------------------------------


def test_dry_run_prints_graph_and_cost(tmp_path, capsys):
    out = tmp_path / "exp"
    file = ROOT / "params" / "experiments" / "finetune_schemes.yaml"
    code = main(
        ["experiment", str(file), "--out", str(out), "--dry-run", "--param", "dqn_replay=/d"]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "tasks: 26 data, 26 pretrain, 4 finetune, 1 report" in text
    # 260 ResNet agents x (networks 70 + Adam 69 + replay 711 + update 810 MB) = ~432 GB.
    assert "finetune/naive__sgi_m  [260 agents, ~432 GB as one population]" in text
    assert "sgi-lab pretrain --params" in text and "estimated cost" in text
    total = next(line for line in text.splitlines() if line.startswith("total"))
    assert total.split()[1:3] == ["57", "1092"]  # tasks, runs
    assert "h100" in text and not out.exists()  # nothing written
    cost = ex.estimate_cost(graph_of("finetune_schemes", tmp_path, DQN))
    # 26 x 60M samples of ResNet at the H100's 3,929 samples/s
    assert cost["stages"]["pretrain"]["hours"]["h100"] == pytest.approx(26 * 6e7 / 3929 / 3600)
    assert cost["stages"]["finetune"]["steps"] == 4 * 260 * 100_000


def test_speeds_name_their_machine_and_source():
    assert all(s.machine in ex.MACHINES and s.rate > 0 and s.source for s in ex.SPEEDS)


# -- running: retries, failures, independent branches -------------------------------------------


def test_failed_task_is_retried_then_reported_while_a_branch_finishes(tmp_path):
    text = """
name: failing
games: [Pong]
data:
  good: {source: random, steps: 60}
  broken: {source: dqn_replay, src: "/nonexistent/{game}", checkpoints: [1]}
pretrain:
  - {name: a, params: params/pretrain/smoke.yaml, data: good}
  - {name: b, params: params/pretrain/smoke.yaml, data: broken}
finetune: [{name: f, params: params/finetune/smoke.yaml, pretrain: [a, b]}]
"""
    file = write(tmp_path, text)
    full = ex.expand(ex.load_experiment(file), tmp_path / "out")
    # Only the datasets and what depends on the broken one: enough to see the scheduler's
    # decisions in seconds (the whole chain runs in the slow tests).
    keep = ("data/good__Pong", "data/broken__Pong", "pretrain/b__Pong")
    graph = dataclasses.replace(full, tasks=tuple(t for t in full.tasks if t.id in keep))
    events = []
    summary = ex.run_graph(
        graph,
        max_parallel=2,
        retries=1,
        progress=False,
        on_event=lambda event, task, info: events.append((event, task.id)),
    )
    tasks = summary["tasks"]
    assert tasks["data/good__Pong"]["state"] == "done"
    assert tasks["data/broken__Pong"]["state"] == "failed"
    assert tasks["data/broken__Pong"]["attempts"] == 2
    assert "nonexistent" in tasks["data/broken__Pong"]["error"]
    assert tasks["pretrain/b__Pong"]["state"] == "blocked"
    assert ("retry", "data/broken__Pong") in events
    log = Path(tasks["data/broken__Pong"]["log"]).read_text()
    assert log.count("== ") == 2  # both attempts in the task's log
    assert json.loads((graph.out / "experiment.json").read_text())["counts"]["failed"] == 1
    # Re-running skips the finished dataset and tries the failed one again.
    events.clear()
    ex.run_graph(
        graph, retries=0, progress=False, on_event=lambda e, t, i: events.append((e, t.id))
    )
    assert ("skipped", "data/good__Pong") in events
    assert ("started", "data/broken__Pong") in events


def test_oversubscription_warns(tmp_path, monkeypatch):
    graph = ex.expand(ex.load_experiment(SMOKE), tmp_path / "out")
    cores = os.cpu_count() or 1
    notes = ex._oversubscription(graph, cores + 1)
    assert any("max-parallel" in n for n in notes)
    # the smoke finetuning params set threads: 1, so 2 x cores processes oversubscribe
    assert any("threads=1" in n for n in ex._oversubscription(graph, 2 * cores))
    # The user's thread setting is kept per task: named when it oversubscribes the cores (the
    # count torch reads, OMP_NUM_THREADS before MKL_NUM_THREADS), silent when it fits.
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores + 1))
    monkeypatch.setenv("MKL_NUM_THREADS", str(cores))
    notes = ex._oversubscription(graph, 1)
    assert any(f"OMP_NUM_THREADS={cores + 1} x 1 parallel runs oversubscribes" in n for n in notes)
    assert not any("MKL_NUM_THREADS" in n for n in notes)
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores))
    assert ex._oversubscription(graph, 1) == []


def test_ray_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match="pip install"):
        ex.RayExecutor()


# -- end to end (slow) --------------------------------------------------------------------------


@pytest.mark.slow
def test_smoke_experiment_end_to_end_killed_and_resumed(tmp_path):
    out = tmp_path / "smoke"
    cmd = [sys.executable, "-m", "sgi_lab.launch.cli", "experiment", str(SMOKE)]
    cmd += ["--out", str(out), "--max-parallel", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    kill_once_a_pretraining_run_finishes(proc, out)
    before = run_mtimes(out)
    assert any(k.startswith("data/") for k in before)
    events = []
    summary = ex.run_experiment(
        SMOKE,
        out,
        max_parallel=2,
        progress=False,
        on_event=lambda e, t, i: events.append((e, t.id)),
    )
    assert summary["counts"]["done"] == 7, summary
    skipped = {t for e, t in events if e == "skipped"}
    assert {"data/random__Pong", "data/random__Breakout"} <= skipped
    after = run_mtimes(out)
    for key, mtime in before.items():  # finished tasks were not run again
        task = key.split("/")[0] + "/" + key.split("/")[1]
        if task in skipped:
            assert after[key] == mtime, key
    # The report: per-game scores, aggregates with CIs, the paper's column per configuration.
    import pandas as pd

    per_game = pd.read_csv(out / "results.csv")
    assert set(per_game["method"]) == {"reduced_lr@sgi_r", "sgi_none"}
    assert set(per_game["paper_config"]) == {"SGI-R", "SGI-None"}
    assert per_game["paper_score"].notna().all()
    aggregates = pd.read_csv(out / "results.aggregates.csv")
    assert {"iqm", "median", "mean"} <= set(aggregates["metric"])
    scores = np.load(out / "scores.npz", allow_pickle=False)  # per seed, rliable's shape
    assert set(scores["methods"]) == {"reduced_lr@sgi_r", "sgi_none"}
    assert scores["normalized/sgi_none"].shape == (1, 2)  # 1 seed x (Breakout, Pong)
    html = (out / "report.html").read_text()
    assert "SGI-R" in html and "plotly" in html
    results = (out / "results.md").read_text()  # the study's tables, on Atari's HNS too
    assert "Finished agents: 4 of 4 (HNS" in results and "| game | seed |" in results
    # what it cost: every task that ran, by part (a store logs no speed and is left out)
    cost = results[results.index("## What it cost") :]
    assert "| `finetune/sgi_none` | 1 | 2 |" in cost  # one population of Breakout and Pong
    assert "| `pretrain/sgi_r` | 2 | 2 |" in cost and "data/" not in cost
    agents = sorted(p.parent.name for p in (out / "finetune").rglob("eval.json"))
    assert agents == ["Breakout__s0", "Breakout__s0", "Pong__s0", "Pong__s0"]
    # A second run has nothing to do.
    events.clear()
    ex.run_experiment(SMOKE, out, progress=False, on_event=lambda e, t, i: events.append(e))
    assert set(events) == {"skipped"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_smoke_experiment_on_a_local_ray_cluster(tmp_path):
    """A real Ray head (127.0.0.1, 2 CPUs) started here, joined by address; one task fails on
    its first attempt (its run folder holds a foreign file) and succeeds on the retry."""
    ray = pytest.importorskip("ray")
    port = _free_port()
    temp = Path(f"/tmp/rx{os.getpid()}")
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block"]
        + ["--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "2"]
        + ["--num-gpus", "0", "--include-dashboard", "false", f"--temp-dir={temp}"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # No token authentication, whatever ~/.ray holds: this process joins by address.
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    try:
        graph = ex.expand(ex.load_experiment(SMOKE), tmp_path / "ray")
        victim = graph.task("pretrain/sgi_r__Pong")
        victim.folder.mkdir(parents=True)
        (victim.folder / "foreign.txt").write_text("not a run")
        # The experiment folder itself is ours (a foreign one would be refused whole).
        (graph.out / ex.STATE_FILE).write_text(json.dumps({"name": "smoke", "tasks": {}}))
        events = []

        def on_event(event, task, info):
            events.append((event, task.id))
            if event == "retry" and task.id == victim.id:
                (victim.folder / "foreign.txt").unlink()

        deadline = time.time() + 60
        while True:  # wait for the head to accept drivers
            try:
                summary = ex.run_graph(
                    graph,
                    executor="ray",
                    address=f"127.0.0.1:{port}",
                    retries=1,
                    progress=False,
                    on_event=on_event,
                )
                break
            except ConnectionError:
                if time.time() > deadline:
                    raise
                time.sleep(2)
        assert summary["counts"]["done"] == 7, summary
        assert summary["tasks"][victim.id]["attempts"] == 2
        assert ("retry", victim.id) in events
        assert (graph.out / "report.html").exists()
        assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2
    finally:
        if ray.is_initialized():
            ray.shutdown()
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)


# -- the ablations notebook opens an experiment folder ------------------------------------------


def test_ablations_find_runs_of_an_experiment_folder(tmp_path):
    from sgi_lab.analysis import run_scores

    out = tmp_path / "exp"
    tasks = {"finetune/reduced_lr__sgi_r": {"kind": "finetune"}, "report": {"kind": "report"}}
    (out / "finetune").mkdir(parents=True)
    (out / "experiment.json").write_text(json.dumps({"tasks": tasks}))
    for game, score in (("Pong", -5.0), ("Breakout", 3.0)):
        run = out / "finetune" / "reduced_lr__sgi_r" / f"{game}__s0"
        run.mkdir(parents=True)
        (run / "eval.json").write_text(json.dumps({"game": game, "mean": score}))
        status = {"state": "finished", "params": "reduced_lr", "pretrain_params": "sgi_r"}
        (run / "status.json").write_text(json.dumps(status))
        (run / "config.yaml").write_text(f"game: {game}\nseed: 0\npretrained: /p/{game}\n")
    stray = out / "finetune" / "old_copy" / "Pong__s0"  # not a task of the experiment
    stray.mkdir(parents=True)
    (stray / "eval.json").write_text(json.dumps({"game": "Pong", "mean": 0.0}))
    (stray / "status.json").write_text(json.dumps({"state": "finished"}))
    found = run_scores.find_runs(out)
    assert [p.name for p in found] == ["Breakout__s0", "Pong__s0"]
    scores = run_scores.load_run_scores(found)
    assert set(scores["method"]) == {"reduced_lr@sgi_r"}
    assert run_scores.find_runs(out, "Pong*") == [found[1]]
    assert run_scores.experiment_finetune_folders(tmp_path) is None  # not an experiment
    assert len(run_scores.find_runs(tmp_path)) == 3  # a plain root is searched recursively
    # a population split into parts (max_agents): both parts write into one folder
    parts = {f"finetune/reduced_lr__sgi_r/part{k}of2": {"kind": "finetune"} for k in (1, 2)}
    (out / "experiment.json").write_text(json.dumps({"tasks": {**parts, **tasks}}))
    assert run_scores.experiment_finetune_folders(out) == [out / "finetune" / "reduced_lr__sgi_r"]
    assert [p.name for p in run_scores.find_runs(out)] == ["Breakout__s0", "Pong__s0"]


def test_a_refused_ray_connection_says_how_to_authenticate(monkeypatch):
    ray = pytest.importorskip("ray")

    def refuse(**kwargs):
        raise ConnectionError(f"Failed to connect to Ray cluster at {kwargs['address']}")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(
        ConnectionError, match="at 10.0.0.9:6379. If the cluster uses token"
    ) as info:
        ex.RayExecutor("10.0.0.9:6379")
    assert "RAY_AUTH_MODE=token" in str(info.value)


def test_the_minatar_study_splits_populations_by_observation_and_names_folders_by_slug(tmp_path):
    """minatar_objectives: MinAtar games are accepted; each finetuning config becomes one task
    per observation spec (Breakout + Asterix 4 channels, Freeway 7, Seaquest 10, Space Invaders
    6), each agent's pretraining found at the slug of its game (minatar-breakout), and the
    dry run costs every stage (MinAtar speeds measured) with populations' memory in MB."""
    graph = graph_of("minatar_objectives", tmp_path)
    experiment = graph.experiment
    assert experiment.games[:2] == ["minatar/asterix", "minatar/breakout"]
    parts = [t for t in graph.tasks if t.id.startswith("finetune/reduced_lr__sgi/")]
    assert [sorted({g for g, _ in t.agents}) for t in parts] == [
        ["minatar/asterix", "minatar/breakout"],
        ["minatar/freeway"],
        ["minatar/seaquest"],
        ["minatar/space_invaders"],
    ]
    assert all({s for _, s in t.agents} == {0, 1, 2} for t in parts)
    first = parts[0]
    argv = list(first.argv)
    pattern = argv[argv.index("--pretrained") + 1]
    assert set(first.deps) == {"pretrain/sgi__minatar-asterix", "pretrain/sgi__minatar-breakout"}
    for dep in first.deps:
        assert (graph.out / dep).name in {
            Path(pattern.replace("{game}", "minatar-asterix")).name,
            Path(pattern.replace("{game}", "minatar-breakout")).name,
        }
    assert first.agent_folders[0].name == "minatar-asterix__s0"  # no minatar/ sub-folder
    cost = ex.estimate_cost(graph)
    assert "cpu" not in cost["total"]["unmeasured"]  # (no MinAtar figure on a GPU yet)
    assert 12 < cost["total"]["hours"]["cpu"] < 24  # ~17 process-hours: ~9 h two at a time
    plan = ex.format_plan(graph)
    assert "[6 agents, ~0.35 GB as one population]" in plan  # 6 x 58 MB (capacity)


def test_a_minatar_agents_pretrained_run_is_found_at_its_slug(tmp_path):
    from sgi_lab.config import FinetuneConfig
    from sgi_lab.train.finetune import population_configs, population_folders

    base = FinetuneConfig(
        game="minatar/breakout", encoder="minatar", pretrained=str(tmp_path / "p__{game}")
    )
    configs = population_configs(base, ["minatar/breakout", "minatar/asterix"], [0])
    assert [c.pretrained for c in configs] == [
        str(tmp_path / "p__minatar-breakout"),
        str(tmp_path / "p__minatar-asterix"),
    ]
    assert [f.name for f in population_folders(tmp_path, configs)] == [
        "minatar-breakout__s0",
        "minatar-asterix__s0",
    ]


def test_a_probe_config_names_its_readout_and_features(tmp_path):
    """probe: readout/features reach `sgi-lab probe` and the task's done check (probes_done
    compares them), so one experiment can probe the same encoders with several readouts."""
    text = (ROOT / "params/experiments/minatar_objectives.yaml").read_text()
    text = text.replace(
        "    encoder: minatar\nresources:",
        "    encoder: minatar\n    readout: logistic\n    features: projection\nresources:",
    )
    graph = ex.expand(ex.load_experiment(write(tmp_path, text)), tmp_path / "exp")
    probe = next(t for t in graph.tasks if t.kind == "probe")
    argv = list(probe.argv)
    assert argv[argv.index("--readout") + 1] == "logistic"
    assert argv[argv.index("--features") + 1] == "projection"
    assert (probe.probe["readout"], probe.probe["features"]) == ("logistic", "projection")
    with pytest.raises(ConfigError, match="readout"):
        ex.load_experiment(write(tmp_path, text.replace("readout: logistic", "readout: svm")))


def test_first_puts_the_chosen_tasks_and_their_inputs_ahead_in_dependency_order(tmp_path):
    graph = graph_of("minatar_objectives", tmp_path)
    order = [t.id for t in ex.first_order(graph, ["finetune/reduced_lr__sgi/*"])]
    assert sorted(order) == sorted(t.id for t in graph.tasks)  # a permutation
    wanted = {t.id for t in graph.tasks if t.id.startswith("finetune/reduced_lr__sgi/")}
    assert len(wanted) == 4  # Breakout+Asterix, Freeway, Seaquest, Space Invaders
    inputs = {f"data/random__{g}" for g in GAME_SLUGS} | {f"pretrain/sgi__{g}" for g in GAME_SLUGS}
    assert set(order[: len(wanted | inputs)]) == wanted | inputs
    position = {task_id: i for i, task_id in enumerate(order)}
    for task in graph.tasks:  # still a dependency order
        assert all(position[d] < position[task.id] for d in task.deps), task.id
    assert ex.first_order(graph, []) == graph.tasks
    # Patterns in turn: Breakout+Asterix of both, then the rest of SGI's, then no pretraining.
    order = [
        t.id
        for t in ex.first_order(
            graph,
            ["finetune/*sgi*/part1of4", "finetune/reduced_lr__sgi/*", "finetune/sgi_none/*"],
        )
        if t.kind == "finetune"
    ]
    part1 = [
        f"finetune/{c}/part1of4"
        for c in ("reduced_lr__sgi", "sgi_none", "naive__sgi", "frozen__sgi")
    ]
    rest = [f"finetune/reduced_lr__sgi/part{k}of4" for k in (2, 3, 4)]
    rest += [f"finetune/sgi_none/part{k}of4" for k in (2, 3, 4)]
    assert order[:10] == part1 + rest


def test_branch_first_lands_whole_objectives_one_after_another(tmp_path):
    """--branch-first: each finetuning task right after what it reads, in the graph's order,
    so S's pretraining and populations all come before G's pretraining starts; probes right
    after their encoders; --first still first; a dependency order throughout."""
    graph = graph_of("minatar_objectives", tmp_path)
    order = [t.id for t in ex.branch_order(graph)]
    assert sorted(order) == sorted(t.id for t in graph.tasks)  # each task once
    position = {task_id: i for i, task_id in enumerate(order)}
    for task in graph.tasks:
        assert all(position[d] < position[task.id] for d in task.deps), task.id
    s_done = max(position[f"finetune/reduced_lr__s/part{k}of4"] for k in range(1, 5))
    g_start = min(position[f"pretrain/g__{g}"] for g in GAME_SLUGS)
    assert s_done < g_start  # S answered whole before G's first pretraining
    for probe in (t for t in graph.tasks if t.kind == "probe" and t.deps):
        last_input = max(position[d] for d in probe.deps)
        between = order[last_input + 1 : position[probe.id]]
        assert all(i.startswith("probe/") for i in between), probe.id  # right after its inputs
    chosen = [t.id for t in ex.branch_order(graph, ["finetune/sgi_none/*"])]
    assert [i for i in chosen if i.startswith("finetune/")][:4] == [
        f"finetune/sgi_none/part{k}of4" for k in range(1, 5)
    ]


def test_the_branch_first_flag_reaches_the_scheduler(monkeypatch, tmp_path):
    import sgi_lab.experiments.command as experiment_cli

    seen = {}
    monkeypatch.setattr(
        experiment_cli,
        "run_graph",
        lambda graph, **kw: seen.update(kw) or {"tasks": {}, "counts": {}},
    )
    file = str(ROOT / "params/experiments/minatar_objectives.yaml")
    assert main(["experiment", file, "--out", str(tmp_path / "x"), "--branch-first"]) == 0
    assert seen["branch_first"] is True and seen["first"] == ()


def test_first_names_a_pattern_that_matches_nothing_before_anything_is_written(tmp_path):
    graph = graph_of("minatar_objectives", tmp_path)
    with pytest.raises(ValueError, match=r"--first 'finetune/sgi_nothing/\*' matches no task"):
        ex.run_graph(graph, first=["finetune/sgi_nothing/*"], progress=False)
    assert not graph.out.exists()


def test_first_starts_the_chosen_task_first(tmp_path):
    text = """
name: ordering
games: [Pong]
data:
  a: {source: random, steps: 30}
  b: {source: random, steps: 30}
pretrain:
  - {name: p, params: params/pretrain/smoke.yaml, data: a}
  - {name: q, params: params/pretrain/smoke.yaml, data: b}
finetune: [{name: f, params: params/finetune/smoke.yaml, pretrain: [p, q]}]
"""
    full = ex.expand(ex.load_experiment(write(tmp_path, text)), tmp_path / "out")
    graph = dataclasses.replace(full, tasks=tuple(t for t in full.tasks if t.kind == "data"))
    events = []
    ex.run_graph(
        graph,
        progress=False,
        first=["data/b__*"],
        on_event=lambda e, t, i: events.append((e, t.id)),
    )
    started = [task_id for event, task_id in events if event == "started"]
    assert started[:2] == ["data/b__Pong", "data/a__Pong"]


GAME_SLUGS = [
    f"minatar-{g}" for g in ("asterix", "breakout", "freeway", "seaquest", "space_invaders")
]


def start_driver(file: Path, out: Path) -> subprocess.Popen:
    """``sgi-lab experiment FILE --out OUT`` in a process group of its own (as a shell starts a
    job), its output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "sgi_lab.launch.cli", "experiment", str(file), "--out", str(out)]
        + ["--no-progress"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_sigterm_stops_the_tasks_and_puts_them_back_to_pending(tmp_path):
    """A background job ignores SIGINT; SIGTERM (kill, timeout, a scheduler) stops the graph as
    Ctrl-C does: the task process ends, the task is pending again, the folder is unlocked."""
    text = """
name: terminated
games: [Pong]
data:
  big: {source: random, steps: 2000000}
pretrain: [{name: p, params: params/pretrain/smoke.yaml, data: big}]
finetune: [{name: f, params: params/finetune/smoke.yaml, pretrain: [p]}]
"""
    out = tmp_path / "out"
    proc = start_driver(write(tmp_path, text), out)
    state = out / "experiment.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if state.exists() and '"running": 1' in state.read_text():
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the data task never started: " + (proc.communicate()[0] or ""))
    time.sleep(2)  # the collector is running
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "interrupted" in output
    task = json.loads(state.read_text())["tasks"]["data/big__Pong"]
    assert task["state"] == "pending" and "interrupted" in task["error"]
    stray = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout
    assert not stray.strip(), f"a task process outlived the scheduler: {stray}"
    FolderLock(out, "the test", wait=0).release()  # free: a re-run can take it


def test_a_signal_to_the_drivers_process_group_stops_a_task_at_a_checkpoint(tmp_path):
    """A terminal's Ctrl-C and ``kill -- -PGID`` signal the driver's whole process group. The
    task processes live in sessions of their own, so the signal reaches the driver alone, which
    passes on one SIGTERM and waits: the pretraining run checkpoints where it is and stops
    (once in the driver's group, a task got the signal twice and ended at once, its work since
    the last periodic checkpoint lost, whenever the driver's signal came after the task had
    begun to stop)."""
    text = """
name: grouped
games: [Pong]
data:
  small: {source: random, steps: 1200}
pretrain:
  - name: p
    params: params/pretrain/smoke.yaml
    data: small
    set: {steps: 100000, checkpoint_every: 100000, log_every: 2}
finetune: [{name: f, params: params/finetune/smoke.yaml, pretrain: [p]}]
"""
    out = tmp_path / "out"
    proc = start_driver(write(tmp_path, text), out)
    run = out / "pretrain" / "p__Pong"
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            metrics = run / "metrics.jsonl"
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[0]
        found = subprocess.run(["pgrep", "-f", str(run)], capture_output=True, text=True)
        (task_pid,) = map(int, found.stdout.split())
        assert os.getsid(task_pid) != os.getsid(proc.pid)  # out of the driver's group
        os.killpg(proc.pid, signal.SIGTERM)  # the driver's group: as `kill -- -PGID` does
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output
    status = json.loads((run / "status.json").read_text())
    assert "stopped at step" in status["message"] and "SIGTERM" in status["message"], status
    step = status["step"]
    assert step >= 4 and (run / "checkpoints" / f"ckpt_{step:08d}.pt").is_file()
    assert "waiting for 1 task process(es) to checkpoint and stop" in output
    task = json.loads((out / "experiment.json").read_text())["tasks"]["pretrain/p__Pong"]
    assert task["state"] == "pending"


REUSING = """
name: reusing
games: [minatar/breakout, minatar/asterix]
seeds: [0, 1]
pretrain:
  - {name: sgi, run: "RUNS/sgi__{game}"}
finetune:
  - {name: reduced_lr, params: params/finetune/minatar_reduced_lr.yaml, pretrain: [sgi, none]}
"""


def test_pretraining_runs_of_another_experiment_are_reused_not_retrained(tmp_path):
    """``run:`` names finished pretraining runs, one per game: no pretraining task, finetuning
    starts from them (its --pretrained their absolute pattern, nothing to wait for), its
    encoder theirs, shared populations too; the cost counts no pretraining."""
    runs = tmp_path / "other" / "pretrain"
    finished_pretraining_runs(str(runs / "sgi__{game}"), ["minatar/breakout", "minatar/asterix"])
    file = write(tmp_path, REUSING.replace("RUNS", str(runs)))
    graph = ex.expand(ex.load_experiment(file), tmp_path / "reusing")
    assert graph.counts()["pretrain"] == 0 and graph.counts()["data"] == 0
    task = graph.task("finetune/reduced_lr__sgi")
    argv = list(task.argv)
    assert argv[argv.index("--pretrained") + 1] == str(runs / "sgi__{game}")
    assert task.deps == ()
    params = graph.params_files[argv[argv.index("--params") + 1]]
    assert params["config"]["encoder"] == "minatar"
    assert "pretrain" not in ex.estimate_cost(graph)["stages"]
    # shared populations wait for nothing either
    text = file.read_text().replace("seeds: [0, 1]\n", "seeds: [0, 1]\nshare_populations: true\n")
    shared = ex.expand(ex.load_experiment(write(tmp_path, text)), tmp_path / "shared")
    (population,) = [t for t in shared.tasks if t.kind == "finetune"]
    assert population.deps == () and len(population.agents) == 8
    # nothing under the reused runs is written by the graph
    assert all(runs not in t.folder.parents for t in shared.tasks)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (None, "not a pretraining run folder"),  # nothing there
        ("unfinished", "not finished (state 'running', step 40)"),
        ("params", "give it alone, or params and data to pretrain (not run and params)"),
        ("no_game", "{game} must name each game's run (2 games)"),
        ("probe", "'sgi' reuses runs this experiment does not own"),
        ("neither", "pretrain[0].params: required (or run: finished runs to reuse)"),
    ],
)
def test_reused_runs_that_cannot_be_reused_are_refused_by_name(tmp_path, change, message):
    runs = tmp_path / "other" / "pretrain"
    text = REUSING.replace("RUNS", str(runs))
    if change is not None:
        finished_pretraining_runs(
            str(runs / "sgi__{game}"), ["minatar/breakout", "minatar/asterix"]
        )
    if change == "unfinished":
        status = runs / "sgi__minatar-asterix" / "status.json"
        status.write_text(json.dumps({"state": "running", "kind": "pretrain", "step": 40}))
    elif change == "params":
        text = text.replace('run: "', 'params: params/pretrain/minatar_sgi.yaml, run: "')
    elif change == "no_game":
        text = text.replace("sgi__{game}", "sgi__minatar-breakout")
    elif change == "probe":
        text += "probe: [{name: p, data: d, pretrain: [sgi]}]\ndata: {d: {source: random}}\n"
    elif change == "neither":
        text = text.replace('run: "' + str(runs) + '/sgi__{game}"', "data: d")
        text += "data: {d: {source: random}}\n"
    with pytest.raises(ConfigError, match=re.escape(message)):
        ex.expand(ex.load_experiment(write(tmp_path, text)), tmp_path / "reusing")


def test_a_task_that_does_not_stop_is_killed_after_the_patience(capsys):
    """The driver waits for its tasks to checkpoint, but not for ever: a task process that
    ignores SIGTERM is killed once the patience has passed."""
    from sgi_lab.experiments import executors

    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
         "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert stubborn.stdout.readline().strip() == "ready"
    with executors._LIVE_LOCK:
        executors._LIVE.add(stubborn)
    try:
        started = time.monotonic()
        executors._stop_children(patience=1.0)
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
        assert 1.0 <= time.monotonic() - started < 10
    finally:
        with executors._LIVE_LOCK:
            executors._LIVE.discard(stubborn)
        stubborn.kill()
    assert "waiting for 1 task process(es)" in capsys.readouterr().err


def test_share_populations_puts_every_config_that_may_share_in_one_population(tmp_path):
    """minatar_objectives with share_populations: the reduced-lr, naive and from-scratch configs
    (which differ only in the pretrained encoder and its rates) train as one population per
    observation shape, frozen SGI as its own; every agent writes the folder its own config's
    population would give it, and each task lists its agents, their params and pretrained
    runs in a file `sgi-lab finetune --agents` reads."""
    from sgi_lab.train.finetune import read_agents

    separate = graph_of("minatar_objectives", tmp_path)
    file = ROOT / "params" / "experiments" / "minatar_objectives.yaml"
    text = file.read_text().replace(
        "seeds: [0, 1, 2]\n", "seeds: [0, 1, 2]\nshare_populations: true\n", 1
    )
    text = text.replace("params/", f"{ROOT}/params/")
    shared = ex.expand(ex.load_experiment(write(tmp_path, text)), tmp_path / "minatar_objectives")

    def agent_folders(graph):
        return sorted(f for t in graph.tasks if t.kind == "finetune" for f in t.agent_folders)

    assert agent_folders(shared) == agent_folders(separate)
    assert len(agent_folders(shared)) == 12 * 5 * 3
    finetunes = [t for t in shared.tasks if t.kind == "finetune"]
    ids = [t.id for t in finetunes]
    assert ids == [
        "finetune/shared/reduced_lr-sgi_none-naive__minatar-asterix__minatar-breakout",
        "finetune/shared/reduced_lr-sgi_none-naive__minatar-freeway",
        "finetune/shared/reduced_lr-sgi_none-naive__minatar-seaquest",
        "finetune/shared/reduced_lr-sgi_none-naive__minatar-space_invaders",
        "finetune/shared/frozen__minatar-asterix__minatar-breakout",
        "finetune/shared/frozen__minatar-freeway",
        "finetune/shared/frozen__minatar-seaquest",
        "finetune/shared/frozen__minatar-space_invaders",
    ]
    first = finetunes[0]
    assert len(first.agents) == 11 * 2 * 3  # 9 objectives reduced-lr, none, SGI naive
    assert first.steps == 66 * 10_000
    assert set(first.deps) == {
        f"pretrain/{o}__minatar-{g}"
        for o in ("s", "g", "i", "s_g", "s_i", "g_i", "sgi", "atc", "bc")
        for g in ("asterix", "breakout")
    }
    agents_file = list(first.argv)[list(first.argv).index("--agents") + 1]
    document = shared.params_files[agents_file]
    labels = {a["label"] for a in document["agents"]}
    assert labels == {
        f"reduced_lr__{o}" for o in ("s", "g", "i", "s_g", "s_i", "g_i", "sgi", "atc", "bc")
    } | {"sgi_none", "naive__sgi"}
    scratch = [a for a in document["agents"] if a["label"] == "sgi_none"]
    assert all(a["pretrained"] is None for a in scratch) and len(scratch) == 6
    naive = next(a for a in document["agents"] if a["label"] == "naive__sgi")
    assert naive["pretrained"] == str(
        shared.out / "pretrain" / f"sgi__{naive['game'].replace('/', '-')}"
    )
    assert naive["out"] == str(
        shared.out
        / "finetune"
        / "naive__sgi"
        / f"{naive['game'].replace('/', '-')}__s{naive['seed']}"
    )
    assert finetunes[4].agent_folders[0].parent.name == "frozen__sgi"

    # The written files are what the CLI reads: each agent its own config and params name.
    for path, payload in shared.params_files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(yaml.safe_dump(payload))
    configs, outs, names = read_agents(agents_file)
    assert len(configs) == 66 and [str(o) for o in outs] == [a["out"] for a in document["agents"]]
    by_label = {
        a["label"]: (c, n) for a, c, n in zip(document["agents"], configs, names, strict=True)
    }
    assert by_label["naive__sgi"][0].scheme == "naive" and by_label["naive__sgi"][1] == "naive"
    assert by_label["reduced_lr__atc"][0].encoder_lr_scale == 0.01
    assert by_label["sgi_none"][0].pretrained is None and by_label["sgi_none"][1] == "sgi_none"
    assert {c.steps for c in configs} == {10_000}  # the experiment's set: applied per config

    # max_agents splits a shared population into consecutive parts of whole agents.
    text = text.replace("share_populations: true\n", "share_populations: true\nmax_agents: 40\n")
    split = ex.expand(ex.load_experiment(write(tmp_path, text)), tmp_path / "split")
    parts = [
        t
        for t in split.tasks
        if t.id.startswith("finetune/shared/reduced_lr-sgi_none-naive__minatar-asterix")
    ]
    assert [t.id.rsplit("/", 1)[1] for t in parts] == ["part1of2", "part2of2"]
    assert [len(t.agents) for t in parts] == [33, 33]
    plan = ex.format_plan(shared)
    assert "[66 agents, ~3.8 GB as one population]" in plan


@pytest.mark.slow  # ~40 s idle; the default tier runs the agents file end to end (test_minatar_track)
def test_a_shared_smoke_experiment_reports_the_same_methods_as_separate_populations(tmp_path):
    """smoke.yaml with share_populations: reduced-lr SGI and SGI-None train as one population of
    four agents (Pong and Breakout share Atari's input), one task; the report names the same
    methods and paper configs as one population per config does, and a second run skips it."""
    text = SMOKE.read_text().replace("seeds: [0]\n", "seeds: [0]\nshare_populations: true\n", 1)
    text = text.replace("params/", f"{ROOT}/params/")
    file = write(tmp_path, text)
    out = tmp_path / "shared"
    summary = ex.run_experiment(file, out, max_parallel=1, progress=False)
    graph = ex.expand(ex.load_experiment(file), out)
    finetunes = [t for t in graph.tasks if t.kind == "finetune"]
    assert [t.id for t in finetunes] == ["finetune/shared/reduced_lr-sgi_none__Pong__Breakout"]
    assert summary["counts"]["done"] == len(graph.tasks), summary
    import pandas as pd

    per_game = pd.read_csv(out / "results.csv")
    assert set(per_game["method"]) == {"reduced_lr@sgi_r", "sgi_none"}
    assert set(per_game["paper_config"]) == {"SGI-R", "SGI-None"}
    agents = sorted(str(p.parent.relative_to(out)) for p in out.rglob("eval.json"))
    assert agents == [
        "finetune/reduced_lr__sgi_r/Breakout__s0",
        "finetune/reduced_lr__sgi_r/Pong__s0",
        "finetune/sgi_none/Breakout__s0",
        "finetune/sgi_none/Pong__s0",
    ]
    log = (out / "logs" / "finetune__shared__reduced_lr-sgi_none__Pong__Breakout.log").read_text()
    assert "in a population of 4" in log
    events = []
    ex.run_experiment(file, out, progress=False, on_event=lambda e, t, i: events.append(e))
    assert set(events) == {"skipped"}


def test_the_dry_run_of_a_started_experiment_says_what_is_left(tmp_path, capsys):
    """A stopped pretraining run counts from its last checkpoint, a population as the mean of
    its agents, finished tasks not at all; the dry run marks each task and adds a ``left`` row
    (the same speeds, scaled), and a folder that holds no run of it gets no such row."""
    from sgi_lab.experiments.state import task_left

    graph = graph_of("minatar_objectives", tmp_path)
    pretrain = graph.task("pretrain/sgi__minatar-breakout")
    finetune = graph.task("finetune/reduced_lr__sgi/part1of4")  # Asterix + Breakout x 3 seeds
    data = graph.task("data/random__minatar-breakout")

    def run(folder: Path, state: str, step: int, steps: int) -> None:
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps({"state": state, "step": step}))
        (folder / "config.yaml").write_text(f"steps: {steps}\n")

    run(pretrain.folder, "failed", 500, 2000)  # stopped at a checkpoint: 75% left
    finished, *others = finetune.agent_folders
    run(finished, "finished", 10000, 10000)
    for agent in others[:2]:
        run(agent, "running", 4000, 10000)  # 60% left each; the other three not started
    assert task_left(pretrain) == pytest.approx(0.75)
    assert task_left(finetune) == pytest.approx((0 + 0.6 + 0.6 + 3) / 6)
    assert task_left(data) == 1.0
    left = {t.id: task_left(t) for t in graph.tasks}
    whole, rest = ex.estimate_cost(graph), ex.estimate_cost(graph, left)
    share = whole["stages"]["pretrain"]["hours"]["cpu"] / 45  # every pretraining run the same
    assert rest["stages"]["pretrain"]["hours"]["cpu"] == pytest.approx(44.75 * share)
    assert rest["total"]["tasks"] == whole["total"]["tasks"] - 1  # the report is not counted

    assert main(["experiment", str(ROOT / "params/experiments/minatar_objectives.yaml"),
                 "--out", str(graph.out), "--dry-run"]) == 0  # fmt: skip
    assert "left" not in capsys.readouterr().out.split("estimated cost")[1]  # not ours yet
    (graph.out / ex.STATE_FILE).write_text(json.dumps({"name": "minatar_objectives", "tasks": {}}))
    assert main(["experiment", str(ROOT / "params/experiments/minatar_objectives.yaml"),
                 "--out", str(graph.out), "--dry-run"]) == 0  # fmt: skip
    plan = capsys.readouterr().out
    assert "pretrain/sgi__minatar-breakout  (75% left)" in plan
    assert (
        "finetune/reduced_lr__sgi/part1of4  [6 agents, ~0.35 GB as one population]  (70% left)"
        in plan
    )
    assert re.search(r"\nleft +164 ", plan) is None and re.search(r"\nleft +163 ", plan)


def test_the_report_of_a_finetuning_experiment_writes_the_study_tables_and_curves(tmp_path):
    """report.html's companion results.md: each objective's aggregates with the probability of
    improvement over none, each seed beside the same seed from scratch, and the learning curves
    drawn in curves.svg (the MinAtar study's report, from hand-made finished agents: SGI at
    0.4 + 0.1 seed against scratch's 0.2 + 0.1 seed on Asterix and Breakout)."""
    graph = graph_of("minatar_objectives", tmp_path)
    made = 0
    for task in graph.tasks:
        label = task.agent_folders[0].parent.name if task.kind == "finetune" else ""
        if label not in ("sgi_none", "reduced_lr__sgi"):
            continue
        base = 0.2 if label == "sgi_none" else 0.4
        for folder, (game, seed) in zip(task.agent_folders, task.agents, strict=True):
            if game not in ("minatar/asterix", "minatar/breakout"):
                continue
            score = base + 0.1 * seed
            folder.mkdir(parents=True)
            status = {"state": "finished", "kind": "finetune", "step": 10000}
            (folder / "status.json").write_text(json.dumps(status))
            (folder / "model.pt").write_bytes(b"")  # (the report reads no weights)
            (folder / "config.yaml").write_text(f"game: {game}\nseed: {seed}\n")
            evaluation = {"game": game, "mean": 10 * score, "scores": [10 * score]}
            evaluation |= {"normalized_score": score, "normalization": "MinAtar score"}
            (folder / "eval.json").write_text(json.dumps(evaluation))
            rows = [{"step": s, "episode/return": s / 1000 * score} for s in (1500, 5500, 9500)]
            (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            made += 1
    assert made == 12
    ex.write_report(graph, reps=100)
    text = (graph.out / "results.md").read_text()
    assert text.startswith("# minatar_objectives\n")
    assert "Finished agents: 12 of 180 (MinAtar score" in text
    row = next(line for line in text.splitlines() if line.startswith("| sgi |"))
    # P(sgi beats none): 8.5 of 9 seed pairs (0.4 against none's 0.4 is a tie, counted half)
    assert row.startswith("| sgi | 0.500 [") and "| 0.94 [" in row
    assert "| game | seed | none | sgi |" in text
    assert "| minatar/asterix | 2 | 4.00 | 6.00 |" in text  # seed 2: none 0.4, sgi 0.6 (x 10)
    assert "![Training returns against agent steps, per game and method](curves.svg)" in text
    assert (graph.out / "curves.svg").read_text().startswith("<svg")


def test_a_probe_task_costs_what_its_readout_was_measured_at(tmp_path):
    """The probe study's dry run: a logistic probe is costed at its measured rate (160 frames/s
    on the CPU), least squares at its own (1,100), so the same frames cost ~7x as long."""
    graph = graph_of("probes", tmp_path)
    probes = [t for t in graph.tasks if t.kind == "probe" and t.encoder == "nature"]
    by_readout = {}
    for task in probes:
        by_readout.setdefault(task.probe["readout"], task)
    assert {"lstsq", "logistic"} <= set(by_readout)
    hours = {}
    for readout, task in by_readout.items():
        one = dataclasses.replace(graph, tasks=(task,))
        hours[readout] = ex.estimate_cost(one)["total"]["hours"]["cpu"]
        assert hours[readout] == pytest.approx(
            task.steps / (160.0 if readout == "logistic" else 1100.0) / 3600
        )
    per_frame = {r: hours[r] / by_readout[r].steps for r in hours}  # (the 10k-frame reading)
    assert per_frame["logistic"] / per_frame["lstsq"] == pytest.approx(1100 / 160)


def test_first_takes_several_patterns_after_one_flag_or_repeated():
    """``--first a b`` and ``--first a --first b`` give the same patterns, in order."""
    from sgi_lab.launch.cli import build_parser

    parser = build_parser()
    one = parser.parse_args(["experiment", "x.yaml", "--first", "finetune/a/*", "data/b"])
    repeated = parser.parse_args(
        ["experiment", "x.yaml", "--first", "finetune/a/*", "--first", "data/b"]
    )
    assert one.first == repeated.first == ["finetune/a/*", "data/b"]
    assert parser.parse_args(["experiment", "x.yaml"]).first is None
