"""`sgi-lab run` and `sgi-lab sweep`: run folders, status, refusal to overwrite, failure, resume."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import nbformat
import pytest
import yaml
from conftest import write_notebook

from sgi_lab import notebook
from sgi_lab.base.files import cpu_model
from sgi_lab.base.threads import (
    THREAD_VARIABLES,
    oversubscribed,
    thread_share,
    user_oversubscription,
    user_threads,
)
from sgi_lab.config import ConfigError, PretrainConfig
from sgi_lab.launch import notebook_runner, sweep
from sgi_lab.launch.notebook_runner import NotebookRunError, RunExistsError, run_notebook
from sgi_lab.runs.folder import RunDir

pytestmark = pytest.mark.smoke

PARAMETERS = 'x = 1\nseed = 0\nname = "tiny"\nfail = False\nout_dir = ""\n'
BODY = (
    "from sgi_lab import notebook\n"
    "if fail:\n"
    "    raise ValueError(f'boom {x}')\n"
    "notebook.record_results(out_dir, {'x': x, 'twice': 2 * x})\n"
)


@pytest.fixture
def tiny_notebook(tmp_path):
    """A throwaway notebook: a parameters cell, then a cell that fails on request."""
    return write_notebook(tmp_path / "tiny.ipynb", BODY, PARAMETERS)


@pytest.mark.notebooks
def test_run_notebook_writes_a_finished_run_folder(tiny_notebook, tmp_path):
    folder = run_notebook(
        tiny_notebook, parameters={"x": 3}, out_root=tmp_path / "runs", progress=False
    )
    assert folder == tmp_path / "runs" / "tiny__tiny__s0"
    status = RunDir(folder).status()
    assert status["state"] == "finished"
    assert status["results"] == {"x": 3, "twice": 6}
    assert [e["cpu"] for e in status["provenance"]] == [cpu_model()]  # what made it
    params = yaml.safe_load((folder / "params.yaml").read_text())
    assert params["x"] == 3 and params["out_dir"] == str(folder)
    executed = nbformat.read(folder / "tiny.ipynb", as_version=4)
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells)


@pytest.mark.skipif(sys.platform == "win32", reason="Unix sockets")
@pytest.mark.notebooks
def test_the_kernel_talks_over_private_unix_sockets_and_leaves_nothing(
    tmp_path, monkeypatch, capfd
):
    body = (
        "from ipykernel import get_connection_info\n"
        "from sgi_lab import notebook\n"
        "info = get_connection_info(unpack=True)\n"
        "notebook.record_results(out_dir, {k: info[k] for k in ('transport', 'ip')})\n"
    )
    nb = write_notebook(tmp_path / "conn.ipynb", body, 'seed = 0\nname = "c"\nout_dir = ""\n')
    sockets = tmp_path / "tmp"
    sockets.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(sockets))
    folder = run_notebook(nb, out_root=tmp_path / "runs", progress=False)
    results = RunDir(folder).status()["results"]
    assert results["transport"] == "ipc"
    assert results["ip"].startswith(str(sockets / "sgi-lab-kernel-"))  # a private folder...
    assert list(sockets.iterdir()) == []  # ...removed with its sockets at shutdown
    err = capfd.readouterr().err
    assert "running over TCP" not in err  # ipykernel's warning is gone
    # a normal shutdown is no interrupt: no "ERROR | KeyboardInterrupt caught in kernel"
    assert "KeyboardInterrupt" not in err, err


@pytest.mark.skipif(sys.platform == "win32", reason="Unix sockets")
def test_a_normal_kernel_shutdown_sends_no_interrupt(monkeypatch):
    """jupyter_client interrupts a kernel before shutting it down: a kernel busy with a
    message then logs "ERROR | KeyboardInterrupt caught in kernel" between the demo's stages."""
    import asyncio

    from jupyter_client.manager import KernelManager

    interrupts = []
    interrupt = KernelManager._async_interrupt_kernel

    async def counted(self):
        interrupts.append(1)
        await interrupt(self)

    monkeypatch.setattr(KernelManager, "_async_interrupt_kernel", counted)
    manager = notebook_runner._kernel_manager()["kernel_manager_class"](kernel_name="python3")

    async def start_and_stop():
        await manager.start_kernel()
        await manager.interrupt_kernel()  # an interrupt asked for still goes through
        await manager.shutdown_kernel()

    asyncio.run(start_and_stop())
    assert interrupts == [1] and not manager.has_kernel


@pytest.mark.notebooks
def test_refuses_to_overwrite_a_finished_run_unless_asked(tiny_notebook, tmp_path):
    root = tmp_path / "runs"
    folder = run_notebook(tiny_notebook, parameters={"x": 1}, out_root=root, progress=False)
    with pytest.raises(RunExistsError, match="overwrite"):
        run_notebook(tiny_notebook, parameters={"x": 1}, out_root=root, progress=False)
    (folder / "stale.txt").write_text("from the first run")
    again = run_notebook(
        tiny_notebook, parameters={"x": 5}, out_root=root, overwrite=True, progress=False
    )
    assert again == folder
    assert not (folder / "stale.txt").exists()  # overwrite starts from an empty folder
    assert RunDir(folder).status()["results"]["x"] == 5


@pytest.mark.notebooks
def test_failed_run_is_marked_and_then_resumed(tiny_notebook, tmp_path):
    root = tmp_path / "runs"
    with pytest.raises(NotebookRunError, match="boom 7") as info:
        run_notebook(
            tiny_notebook, parameters={"x": 7, "fail": True}, out_root=root, progress=False
        )
    folder = info.value.run_dir
    status = RunDir(folder).status()
    assert status["state"] == "failed"
    assert "ValueError: boom 7" in status["error"]
    assert status["failed_cell"] is not None
    executed = nbformat.read(folder / "tiny.ipynb", as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors and errors[0].ename == "ValueError"  # the notebook shows where it failed

    run_notebook(tiny_notebook, parameters={"x": 7}, out_root=root, progress=False)
    status = RunDir(folder).status()
    assert status["state"] == "finished"
    assert status["attempt"] == 2 and status["resumed"] is True
    assert status["error"] is None


@pytest.mark.notebooks
def test_params_file_and_parameters_precedence(tiny_notebook, tmp_path):
    params_file = tmp_path / "tiny_smoke.yaml"
    params_file.write_text("x: 10\nseed: 3\n")
    folder = run_notebook(
        tiny_notebook,
        params_file=params_file,
        parameters={"seed": 4, "name": ""},
        out_root=tmp_path / "runs",
        progress=False,
    )
    # name empty -> the file stem without its "<notebook>_" prefix
    assert folder.name == "tiny__smoke__s4"
    assert RunDir(folder).status()["results"]["x"] == 10


def test_run_folder_name_and_parameter_parsing():
    assert (
        notebook.run_folder_name(
            "pretrain", {"game": "Pong", "seed": 1}, "params/notebooks/pretrain_smoke.yaml"
        )
        == "pretrain__smoke__Pong__s1"
    )
    assert notebook.run_folder_name("pretrain", {"name": "sgi_m", "game": "ALE/Pong-v5"}) == (
        "pretrain__sgi_m__ALE-Pong-v5"
    )
    assert notebook_runner.parse_parameter("3") == 3
    assert notebook_runner.parse_parameter("1e-4") == pytest.approx(1e-4)
    assert notebook_runner.parse_parameter("true") is True
    assert notebook_runner.parse_parameter("Breakout") == "Breakout"
    assert notebook_runner.parse_parameter("{steps: 5}") == {"steps": 5}


def test_stage_config_precedence(tmp_path):
    params_file = tmp_path / "p.yaml"
    params_file.write_text("name: mine\nconfig:\n  encoder: nature\n  steps: 7\n")
    cfg, name = notebook.stage_config(PretrainConfig, str(params_file), {}, {}, "", seed=3)
    assert (cfg.encoder, cfg.steps, cfg.seed, name) == ("nature", 7, 3, "mine")
    # a non-empty config wins over the params file; overrides win over everything
    cfg, name = notebook.stage_config(
        PretrainConfig, str(params_file), {"steps": 9}, {"seed": 5}, "sgi_m", seed=3
    )
    assert (cfg.encoder, cfg.steps, cfg.seed, name) == ("resnet", 9, 5, "sgi_m")
    with pytest.raises(ConfigError, match="stepz"):
        notebook.stage_config(PretrainConfig, "", {"stepz": 1})


def test_run_dir_for(tmp_path):
    assert notebook.run_dir_for("datasets", str(tmp_path / "x")) == tmp_path / "x"
    folder = notebook.run_dir_for("pretrain", "", "sgi_m", "Pong", 0, root=tmp_path)
    assert folder == tmp_path / "pretrain__sgi_m__Pong__s0" and folder.is_dir()


@pytest.mark.notebooks
def test_cli_run_handler(tiny_notebook, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    notebook_runner.add_run_parser(parser.add_subparsers(dest="command"))
    argv = ["run", str(tiny_notebook), "-p", "x", "4", "--out-root", str(tmp_path), "--no-progress"]
    args = parser.parse_args(argv)
    assert args.handler(args) == 0
    folder = tmp_path / "tiny__tiny__s0"
    assert capsys.readouterr().out.strip() == str(folder)
    assert args.handler(args) == 2  # a finished run is kept
    err = capsys.readouterr().err
    assert err.startswith("sgi-lab run: error: ") and "already holds a finished run" in err
    assert err.index("--overwrite") < err.index("overwrite=True") and "--name NAME" in err
    # a failing notebook exits non-zero and names the executed notebook
    args = parser.parse_args([*argv[:-1], "-p", "fail", "true", "--name", "bad", "--no-progress"])
    assert args.handler(args) == 1
    assert "tiny.ipynb" in capsys.readouterr().err


@pytest.mark.notebooks
def test_sweep_local_executor(tiny_notebook, tmp_path):
    summary = sweep.sweep(
        str(tiny_notebook),
        {"x": [1, 2], "fail": [False, True]},
        out_root=tmp_path / "sweep",
        max_parallel=2,
    )
    states = {(p["grid"]["x"], p["grid"]["fail"]): p["state"] for p in summary["points"]}
    assert states == {
        (1, False): "finished",
        (1, True): "failed",
        (2, False): "finished",
        (2, True): "failed",
    }
    payload = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert payload["counts"] == {"failed": 2, "finished": 2}
    finished = [p for p in payload["points"] if p["state"] == "finished"]
    assert sorted(p["results"]["twice"] for p in finished) == [2, 4]


def test_sweep_grid_parsing():
    assert sweep.parse_grid(["game=Pong,Breakout", "seed=0,1"]) == {
        "game": ["Pong", "Breakout"],
        "seed": [0, 1],
    }
    assert sweep.grid_points({"a": [1, 2], "b": ["x"]}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    with pytest.raises(ValueError, match="non-empty"):
        sweep.grid_points({"a": []})


def test_sweep_ray_executor_without_ray_says_how_to_install(tiny_notebook, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r"sgi-lab\[sweep\]"):
        sweep.sweep(str(tiny_notebook), {"x": [1]}, executor="ray", out_root=tmp_path / "s")


@pytest.mark.slow
@pytest.mark.notebooks
def test_sweep_on_ray_runs_its_points_through_the_experiments_ray_executor(
    tiny_notebook, tmp_path, monkeypatch
):
    """A sweep on Ray (a private local cluster here) sends every point, with its resources,
    through `RayExecutor.map`, the executor experiments use."""
    ray = pytest.importorskip("ray")
    from sgi_lab.experiments.executors import RayExecutor

    sent = []
    ray_map = RayExecutor.map

    def spy(self, fn, calls, options):
        sent.append((len(calls), options))
        return ray_map(self, fn, calls, options)

    monkeypatch.setattr(RayExecutor, "map", spy)
    try:
        summary = sweep.sweep(
            str(tiny_notebook),
            {"x": [1, 2], "fail": [False, True]},
            executor="ray",
            out_root=tmp_path / "sweep",
            ray_options={"num_cpus": 1},
        )
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert sent == [(4, {"num_cpus": 1})]
    states = {(p["grid"]["x"], p["grid"]["fail"]): p["state"] for p in summary["points"]}
    assert states == {
        (1, False): "finished",
        (1, True): "failed",
        (2, False): "finished",
        (2, True): "failed",
    }
    finished = [p for p in summary["points"] if p["state"] == "finished"]
    assert sorted(p["results"]["twice"] for p in finished) == [2, 4]


def test_cli_sweep_parser(tmp_path):
    parser = argparse.ArgumentParser()
    sweep.add_sweep_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["sweep", "finetune", "-f", "p.yaml", "--grid", "game=Pong,Breakout", "--executor", "ray"]
    )
    assert args.handler is sweep.main_sweep
    assert args.grid == ["game=Pong,Breakout"] and args.executor == "ray"


@pytest.mark.notebooks
def test_sweep_population_folds_games_and_seeds_into_one_run_per_point(tmp_path):
    assert sweep.population_grid({"game": ["Pong"], "seed": [0, 1]}) == (
        {},
        {"games": ["Pong"], "seeds": [0, 1]},
    )
    with pytest.raises(ValueError, match="neither a game nor a seed"):
        sweep.population_grid({"x": [1]})
    body = "from sgi_lab import notebook\nnotebook.record_results(out_dir, {'x': x, 'games': games, 'seeds': seeds})\n"
    path = write_notebook(tmp_path / "pop.ipynb", body, PARAMETERS + "games = []\nseeds = []\n")
    grid = {"game": ["Pong", "Breakout"], "seed": [0, 1], "x": [1, 2]}
    summary = sweep.sweep(str(path), grid, out_root=tmp_path / "sweep", population=True)
    assert [p["state"] for p in summary["points"]] == ["finished", "finished"]
    results = sorted(
        (p["results"]["x"], p["results"]["games"], p["results"]["seeds"]) for p in summary["points"]
    )
    assert results == [(1, ["Pong", "Breakout"], [0, 1]), (2, ["Pong", "Breakout"], [0, 1])]


def _sweep_kernel_env(processes: int, cores: int) -> dict[str, str]:
    """The thread variables a sweep's kernels start with."""
    return sweep.thread_budget(processes, cores=cores)


def _experiment_task_env(processes: int, cores: int) -> dict[str, str]:
    """The thread variables an experiment's local task process is started with: what
    `run_command` hands `subprocess.Popen`, for a `LocalExecutor` share of ``cores``."""
    from sgi_lab.experiments import executors

    seen = {}

    class FakeProcess:
        pid = 2**22 + 1  # above any pid: the driver's niceness goes nowhere

        def __init__(self, command, env, **kwargs):
            seen.update(env)

        def wait(self):
            return 0

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(executors.subprocess, "Popen", FakeProcess)
        with tempfile.TemporaryDirectory() as folder:
            executors.run_command(["info"], f"{folder}/log.txt", thread_share(processes, cores))
    return {name: seen.get(name) for name in THREAD_VARIABLES}


@pytest.mark.parametrize("started_with", [_sweep_kernel_env, _experiment_task_env])
def test_one_thread_rule_for_sweep_kernels_and_experiment_tasks(started_with, monkeypatch):
    """The user's explicit thread count wins (every thread variable gets it, and one the user set
    keeps its value); otherwise each of the processes gets its share of the cores."""
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert started_with(2, 8) == dict.fromkeys(THREAD_VARIABLES, "4")
    assert started_with(4, 2) == dict.fromkeys(THREAD_VARIABLES, "1")  # at least one
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert started_with(2, 8) == dict.fromkeys(THREAD_VARIABLES, "3")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")  # each variable the user set is kept
    assert started_with(2, 8) == {
        "OMP_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
        "OPENBLAS_NUM_THREADS": "1",
    }
    # MKL_NUM_THREADS counts when OMP_NUM_THREADS is not set (torch reads them in that order).
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    assert started_with(2, 8) == dict.fromkeys(THREAD_VARIABLES, "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # empty: not a setting
    assert started_with(2, 8)["OMP_NUM_THREADS"] == "2"


def test_the_users_oversubscribing_thread_setting_is_kept_with_a_warning(monkeypatch):
    from sgi_lab.experiments.scheduler import _oversubscription

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with pytest.warns(UserWarning, match="OMP_NUM_THREADS=2 x 2 parallel runs oversubscribes 2"):
        assert sweep.thread_budget(2, cores=2)["OMP_NUM_THREADS"] == "2"
    assert "use OMP_NUM_THREADS=1" in user_oversubscription(2, cores=2)
    assert user_oversubscription(1, cores=2) is None  # 2 threads x 1 run fit 2 cores
    # The experiment driver warns the same way (the cores are this machine's there).
    cores = os.cpu_count() or 1
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores))
    graph = argparse.Namespace(params_files={})
    notes = _oversubscription(graph, 2)
    assert any(f"OMP_NUM_THREADS={cores} x 2 parallel runs oversubscribes" in n for n in notes)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _oversubscription(graph, 1) == []


@pytest.mark.parametrize(
    ("environ", "threads"),
    [
        ({}, None),
        ({"OMP_NUM_THREADS": "4"}, 4),
        ({"OMP_NUM_THREADS": "4,2"}, 4),  # OpenMP's threads per nesting level
        ({"OMP_NUM_THREADS": "0"}, None),
        ({"OMP_NUM_THREADS": "many", "MKL_NUM_THREADS": "2"}, None),  # torch reads OMP first
        ({"OMP_NUM_THREADS": " ", "MKL_NUM_THREADS": "2"}, 2),
        ({"OPENBLAS_NUM_THREADS": "3"}, None),  # not a count torch reads
    ],
)
def test_user_threads_reads_what_torch_reads(environ, threads):
    assert user_threads(environ) == threads


def test_oversubscribed_counts_threads_and_busy_workers():
    assert not oversubscribed(2, processes=1, cores=2)
    assert oversubscribed(2, processes=2, cores=2)
    assert oversubscribed(1, processes=1, extra=2, cores=2)  # a learner beside 2 env workers
    assert thread_share(3, cores=8) == 2 and thread_share(16, cores=8) == 1


@pytest.mark.notebooks
def test_sweep_kernels_start_with_the_users_thread_setting(tmp_path, monkeypatch):
    """End to end: two kernels running at once both see the user's OMP_NUM_THREADS (one more
    than their share of the cores, so the share would differ), and the thread variables the user
    did not set carry the same count."""
    body = (
        "import os\n"
        "from sgi_lab import notebook\n"
        "notebook.record_results(out_dir, {k: os.environ.get(k) for k in "
        f"{list(THREAD_VARIABLES)!r}}})\n"
    )
    path = write_notebook(tmp_path / "env.ipynb", body, PARAMETERS)
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    mine = str(thread_share(2) + 1)
    monkeypatch.setenv("OMP_NUM_THREADS", mine)
    with pytest.warns(UserWarning, match="oversubscribes"):
        summary = sweep.sweep(str(path), {"x": [1, 2]}, out_root=tmp_path / "sweep", max_parallel=2)
    assert [p["results"] for p in summary["points"]] == [dict.fromkeys(THREAD_VARIABLES, mine)] * 2


def test_a_mistyped_notebook_or_params_file_gets_a_did_you_mean(tmp_path):
    with pytest.raises(FileNotFoundError, match="did you mean pretrain\\?") as error:
        notebook_runner.resolve_notebook("pretrian")
    assert "(notebooks: ablations, datasets, finetune" in str(error.value)
    (tmp_path / "pretrain_smoke.yaml").write_text("seed: 1\n")
    with pytest.raises(FileNotFoundError, match="did you mean .*pretrain_smoke.yaml\\?"):
        notebook_runner.read_param_file(tmp_path / "pretrain_smok.yaml")
