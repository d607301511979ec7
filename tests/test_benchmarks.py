"""The GPU session's scripts run (on a CPU, tiny sizes): a broken script costs device time."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.smoke
def test_population_phases_runs_and_reports_every_phase(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import population_phases

    out = tmp_path / "phases.json"
    argv = ["population_phases.py", "--agents", "2", "--encoders", "nature", "--batch-size", "4"]
    argv += ["--rows", "120", "--steps", "1", "--batching", "vmap", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    population_phases.main()
    (row,) = json.loads(out.read_text())
    assert row["agents"] == 2 and row["batching"] == "vmap" and row["updates_per_step"] == 2
    for phase in ("act", "append", "sample", "update", "write_priorities", "learn", "step"):
        assert row[phase]["median_s"] > 0 and row[phase]["ops"] > 0
    # The learning step is sample + update + priorities; a step adds acting, an append and two.
    assert row["learn"]["ops"] >= row["update"]["ops"] + row["sample"]["ops"]
    assert row["envs"] is None and row["gpu_busy"] is None
    assert row["projected_100k_min"] == pytest.approx(row["step"]["median_s"] * 1e5 / 60)


def test_gpu_scripts_parse():
    for script in ("prepare.sh", "run.sh"):
        subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu" / script)], check=True)


def test_every_command_parses_and_trains_without_what_the_gpu_image_lacks():
    """The GPU image has torch but no plotly, papermill, Jupyter or UMAP
    (benchmarks/gpu/image_site): `sgi-lab`'s parser and the training modules import there.
    The first H100 slot (2026-11-26) would have lost its curve to a plotly import via the parser."""
    import os

    code = (
        "from sgi_lab.launch.cli import build_parser\n"
        "build_parser()\n"
        "import sgi_lab.train.pretrain, sgi_lab.train.finetune, sgi_lab.train.population\n"
        "import sgi_lab.base.driver, sgi_lab.probes.encoder_probe\n"
        "import sys\n"
        "print(sorted(m for m in ('papermill', 'nbformat', 'ipywidgets', 'umap') if m in sys.modules))\n"
    )
    site = ROOT / "benchmarks" / "gpu" / "image_site"
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
    blocked = subprocess.run(
        [sys.executable, "-c", "import papermill"], env=env, capture_output=True, text=True
    )
    assert "absent on the GPU image" in blocked.stderr  # the stand-in blocks what it should


def rehearse(job: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """``SGI_REHEARSAL=1 bash benchmarks/gpu/run.sh JOB`` with this interpreter as python3."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    environ = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SGI_REHEARSAL": "1"}
    environ.update(OUT=str(tmp_path / "out"), SGI_REHEARSAL_ROOT=str(tmp_path / "runs"), **env)
    script = str(ROOT / "benchmarks" / "gpu" / "run.sh")
    return subprocess.run(
        ["bash", script, *job], cwd=ROOT, env=environ, capture_output=True, text=True
    )


@pytest.mark.slow
def test_the_26_game_job_stops_at_its_limit_resumes_and_reports(tmp_path):
    """The GPU session's benchmark26 job, rehearsed on two games: a call stopped by its time
    limit exits 75 with every agent checkpointed; calls again resume until the evaluation has
    run, and the report's CSV lists both games."""
    first = rehearse(["benchmark26", "nature"], tmp_path, SGI_REHEARSAL_STOP="2")
    assert first.returncode == 75, first.stdout + first.stderr
    assert "stopped at step" in first.stdout
    for _ in range(8):
        last = rehearse(["benchmark26", "nature"], tmp_path, SGI_REHEARSAL_STOP="60")
        if last.returncode != 75:
            break
    assert last.returncode == 0, last.stdout + last.stderr
    assert '2 "state": "finished"' in last.stdout
    report = (tmp_path / "out" / "benchmark26_nature.csv").read_text()
    assert "Breakout" in report and "Pong" in report


@pytest.mark.slow
def test_the_first_gpu_job_runs_every_part(tmp_path):
    result = rehearse(["first"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "out"
    names = {p.name for p in out.iterdir()}
    expected = {"checks.txt", "phases.json", "pretrain.json", "pretrain_eager.json"}
    assert expected | {"sampling.txt", "memory.txt", "vector_env.json"} <= names
    assert "passed" in (out / "checks.txt").read_text()
    assert len(json.loads((out / "phases.json").read_text())) == 8  # 2 encoders x 2 x N = 1, 2
    assert "largest_population" in (out / "memory.txt").read_text()


@pytest.mark.smoke
def test_ale_vector_env_plays_our_frames_and_reports_its_speed(tmp_path, monkeypatch):
    """With no-op starts off, ale-py's AtariVectorEnv gives our observations, rewards and
    episode ends step for step (the check `vector_env_check.py` makes on five games)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    pytest.importorskip("ale_py.vector_env")
    import vector_env_check

    out = tmp_path / "vector_env.json"
    argv = ["vector_env_check.py", "--games", "Breakout", "--steps", "300", "--resets", "32"]
    argv += ["--speed-envs", "2", "--speed-steps", "5", "--threads", "1", "--workers", "0"]
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(out)])
    vector_env_check.main()
    result = json.loads(out.read_text())
    (row,) = result["protocol"]
    assert row["steps_that_differ"] == 0 and row["episodes_ended"] >= 1
    assert row["same_first_observation"] and row["same_action_count"]
    low, high = result["noop_frames"]
    assert (low["noop_max"], high["noop_max"]) == (30, 31) and high["max"] <= 30
    assert set(result["env_steps_per_s"]) == {
        "AtariVectorEnv, 1 thread(s)",
        "EnvPool, in this process",
    }


@pytest.mark.slow
def test_the_gpu_slot_runs_every_part_and_writes_as_it_goes(tmp_path):
    """The 15-minute GPU slot's one command, rehearsed on the CPU at toy sizes: every part runs
    and leaves its files in $OUT (checks, the population's phases, pretraining speed, the
    probed pretraining curve of both objectives)."""
    result = rehearse(["slot"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "out"
    names = {p.name for p in out.iterdir()}
    expected = {
        "checks.txt",
        "population26_nature.json",
        "population26_resnet.json",
        "pretrain.json",
        "curve_sgi_m_metrics.jsonl",
        "curve_s_metrics.jsonl",
    }
    assert expected <= names, sorted(names)
    for objective in ("sgi_m", "s"):
        rows = (out / f"curve_{objective}_metrics.jsonl").read_text().splitlines()
        probed = [row for row in rows if '"probe/f1"' in row]
        assert len(probed) >= 5, f"{objective}: {len(probed)} probes"
    for part in ("checks", "population26", "pretrain", "curve"):
        assert f"slot: {part} done at" in result.stdout


def test_minatar_update_benchmark_times_a_population_loop_and_vmap(tmp_path):
    """benchmarks/minatar_speed.py update: a row per population size and batching, per-agent
    time the population's divided by its size."""
    pytest.importorskip("minatar")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "minatar_speed.py"), "update", "--agents",
         "1", "2", "--repeats", "1", "--threads", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout[done.stdout.index("{\n") :])
    rows = {(r["agents"], r["batching"]): r for r in result["update"]}
    assert set(rows) == {(1, "loop"), (2, "loop"), (2, "vmap")}
    for (n, _), row in rows.items():
        assert row["ms"] > 0 and row["ms_per_agent"] == pytest.approx(row["ms"] / n)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason="needs minatar")
def test_the_shared_minatar_population_job_measures_and_projects_the_study(tmp_path):
    """The GPU command's first shared population, rehearsed: stand-in pretrained runs, one agent
    of each of 4 configs (reduced-lr, naive and from scratch side by side in one population),
    stopped by its cap, and the whole study's finetuning projected from its speed."""
    result = rehearse(["minatar_shared", "60"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    measured = json.loads((tmp_path / "out" / "minatar_shared.json").read_text())
    labels = {name.split("/")[1] for name in measured["agents"]}
    assert labels == {"reduced_lr__s", "reduced_lr__bc", "sgi_none", "naive__sgi"}
    assert measured["study_agents"] == 300 and measured["study_populations"] == 8
    assert measured["study_agent_steps"] == 300 * 100_000
    assert measured["projected_minutes"] > 0
    assert "finetune exit 75" in result.stdout


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason="needs minatar")
def test_the_recheck_job_asks_its_device_and_runs_every_part(tmp_path):
    """The next GPU slot's first command, rehearsed: the autocast-inside-vmap question asked of
    the machine's own device (the CPU here), the CUDA tests (skipped here), the Nature population
    phases and the MinAtar population, each leaving its file in $OUT."""
    result = rehearse(["recheck"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "out"
    autocast = (out / "autocast.txt").read_text()
    assert "autocast_reaches_vmap(cpu):" in autocast and "Traceback" not in autocast
    assert "conv, autocast outside ->" in autocast
    assert {"checks_full.txt", "population26_nature.json"} <= {p.name for p in out.iterdir()}
    assert "minatar: 2 agents, median agent steps/s" in result.stdout


def test_the_sum_tree_op_count_shows_the_prefix_walk_cheaper(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import sum_tree_ops

    out = tmp_path / "ops.json"
    sum_tree_ops.main(["--agents", "2", "--capacity", "300", "--json", str(out)])
    (row,) = json.loads(out.read_text())
    # 300 rows: a 9-level tree; the prefix walk's operators do not grow with the depth
    assert row["prefix"]["find"] < row["tree"]["find"] / 5
    assert row["prefix"]["write"] < row["tree"]["write"]
    assert row["tree"]["total"] == 0 and row["prefix"]["total"] == 1


def test_the_gpu_script_refuses_a_bad_job_cap_or_out_before_running_anything(tmp_path):
    def run(*args: str, out: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), *args],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "OUT": str(out), "SGI_REHEARSAL": "1"},
            capture_output=True,
            text=True,
        )

    bogus = run("bogus", out=tmp_path / "o")
    assert bogus.returncode == 2 and "minatar_shared" in bogus.stdout  # every job listed
    assert "Python" not in bogus.stdout  # refused before anything ran
    for cap in ("-5", "0", "ten"):
        result = run("minatar", cap, out=tmp_path / "o")
        assert result.returncode == 2 and "whole number of seconds above 0" in result.stdout
    taken = tmp_path / "file"
    taken.write_text("mine")
    result = run("minatar", "5", out=taken)
    assert result.returncode == 2 and "is not a folder" in result.stdout
    assert taken.read_text() == "mine"


@pytest.mark.slow
def test_the_speedlab_job_runs_every_part(tmp_path):
    """The GPU path's speed command, rehearsed on the CPU at toy sizes: anchors, the CUDA
    checks, the learn step in three precisions with a kernel table each, ResNet's population
    and MinAtar's, each leaving its file in $OUT."""
    pytest.importorskip("minatar")
    result = rehearse(["speedlab"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "out"
    anchors = json.loads((out / "anchors.json").read_text())
    assert anchors["copy_gb_per_s"] > 0 and anchors["autocast_reaches_vmap"] in (True, False)
    rows = json.loads((out / "speedlab_nature.json").read_text())
    assert [r["kernels"]["launches"] > 0 for r in rows] == [True] * 3
    assert (out / "checks.txt").read_text().strip()  # ran (its cap may cut it on a loaded CPU)
    assert json.loads((out / "speedlab_resnet.json").read_text())[0]["encoder"] == "resnet"
    assert json.loads((out / "minatar.json").read_text())


def test_learn_step_op_counts_by_phase_add_up_and_match_the_sum_tree_benchmark():
    """benchmarks/learn_ops.py: the phases of one learn step add up to the whole, the update's
    parts to the update; prefix sampling dispatches fewer operators than the tree walk by what
    benchmarks/sum_tree_ops.py counts for the tree alone; counts do not depend on the batch."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import learn_ops
        import sum_tree_ops
    finally:
        sys.path.pop(0)
    rows = learn_ops.main(
        ["--cases", "minatar:2", "--batch-size", "2", "--rows", "64", "--check-batch", "3"]
    )
    prefix, tree = rows
    for row in rows:
        assert row["learn"] == row["sample"] + row["update"] + row["priorities"]
        assert row["update"] == sum(row["update_parts"].values())
        assert row["update_parts"]["forward"] > 0 and row["update_parts"]["backward"] > 0
        assert row["update_parts"]["adam"] >= 1 and row["act"] > 0
    assert prefix["update"] == tree["update"]
    ops = sum_tree_ops.tree_ops(2, 64, batch=2)
    # the walks' stratified draws and writes, and the uniforms: the tree walk's default draws
    # per agent (2 draws and their stack), the prefix walk's once for the population (1)
    saved = sum(ops["tree"][k] - ops["prefix"][k] for k in ("draw", "write")) + 3 - 1
    assert tree["learn"] - prefix["learn"] == saved
