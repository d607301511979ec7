"""An experiment's data sources as tasks (`sgi_lab.experiments.graph` builds the `Task`s):
collected, imported, an agent's replay exported, or Weak and Mixed selected from one.

A source of kind ``replay`` exports each game's agent of a pretraining config of kind ``agent``
(``sgi-lab export replay``), after that agent's task; ``weak`` and ``mixed`` select from a
``replay`` source's store (``sgi-lab select``), after its export. Either may name a folder
instead (``{game}`` filled in): a finished run, or a replay store made elsewhere.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from sgi_lab.config import FinetuneConfig, load_config
from sgi_lab.experiments.spec import DataSpec, Experiment
from sgi_lab.runs.folder import run_name

__all__ = [
    "data_task_fields",
    "data_used",
    "dependency_order",
    "fill",
    "fill_values",
    "needs_missing",
]

SELECTIONS = ("weak", "mixed")


def fill(text: str, values: dict[str, Any]) -> str:
    """``text`` with ``{name}`` filled from ``values``; unknown names are kept as they are."""

    class Keep(dict):
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    return text.format_map(Keep({k: v for k, v in values.items()}))


def fill_values(experiment: Experiment, game: str) -> dict[str, Any]:
    """What a data source's ``src`` (and ``make``) fill in for ``game``: the experiment's
    parameters, ``{game}`` as written (``minatar/breakout``) and ``{game_folder}`` as run
    folders spell it (``minatar-breakout``: another experiment's ``data/weak__{game_folder}``)."""
    return {**experiment.parameters, "game": game, "game_folder": run_name(game)}


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def needs_missing(spec: DataSpec, parameters: dict[str, Any]) -> list[str]:
    """The parameters a data source names in ``src`` that were not given (null)."""
    names = [
        f
        for _, f, _, _ in string.Formatter().parse(spec.src or "")
        if f and f not in ("game", "game_folder", "run")
    ]
    return [n for n in names if parameters.get(n) is None]


def data_used(experiment: Experiment, missing: dict[str, list[str]]) -> set[str]:
    """The data sources something reads: pretraining configs and probes, and the replays their
    Weak and Mixed selections are taken from; in a file that only makes data (no finetuning or
    probes), every source: the data is what it is for."""
    if not experiment.finetune and not experiment.probe:
        return {name for name in experiment.data if name not in missing}
    readers = [*experiment.pretrain, *experiment.probe]
    used = {p.data for p in readers if p.data and p.data not in missing}
    todo = list(used)
    while todo:
        spec = experiment.data.get(todo.pop())
        if spec is not None and spec.source in SELECTIONS and spec.src in experiment.data:
            if spec.src not in used:
                used.add(spec.src)
                todo.append(spec.src)
    return used


def dependency_order(tasks: Sequence[Any]) -> tuple[Any, ...]:
    """``tasks`` (with ``id`` and ``deps``) reordered so that each comes after its inputs,
    otherwise in the given order (a replay's export after the agent that makes it)."""
    placed: set[str] = set()
    ids = {t.id for t in tasks}
    order: list[Any] = []
    left = list(tasks)
    while left:
        ready = next(t for t in left if all(d in placed or d not in ids for d in t.deps))
        left.remove(ready)
        order.append(ready)
        placed.add(ready.id)
    return tuple(order)


def _agent_steps(experiment: Experiment, name: str) -> int:
    """The steps of a pretraining config of kind ``agent`` (the rows of its replay)."""
    spec = next(p for p in experiment.pretrain if p.name == name)
    config = load_config(FinetuneConfig, spec.params, {**spec.set, "pretrained": None})
    return config.steps


def _replay_fields(spec: DataSpec, game: str, out: Path, experiment: Experiment, folder: Path):
    """``(argv, deps, rows)`` of a replay's export or a selection of one."""
    values = fill_values(experiment, game)
    agents = {p.name for p in experiment.pretrain}
    if spec.source == "replay":
        if spec.src in agents:
            run = out / "pretrain" / run_name(spec.src, game)
            deps, rows = (f"pretrain/{run.name}",), _agent_steps(experiment, spec.src)
        else:
            run, deps, rows = Path(fill(spec.src or "", values)), (), 0
        return ("export", "replay", str(run), str(folder)), deps, rows
    if spec.src in experiment.data:
        store = out / "data" / run_name(spec.src, game)
        deps = (f"data/{store.name}",)
        replay = experiment.data[spec.src]
        rows = _agent_steps(experiment, replay.src) if replay.src in agents else 0
    else:
        store, deps, rows = Path(fill(spec.src or "", values)), (), 0
    argv: tuple[str, ...] = ("select", str(store), str(folder))
    if spec.source == "weak":
        return (*argv, "--weak", str(spec.fraction)), deps, math.floor(spec.fraction * rows)
    argv = (*argv, "--mixed", str(spec.steps), "--seed", str(spec.seed))
    return (*argv, "--segment", str(spec.segment)), deps, spec.steps


def data_task_fields(
    name: str, spec: DataSpec, game: str, out: Path, experiment: Experiment
) -> dict[str, Any]:
    """The `sgi_lab.experiments.graph.Task` fields of data source ``name`` for ``game``, but
    its resources: id, kind, folder, deps, argv, stage and steps (rows written)."""
    folder = out / "data" / run_name(name, game)
    values = fill_values(experiment, game)
    common = ("--game", game, "--out", str(folder), "--no-progress")
    deps: tuple[str, ...] = ()
    if spec.source == "random":
        argv = ("collect", "random", "--steps", str(spec.steps), "--seed", str(spec.seed))
        argv = (*argv, "--env-protocol", spec.env_protocol, *common)
        steps, stage = spec.steps, "collect_random"
    elif spec.source == "exploratory":
        extra = ("--params", spec.params) if spec.params else ()
        sets = tuple(x for k, v in spec.set.items() for x in ("--set", f"{k}={_yaml_value(v)}"))
        argv = ("collect", "exploratory", "--steps", str(spec.steps), "--seed", str(spec.seed))
        argv = (*argv, *extra, *sets, *common)
        steps, stage = spec.steps, "collect_exploratory"
    elif spec.source in ("replay", *SELECTIONS):
        argv, deps, steps = _replay_fields(spec, game, out, experiment, folder)
        stage = "export_replay" if spec.source == "replay" else "select_replay"
    else:  # dqn_replay
        runs: list[int | None] = list(spec.runs) or [None]
        srcs = tuple(
            fill(spec.src or "", values if r is None else {**values, "run": r}) for r in runs
        )
        argv = ("import", "dqn-replay", "--src", *srcs, "--checkpoints")
        argv = (*argv, ",".join(map(str, spec.checkpoints)))
        if spec.samples is not None:
            argv = (*argv, "--samples", str(spec.samples))
        argv = (*argv, *common)
        per = spec.samples or 1_000_000
        steps, stage = per * len(spec.checkpoints) * len(runs), "import_dqn_replay"
    return {
        "id": f"data/{folder.name}",
        "kind": "data",
        "folder": folder,
        "deps": deps,
        "argv": argv,
        "stage": stage,
        "steps": steps,
    }
