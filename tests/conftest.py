"""Shared fixtures: synthetic stores whose frames encode their own row index."""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import shutil
import sys
import tempfile

# Under pytest-xdist (`make test` runs two workers on a 2-core machine) each worker and every
# process it starts (notebook kernels, CLI subprocesses) gets one thread: two workers with two
# OpenMP threads each on two cores thrash (a 3.2 s step took 17 s). Set before torch starts.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_key, "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from sgi_lab.data import TransitionStore, TransitionStoreWriter

# "auto" CPU settings are settled by measuring the real step (sgi_lab.runtime.cpu_settings): tests
# pin them to the former defaults instead (timings on a shared test machine mean nothing, and
# measuring in every test would cost minutes); tests/runtime/test_cpu_settings.py measures for real.
# Child processes (notebook kernels, CLI subprocesses) inherit both variables.
os.environ.setdefault("SGI_LAB_CPU_SETTINGS", "cpu_amp=true,channels_last=true")
# UMAP compiles with numba: keep its cache between sessions so the compile (~50 s cold on 2
# cores) is paid once per machine, not per test run.
os.environ.setdefault(
    "NUMBA_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "sgi-lab-numba")
)
if "SGI_LAB_CACHE" not in os.environ:
    # One cache for the run: the process that makes it (pytest, or xdist's controller) removes
    # it at exit; workers and subprocesses inherit the variable and leave it alone.
    os.environ["SGI_LAB_CACHE"] = tempfile.mkdtemp(prefix="sgi-lab-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SGI_LAB_CACHE"], ignore_errors=True)


def encode_row(row: int) -> np.ndarray:
    """A frame that says which row it is: bytes 0..2 hold the index, byte 3 marks 'real'."""
    frame = np.zeros((84, 84), np.uint8)
    frame[0, 0], frame[0, 1], frame[0, 2] = row & 255, (row >> 8) & 255, (row >> 16) & 255
    frame[0, 3] = 1
    return frame


def decode_rows(frames: np.ndarray) -> np.ndarray:
    """Inverse of :func:`encode_row` for any leading shape; -1 for an all-zero (padding) frame."""
    f = frames.astype(np.int64)
    rows = f[..., 0, 0] + (f[..., 0, 1] << 8) + (f[..., 0, 2] << 16)
    return np.where(f[..., 0, 3] == 1, rows, -1)


def build_store(
    path,
    episodes: list[dict],
    chunk_size: int = 7,
    rewards: np.ndarray | None = None,
    actions: np.ndarray | None = None,
) -> TransitionStore:
    """Write a store from episode specs: ``{"length": n, "terminal": bool, "life_loss": [i..]}``.

    ``terminal`` marks the episode's last row terminal (else it was truncated); ``life_loss``
    lists in-episode row offsets that are terminal while the episode continues.
    """
    writer = TransitionStoreWriter.create(
        path, game="Pong", source="synthetic", num_actions=6, chunk_size=chunk_size
    )
    row = 0
    for spec in episodes:
        for i in range(spec["length"]):
            terminal = (i == spec["length"] - 1 and spec.get("terminal", False)) or i in spec.get(
                "life_loss", []
            )
            writer.append(
                encode_row(row),
                int(actions[row]) if actions is not None else row % 6,
                float(rewards[row]) if rewards is not None else 0.0,
                terminal,
                i == 0,
            )
            row += 1
    return TransitionStore(writer.close())


@pytest.fixture
def store_factory(tmp_path):
    counter = iter(range(1000))

    def make(episodes, **kwargs):
        return build_store(tmp_path / f"store{next(counter)}", episodes, **kwargs)

    return make


def moving_dot_store(
    path, rows: int = 3000, seed: int = 0, episode_length: int = 200, num_actions: int = 5
) -> TransitionStore:
    """A store whose next frame shows the action just taken: action a in 1..4 lights up a
    42x42 quadrant of the next frame, action 0 leaves it dark (chance is 1/5). Inverse dynamics
    is learnable from it in a few dozen steps: a quick end-to-end check that pretraining learns.
    ``num_actions=6`` (Pong's action set, for finetuning from it) adds a second dark action.
    """
    rng = np.random.default_rng(seed)
    corners = [None, (0, 0), (0, 42), (42, 0), (42, 42)]
    writer = TransitionStoreWriter.create(
        path, game="Pong", source="quadrants", num_actions=num_actions, chunk_size=1000
    )
    previous = 0
    for t in range(rows):
        first = t % episode_length == 0
        frame = np.full((84, 84), 20, np.uint8)
        if previous < len(corners) and corners[previous] is not None and not first:
            r, c = corners[previous]
            frame[r : r + 42, c : c + 42] = 255
        action = int(rng.integers(num_actions))
        writer.append(frame, action, 0.0, t % episode_length == episode_length - 1, first)
        previous = action
    return TransitionStore(writer.close())


@pytest.fixture
def one_thread():
    """One torch thread for the test: on a busy 2-core machine two OpenMP threads per process
    thrash, and one is up to 10x faster there."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def pong_store(tmp_path_factory):
    """A small Random Pong store shared by the notebook runs (papermill and browser tiers)."""
    from sgi_lab.data.collect import collect_random

    path = tmp_path_factory.mktemp("data") / "pong_random"
    return collect_random("Pong", 1_200, path, seed=0, progress=False).path


def write_finetune_run(root, method: str, game: str, seed: int, mean: float):
    """A finetuning run folder as the ablations notebook finds it: ``status.json``, ``eval.json``
    and config."""
    import json

    run = root / f"finetune__{method}__{game}__s{seed}"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    (run / "eval.json").write_text(json.dumps({"game": game, "mean": mean, "scores": [mean]}))
    (run / "config.yaml").write_text(f"game: {game}\nseed: {seed}\n")
    return run


def write_notebook(path, body: str, parameters: str | None = None):
    """A throwaway Python notebook at ``path``: a ``parameters`` cell (when given), then one
    code cell; returns the path."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    cells = []
    if parameters is not None:
        params = nbformat.v4.new_code_cell(parameters)
        params.metadata["tags"] = ["parameters"]
        cells.append(params)
    nb.cells = [*cells, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def run_mtimes(root) -> dict[str, int]:
    """Modification times of an experiment folder's results (manifests, statuses, models),
    by path under ``root``: what a resumed experiment must leave untouched."""
    from pathlib import Path

    root = Path(root)
    return {
        str(p.relative_to(root)): p.stat().st_mtime_ns
        for kind in ("data", "pretrain", "finetune")
        for p in (root / kind).rglob("*")
        if p.name in ("manifest.json", "status.json", "model.pt")
    }


def kill_once_a_pretraining_run_finishes(proc, root, timeout: float = 300) -> None:
    """SIGKILL ``proc``'s whole process group (an experiment's driver and tasks, started with
    ``start_new_session=True``) once a run under ``root/pretrain`` reports finished.

    Raises:
        AssertionError: the experiment ended before it could be killed.
    """
    import json
    import signal
    import time
    from pathlib import Path

    try:
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            states = [
                json.loads(p.read_text() or "{}") for p in Path(root).glob("pretrain/*/status.json")
            ]
            if any(s.get("state") == "finished" for s in states):
                break
            time.sleep(0.5)
        assert proc.poll() is None, "the experiment ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# -- the notebooks tier ------------------------------------------------------------------------
# Executing a notebook starts a Jupyter kernel that imports torch, plotly and sgi_lab again, then
# runs the notebook's cells: the default suite's costliest tests. They are the `notebooks` tier
# (`make test-notebooks`, which CI runs after the default suite), and a test that executes a
# notebook without that marker (or the browser tier's) fails, named: papermill's engine, through
# which every notebook execution in a test's process passes, is guarded once papermill is
# imported (importing it here would cost every worker a second). tests/test_suite_rules.py
# checks the guard.
NOTEBOOK_TIERS = ("notebooks", "browser")
UNMARKED_EXECUTION = pytest.StashKey[str]()
_running: list[pytest.Item] = []  # the test whose setup, call or teardown is running


def refuse_notebook_executions_outside_the_tier(engines_class) -> None:
    """Wrap ``engines_class.execute_notebook_with_engine`` (papermill's ``PapermillEngines``):
    a test without a notebook tier's marker that executes a notebook fails, named."""
    execute = engines_class.execute_notebook_with_engine

    def guarded(self, *args, **kwargs):
        item = _running[-1] if _running else None
        if item is not None and not any(item.get_closest_marker(m) for m in NOTEBOOK_TIERS):
            item.stash[UNMARKED_EXECUTION] = (
                f"{item.nodeid} executes a notebook without the notebooks marker: mark it "
                "@pytest.mark.notebooks (the tier make test-notebooks runs, and CI after the "
                "default suite)"
            )
            pytest.fail(item.stash[UNMARKED_EXECUTION], pytrace=False)
        return execute(self, *args, **kwargs)

    engines_class.execute_notebook_with_engine = guarded


class _GuardPapermillOnImport(importlib.abc.MetaPathFinder):
    """Guards papermill's engines as the module ``papermill.engines`` is first imported."""

    def find_spec(self, name, path=None, target=None):
        if name != "papermill.engines":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            refuse_notebook_executions_outside_the_tier(module.PapermillEngines)

        spec.loader.exec_module = exec_module
        return spec


if "papermill.engines" in sys.modules:
    refuse_notebook_executions_outside_the_tier(sys.modules["papermill.engines"].PapermillEngines)
else:
    sys.meta_path.insert(0, _GuardPapermillOnImport())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test whose code caught the guard's failure fails all the same."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.passed and UNMARKED_EXECUTION in item.stash:
        report.outcome, report.longrepr = "failed", item.stash[UNMARKED_EXECUTION]
