"""What an archived study cost: each task's training hours from its own logged speeds, by part
of the study (an arm's populations, a pretraining config's encoders), with the commits and CPUs
it ran on (`study_cost`, `cost_markdown`; a page block of `results_pages`).

A task's hours are the sum over its logged intervals of the interval's steps over the speed it
logged: ``charts/sps`` (steps a second of a finetuning population, or an agent alone) or
``charts/samples_per_s`` over the batch size (pretraining). The agents of one population share
its loop and log the same speed, so a population counts once (its slowest agent). Start-up,
evaluation and time a task spent stopped (a driver killed, resumed later) are not counted; a
task that logs no speed (a store) is counted as a task with no hours, and so is a probe (its
results go into its encoder's folder, whose logged speeds are the encoder's). The figure is
the work on whatever machine and load the task met (its status records the CPU), not a
benchmark: benchmarks/README.md has those.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sgi_lab.base.files import read_jsonl
from sgi_lab.data.replay_export import commit_history
from sgi_lab.experiments.archive import task_folders
from sgi_lab.experiments.graph import Graph

__all__ = [
    "cost_markdown",
    "folder_hours",
    "graph_cost",
    "logged_hours",
    "study_cost",
    "study_part",
    "task_costs",
]

_DRAW_AND_AFTER = re.compile(r"__d\d+(__.*)?$")


def study_part(task_id: str) -> str:
    """The part of a study a task belongs to: its kind and name without the draw and the game
    (``finetune/reduced_lr__sgi_m__d0/part1of2`` -> ``finetune/reduced_lr__sgi_m``,
    ``pretrain/sgi_m__d2__minatar-breakout`` -> ``pretrain/sgi_m``, ``pretrain/s__minatar-
    asterix`` -> ``pretrain/s``)."""
    kind, _, rest = task_id.partition("/")
    name = _DRAW_AND_AFTER.sub("", rest.split("/")[0])
    if kind != "finetune":  # a pretraining run or a probe: name__game, probes__encoder__game
        name = name.split("__")[0]
    return f"{kind}/{name}"


def logged_hours(rows: Iterable[dict[str, Any]], batch: Callable[[], int] | None = None) -> float:
    """Hours of training in metrics ``rows``: each row's step gap over the speed it logged,
    ``charts/sps``, or ``charts/samples_per_s`` over ``batch()`` (the batch size, asked for
    only when a row needs it); rows without a speed (an episode's) are skipped."""
    seconds, previous = 0.0, 0
    for row in rows:
        step = row.get("step")
        if not isinstance(step, int):
            continue
        if row.get("charts/sps"):
            seconds += (step - previous) / row["charts/sps"]
        elif row.get("charts/samples_per_s") and batch is not None:
            seconds += (step - previous) * batch() / row["charts/samples_per_s"]
        else:
            continue
        previous = step
    return seconds / 3600


def folder_hours(folder: Path) -> float | None:
    """Training hours of one run folder from its ``metrics.jsonl`` (`logged_hours`, the batch
    size from its ``config.yaml``); None when it logged no speed."""
    metrics = folder / "metrics.jsonl"
    if not metrics.is_file():
        return None
    rows = read_jsonl(metrics)
    if not any(r.get("charts/sps") or r.get("charts/samples_per_s") for r in rows):
        return None
    return logged_hours(rows, lambda: _batch_size(folder))


def _batch_size(folder: Path) -> int:
    config = folder / "config.yaml"
    payload = yaml.safe_load(config.read_text()) if config.is_file() else None
    batch = (payload or {}).get("batch_size")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"{folder}: logs samples/s but its config.yaml has no batch_size")
    return batch


def _status(folder: Path) -> dict[str, Any]:
    path = folder / "status.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def task_costs(tasks: Iterable[tuple[str, str, list[Path]]]) -> pd.DataFrame:
    """One row per ``(task id, kind, run folders)``: ``task``, ``part`` (`study_part`), ``runs``
    (its folders), ``hours`` (its slowest folder's, `folder_hours`; NaN: none logged),
    ``commits`` (each short commit its runs trained on, in order) and ``cpus`` (none for a
    probe: its folder is its encoder's)."""
    rows = []
    for task_id, kind, folders in tasks:
        timed = kind != "probe"  # a probe writes into its encoder's folder
        hours = [h for h in map(folder_hours, folders) if h is not None] if timed else []
        statuses = [_status(f) for f in folders] if timed else []
        commits = [c["commit"][:7] for s in statuses for c in commit_history(s)]
        cpus = [p.get("cpu") for s in statuses for p in s.get("provenance", []) if p.get("cpu")]
        rows.append(
            {
                "task": task_id,
                "part": study_part(task_id),
                "runs": len(folders),
                "hours": max(hours) if hours else float("nan"),
                "commits": list(dict.fromkeys(commits)),
                "cpus": list(dict.fromkeys(cpus)),
            }
        )
    return pd.DataFrame(rows, columns=["task", "part", "runs", "hours", "commits", "cpus"])


def study_cost(archive: str | Path) -> pd.DataFrame:
    """`task_costs` of every task archived in ``archive`` (its ``archive.json``)."""
    archive = Path(archive)
    record = archive / "archive.json"
    if not record.is_file():
        raise FileNotFoundError(f"{archive}: no archive.json (not a study's archive)")
    tasks = json.loads(record.read_text()).get("tasks", {})
    return task_costs(
        (task_id, str(task.get("kind")), [archive / f for f in task.get("folders", [])])
        for task_id, task in sorted(tasks.items())
    )


def graph_cost(graph: Graph) -> pd.DataFrame:
    """`task_costs` of an experiment's tasks that have started (a run folder made), read from
    the experiment folder: what it has cost so far."""
    started = []
    for task in sorted(graph.tasks, key=lambda t: t.id):
        folders = task_folders(task)
        if any(f.is_dir() for f in folders):
            started.append((task.id, task.kind, folders))
    return task_costs(started)


def _first(commits: list[str], shown: int = 3) -> str:
    """The first ``shown`` commits a part ran on, and how many more (a part resumed across many
    commits would fill the line); "-" for none."""
    if len(commits) <= shown:
        return ", ".join(commits) or "-"
    return f"{', '.join(commits[:shown])} and {len(commits) - shown} more"


def cost_markdown(frame: pd.DataFrame) -> str:
    """`study_cost`'s rows by part: tasks, runs, training hours and commits, a total line, and
    the CPUs the tasks ran on."""
    lines = ["| part | tasks | runs | training hours | commits |", "|---|---:|---:|---:|---|"]
    for part, rows in frame.groupby("part", sort=True):
        logged = rows["hours"].notna().any()
        hours = f"{rows['hours'].sum():.1f}" if logged else "not logged"
        commits = _first(list(dict.fromkeys(c for cs in rows["commits"] for c in cs)))
        lines.append(f"| `{part}` | {len(rows)} | {rows['runs'].sum()} | {hours} | {commits} |")
    total = f"{frame['hours'].sum():.1f}" if frame["hours"].notna().any() else "not logged"
    lines.append(f"| total | {len(frame)} | {frame['runs'].sum()} | {total} | |")
    cpus = ", ".join(dict.fromkeys(c for cs in frame["cpus"] for c in cs)) or "not recorded"
    lines += ["", f"CPUs: {cpus}."]
    return "\n".join(lines)
