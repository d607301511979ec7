"""Grids of notebook runs: every point of a parameter grid through `run_notebook`.

::

    sweep("finetune", {"game": ["Pong", "Breakout"], "seed": [0, 1, 2]},
          params_file="params/finetune/reduced_lr.yaml")

runs 6 notebooks, each into its own run folder under ``outputs/sweeps/<name>/``, and writes
``sweep.json`` there: the grid, and per point its parameters, folder, state, error and results.
Points whose folder holds a finished run are skipped (reported ``finished``); failed or
interrupted ones run again and resume. The local executor runs ``max_parallel`` notebooks at a
time (each in its own kernel process); ``executor="ray"`` sends each point to a Ray cluster
(``pip install 'sgi-lab[sweep]'``; ``ray.init(address="auto")`` joins a running cluster, else a
local one is started).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sgi_lab.base.files import atomic_write_text
from sgi_lab.base.threads import thread_environment, thread_share, user_oversubscription
from sgi_lab.launch.notebook_runner import (
    NotebookRunError,
    RunExistsError,
    _add_common,
    _environment,
    parse_parameter,
    resolve_notebook,
    resolve_parameters,
    run_notebook,
)
from sgi_lab.notebook import run_folder_name
from sgi_lab.runs.folder import RunDir, run_name

__all__ = [
    "add_sweep_parser",
    "grid_points",
    "main_sweep",
    "parse_grid",
    "point_folder_name",
    "population_grid",
    "thread_budget",
    "sweep",
]

SWEEP_FILE = "sweep.json"
EXECUTORS = ("local", "ray")


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the last key varying fastest."""
    for key, values in grid.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ValueError(f"grid[{key!r}] must be a non-empty list, got {values!r}")
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def parse_grid(items: list[str] | None) -> dict[str, list[Any]]:
    """``["game=Pong,Breakout", "seed=0,1"]`` -> ``{"game": ["Pong", "Breakout"], "seed": [0, 1]}``."""
    grid: dict[str, list[Any]] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--grid {item!r} must look like key=v1,v2,...")
        key, raw = item.split("=", 1)
        grid[key.strip()] = [parse_parameter(v.strip()) for v in raw.split(",")]
    return grid


# Parameters that `run_folder_name` already puts in a folder's name.
_NAMED = ("name", "game", "seed")


def thread_budget(processes: int, cores: int | None = None) -> dict[str, str]:
    """The thread variables each of ``processes`` kernels running at once starts with (torch
    reads ``OMP_NUM_THREADS`` when a kernel starts), by the one rule of `sgi_lab.base.threads`: the
    user's explicit setting, else the kernel's share of the ``cores``; warns when the user's
    setting oversubscribes them."""
    note = user_oversubscription(processes, cores)
    if note:
        warnings.warn(note, stacklevel=2)
    return thread_environment(thread_share(processes, cores))


def population_grid(
    grid: dict[str, list[Any]], parameters: dict[str, Any] | None = None
) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Move the grid's ``game`` and ``seed`` axes into the ``games`` and ``seeds`` parameters of
    one population run per remaining grid point (an empty grid is one point).

    >>> population_grid({"game": ["Pong", "Breakout"], "seed": [0, 1], "name": ["a", "b"]})
    ({'name': ['a', 'b']}, {'games': ['Pong', 'Breakout'], 'seeds': [0, 1]})
    """
    if not {"game", "seed"} & set(grid):
        raise ValueError("population: the grid has neither a game nor a seed axis to fold")
    rest = {k: v for k, v in grid.items() if k not in ("game", "seed")}
    folded = dict(parameters or {})
    if "game" in grid:
        folded["games"] = list(grid["game"])
    if "seed" in grid:
        folded["seeds"] = list(grid["seed"])
    return rest, folded


def point_folder_name(
    notebook: str, params_file: str | None, parameters: dict[str, Any], grid_keys: list[str]
) -> str:
    """``<notebook>__<config>__<game>__s<seed>`` plus ``__<key><value>`` for every other grid
    key, so no two points of a grid share a folder."""
    resolved = resolve_parameters(params_file, parameters, notebook)
    extra = [f"{k}{parameters[k]}" for k in grid_keys if k not in _NAMED]
    return run_name(run_folder_name(Path(notebook).stem, resolved, params_file), *extra)


def _run_point(
    notebook: str,
    params_file: str | None,
    parameters: dict,
    out_root: str,
    overwrite: bool,
    name: str,
) -> dict[str, Any]:
    """Run one point; never raises (the outcome is returned for sweep.json)."""
    started = time.time()
    try:
        run_notebook(
            notebook,
            params_file,
            parameters,
            out_root=out_root,
            overwrite=overwrite,
            name=name,
            progress=False,
        )
        state, error = "finished", None
    except RunExistsError:  # done before: the folder's status holds its results
        state, error = "finished", None
    except NotebookRunError as exc:
        state, error = "failed", str(exc)
    except Exception as exc:  # a bad parameter, a kernel that would not start, ...
        state, error = "failed", f"{type(exc).__name__}: {exc}"
    return {"state": state, "error": error, "seconds": time.time() - started}


def _ray_executor() -> Any:
    """The experiments' `RayExecutor` on the cluster ``ray start`` runs on this machine, else
    on a private local one (no dashboard, token authentication)."""
    # lazy: the experiments package loads torch, which `sgi-lab sweep --help` must not pay for
    from sgi_lab.experiments.executors import RayExecutor

    try:
        return RayExecutor("auto", log_to_driver=True)
    except (ConnectionError, RuntimeError):
        return RayExecutor(None, log_to_driver=True)


def sweep(
    notebook: str,
    grid: dict[str, list[Any]],
    params_file: str | os.PathLike | None = None,
    parameters: dict[str, Any] | None = None,
    executor: str = "local",
    max_parallel: int = 1,
    out_root: str | os.PathLike | None = None,
    name: str | None = None,
    overwrite: bool = False,
    ray_options: dict[str, Any] | None = None,
    population: bool = False,
) -> dict[str, Any]:
    """Run ``notebook`` at every point of ``grid`` and summarise the outcomes in sweep.json.

    Args:
        notebook: notebook name or path (see `sgi_lab.launch.notebook_runner.resolve_notebook`).
        grid: ``{parameter: [values]}``; every combination is one run.
        params_file: parameters shared by every point (papermill ``-f``).
        parameters: more shared parameters (grid values win over them).
        executor: ``"local"`` (threads driving kernel processes) or ``"ray"``.
        max_parallel: runs at a time with the local executor (Ray schedules by resources).
        out_root: the sweep folder; default ``outputs/sweeps/<name>``.
        name: the sweep's name; default ``<notebook>__<params file stem>``.
        overwrite: re-run points whose folder holds a finished run.
        ray_options: resources of one run on Ray (``ray.remote`` options); default
            ``{"num_cpus": 1}``, e.g. ``{"num_cpus": 4, "num_gpus": 1}`` on a GPU cluster.
        population: (finetune notebook) fold the grid's ``game`` and ``seed`` axes into one
            run per remaining point that trains every (game, seed) pair as one population (the
            notebook's ``games`` and ``seeds`` parameters) instead of a run per pair.

    Returns:
        The sweep.json payload: ``notebook, params_file, grid, executor, points`` (each with
        ``parameters, folder, state, error, results``) and ``counts`` per state.

    Raises:
        ImportError: ``executor="ray"`` without Ray installed.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    nb_path = resolve_notebook(notebook)
    if population:
        grid, parameters = population_grid(grid, parameters)
    stem = Path(params_file).stem if params_file else "default"
    name = name or f"{nb_path.stem}__{stem}"
    root = Path(out_root) if out_root else Path("outputs/sweeps") / name
    points = grid_points(grid)
    file = None if params_file is None else str(params_file)
    calls = _point_calls(nb_path, file, grid, points, parameters, root, overwrite)
    for point in points:  # every point's parameters checked before anything is created
        resolve_parameters(file, {**(parameters or {}), **point}, nb_path)
    root.mkdir(parents=True, exist_ok=True)
    ray = _ray_executor() if executor == "ray" else None
    summary: dict[str, Any] = {
        "name": name,
        "notebook": str(nb_path),
        "params_file": file,
        "parameters": parameters or {},
        "grid": grid,
        "executor": executor,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "points": [],
    }
    outcomes = _run_calls(calls, ray, ray_options, max_parallel)
    summary["points"] = _point_rows(points, calls, outcomes, root)
    states = [p["state"] for p in summary["points"]]
    summary["counts"] = {s: states.count(s) for s in sorted(set(states))}
    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    atomic_write_text(root / SWEEP_FILE, json.dumps(summary, indent=2, default=str))
    return summary


def _point_calls(
    nb_path: Path,
    file: str | None,
    grid: dict[str, list[Any]],
    points: list[dict[str, Any]],
    parameters: dict[str, Any] | None,
    root: Path,
    overwrite: bool,
) -> list[tuple]:
    """`_run_point`'s arguments for every grid point, each point in a folder of its own."""
    calls = []
    for point in points:
        merged = {**(parameters or {}), **point}
        folder_name = point_folder_name(str(nb_path), file, merged, list(grid))
        calls.append((str(nb_path), file, merged, str(root), overwrite, folder_name))
    names = [call[-1] for call in calls]
    if len(set(names)) < len(names):
        raise ValueError(f"grid points share run folders: {names}")
    return calls


def _run_calls(
    calls: list[tuple],
    ray: Any,
    ray_options: dict[str, Any] | None,
    max_parallel: int,
) -> list[dict[str, Any]]:
    """Every point's outcome, in the order of ``calls``: on Ray, on ``max_parallel`` local
    kernels at a time, or one after another."""
    if ray is not None:
        return ray.map(_run_point, calls, ray_options or {"num_cpus": 1})
    if max_parallel > 1:
        # Each kernel gets its share of the cores: two 2-thread processes on 2 cores made a
        # 3.2 s pretraining step take 17 s.
        with _environment(thread_budget(max_parallel)), ThreadPoolExecutor(max_parallel) as pool:
            return list(pool.map(lambda call: _run_point(*call), calls))
    return [_run_point(*call) for call in calls]


def _point_rows(
    points: list[dict[str, Any]],
    calls: list[tuple],
    outcomes: list[dict[str, Any]],
    root: Path,
) -> list[dict[str, Any]]:
    """sweep.json's row per point: its grid values, folder, outcome and recorded results."""
    rows = []
    for point, call, outcome in zip(points, calls, outcomes):
        folder = root / call[-1]
        status = RunDir(folder).status() if folder.exists() else {}
        rows.append(
            {
                "grid": point,
                "folder": str(folder),
                "state": outcome["state"],
                "error": outcome["error"],
                "seconds": round(outcome["seconds"], 1),
                "results": status.get("results", {}),
            }
        )
    return rows


# -- command line -------------------------------------------------------------------------------


def main_sweep(args: argparse.Namespace) -> int:
    """``sgi-lab sweep NOTEBOOK -f PARAMS --grid key=v1,v2 ... [--executor local|ray]``."""
    grid = parse_grid(args.grid)
    if not grid:
        print("sgi-lab sweep: give at least one --grid key=v1,v2", file=sys.stderr)
        return 2
    summary = sweep(
        args.notebook,
        grid,
        params_file=args.params_file,
        parameters={k: parse_parameter(v) for k, v in (args.parameter or [])},
        executor=args.executor,
        max_parallel=args.max_parallel,
        out_root=args.sweep_dir,
        name=args.name,
        overwrite=args.overwrite,
        ray_options={"num_cpus": args.cpus_per_run, "num_gpus": args.gpus_per_run},
        population=args.population,
    )
    for point in summary["points"]:
        line = f"{point['state']:>8}  {point['folder']}"
        print(line + (f"  ({point['error']})" if point["error"] else ""))
    print(json.dumps(summary["counts"]))
    return 0 if summary["counts"].get("failed", 0) == 0 else 1


def add_sweep_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sweep`` on an argparse sub-parser set; the handler is ``args.handler``."""
    p = subparsers.add_parser(
        "sweep",
        help="run a notebook over a grid of parameters (locally or on Ray)",
        description="Run NOTEBOOK once per combination of the --grid values, each into its own "
        "run folder under outputs/sweeps/<name>/, and summarise the states in sweep.json.",
    )
    _add_common(p, run_options=False)
    p.add_argument(
        "--grid",
        action="append",
        metavar="KEY=V1,V2",
        help="values of one parameter, repeatable: --grid game=Pong,Breakout --grid seed=0,1,2",
    )
    p.add_argument(
        "--population",
        action="store_true",
        help="finetune: train the grid's games x seeds as one batched population per run",
    )
    p.add_argument("--executor", choices=EXECUTORS, default="local")
    p.add_argument("--max-parallel", type=int, default=1, help="local executor: runs at a time")
    p.add_argument("--name", default=None, help="sweep name (default <notebook>__<params stem>)")
    p.add_argument("--sweep-dir", default=None, help="sweep folder (default outputs/sweeps/<name>)")
    p.add_argument("--cpus-per-run", type=float, default=1, help="Ray executor: CPUs per run")
    p.add_argument("--gpus-per-run", type=float, default=0, help="Ray executor: GPUs per run")
    p.set_defaults(handler=main_sweep)
    return p
