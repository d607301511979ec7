"""What a task's folder holds: whether it is done (locally or in a storage URI), what a worker
pulls and pushes, and whether the folder may be written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sgi_lab.base.files import LOCK_FILE, RunFolderError, read_mapping
from sgi_lab.data.store_format import MANIFEST, PARTIAL_SUFFIX, read_manifest
from sgi_lab.experiments.graph import (
    Graph,
    Task,
    is_agent_task,
)
from sgi_lab.experiments.spec import (
    PROBE_KEYS,
    STATE_FILE,
)
from sgi_lab.experiments.storage import RunStorage
from sgi_lab.probes.results import probe_done
from sgi_lab.runs.folder import RUNTIME_KEYS, config_changes
from sgi_lab.runs.status import read_status, restored_files

# -- state of a task ----------------------------------------------------------------------------


def check_experiment_folder(out: str | os.PathLike, name: str) -> None:
    """Refuse ``out`` unless it is missing, empty, or an experiment folder of ours for the
    experiment ``name`` (its ``experiment.json``), before anything in it is written.

    Raises:
        RunFolderError: naming the folder and why (a user's own files, another experiment).
    """

    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise RunFolderError(f"{out}: exists and is not a folder; refusing to write there")
    if all(p.name == LOCK_FILE for p in out.iterdir()):
        return
    state = read_mapping(out / STATE_FILE)
    if not isinstance(state.get("tasks"), dict) or "name" not in state:
        raise RunFolderError(
            f"{out}: not empty and not an sgi-lab experiment folder (no {STATE_FILE} of ours); "
            "refusing to write an experiment into it: choose another --out"
        )
    if state["name"] != name:
        raise RunFolderError(
            f"{out}: holds experiment {state['name']!r}, not {name!r}; refusing to write into "
            "it: choose another --out"
        )


def task_done(task: Task) -> bool:
    """Whether a task's folder holds its complete result (then it is skipped): what the run
    wrote, or what `sgi_lab.experiments.archive.restore` put back, unchanged since (a restored
    agent has no model; a restored pretraining run is never done: its model is not archived)."""
    if task.kind == "data":
        return task.folder.is_dir() and read_manifest(task.folder) is not None
    if task.kind == "pretrain":
        status = read_status(task.folder) or {}
        return (
            status.get("state") == "finished"
            and (task.folder / "model.pt").exists()
            and not config_mismatch(task, task.folder)
        )
    if task.kind == "finetune":
        return all(
            (read_status(f) or {}).get("state") == "finished"
            and (f / "eval.json").exists()
            and ((f / "model.pt").exists() or "eval.json" in restored_files(f))
            and not config_mismatch(task, f)
            for f in task.agent_folders
        )
    if task.kind == "probe":
        if "probes.json" in restored_files(task.folder):
            return True
        return probe_done(task.folder, **{k: task.probe[k] for k in PROBE_KEYS})
    return (task.folder / "report.html").exists() and (task.folder / "results.csv").exists()


AGENT_KEYS = frozenset({"game", "seed", "pretrained"})
"""What the run folders of one task record differently (each its own game, seed and run)."""


def config_mismatch(task: Task, folder: Path) -> dict[str, tuple[Any, Any]]:
    """``{key: (recorded, the task's)}`` where the config a finished run folder recorded is not
    the task's (an experiment file changed since the run: another budget, say): such a folder
    is not this task's result, however finished. Empty when they agree, the task records no
    config (a shared population's, whose agents differ), or the folder recorded none."""
    if not task.config:
        return {}
    recorded = read_mapping(folder / "config.yaml")
    if not recorded:
        return {}
    return config_changes(recorded, task.config, RUNTIME_KEYS | AGENT_KEYS)


def unneeded(graph: Graph, done: set[str]) -> set[str]:
    """The datasets and pretraining runs not in ``done`` whose every reader is done or unneeded
    itself (readers restored from an archive, `sgi_lab.experiments.archive`): nothing left would
    read them, so they are not run."""
    readers = graph.readers()
    found: set[str] = set()
    for task in sorted(graph.tasks, key=lambda t: t.kind != "pretrain"):  # readers first
        ids = readers.get(task.id, [])
        if task.id in done or task.kind not in ("data", "pretrain") or not ids:
            continue
        if all(r in done or r in found for r in ids):
            found.add(task.id)
    return found


def task_left(task: Task) -> float:
    """The fraction of a task's work still to do, from its folder: 0 done, 1 not started; a
    stopped pretraining run or population counts from its last checkpoint (where a resume
    starts), a population as the mean over its agents."""
    if task_done(task):
        return 0.0
    if task.kind == "pretrain":
        return _run_left(task.folder)
    if task.kind == "finetune" and task.agent_folders:
        return sum(_run_left(f) for f in task.agent_folders) / len(task.agent_folders)
    return 1.0


def _run_left(folder: Path) -> float:
    """1 - checkpointed step / the config's steps for a run folder (1 without either)."""
    status = read_status(folder) or {}
    if status.get("state") == "finished":
        return 0.0
    steps = read_mapping(folder / "config.yaml").get("steps")
    step = status.get("step")
    if not isinstance(steps, int) or steps <= 0 or not isinstance(step, int):
        return 1.0
    return min(1.0, max(0.0, 1.0 - step / steps))


def _name(graph: Graph, path: str | os.PathLike) -> str:
    """A path under the experiment folder as a storage name (``pretrain/sgi_r__Pong``)."""
    return Path(path).relative_to(graph.out).as_posix()


def stored_task_done(graph: Graph, task: Task, storage: RunStorage) -> bool:
    """`task_done` for run folders kept in a storage URI (the report is always local)."""
    name = _name(graph, task.folder)

    def finished(folder: str, result: str) -> bool:
        status = storage.read_json(f"{folder}/status.json") or {}
        return status.get("state") == "finished" and storage.exists(f"{folder}/{result}")

    if task.kind == "data":
        return storage.read_json(f"{name}/manifest.json") is not None
    if task.kind == "pretrain":
        return finished(name, "model.pt")
    if task.kind == "finetune":
        return all(finished(_name(graph, f), "eval.json") for f in task.agent_folders)
    if task.kind == "probe":
        return storage.read_json(f"{name}/probes.json") is not None
    return task_done(task)


def storage_plan(graph: Graph, task: Task, uri: str) -> dict[str, Any]:
    """What a worker pulls and pushes for ``task`` (`run_in_scratch`'s ``plan``): the params
    files, the folders of its inputs (a pretraining run without its checkpoints), its own folder
    (to resume) and its log."""

    name = _name(graph, task.folder)
    inputs: list[tuple[str, tuple[str, ...]]] = [("params", ())]
    for dep in map(graph.task, task.deps):
        # an agent's replay is exported from its last checkpoint: a data task pulls them
        skip = ("checkpoints",) if dep.kind == "pretrain" and task.kind != "data" else ()
        inputs.append((_name(graph, dep.folder), skip))
    if task.kind == "data":
        outputs = [name, name + PARTIAL_SUFFIX]
    elif task.kind == "finetune":  # its agents' run folders: parts of one population share a folder
        outputs = [_name(graph, f) for f in task.agent_folders]
    else:
        outputs = [name]
    return {
        "uri": uri,
        "out": str(graph.out),
        "task": task.id,
        "inputs": inputs,
        "outputs": outputs,
        "log": _name(graph, _log_path(graph, task)),
    }


def pull_results(graph: Graph, storage: RunStorage) -> None:
    """Mirror what the report reads from a storage URI into the experiment folder: the
    finetuning runs (without their checkpoints) and the logs."""
    kinds = ("finetune", "probe")
    for name in dict.fromkeys(_name(graph, t.folder) for t in graph.tasks if t.kind in kinds):
        storage.pull(name, graph.out / name, exclude=("checkpoints",))
    storage.pull("logs", graph.out / "logs")


def _report_stale(graph: Graph) -> bool:
    report = graph.out / "report.html"
    if not report.exists():
        return True
    newest = 0.0
    for task in graph.tasks:
        results = [f / "eval.json" for f in task.agent_folders]
        if task.kind == "probe":
            results.append(task.folder / "probes.json")
        if is_agent_task(task):  # its evaluation: a data file's report shows it
            results.append(task.folder / "eval.json")
        if task.kind == "data":
            results.append(task.folder / MANIFEST)
        for path in results:
            if path.exists():
                newest = max(newest, path.stat().st_mtime)
    return newest > report.stat().st_mtime


def _log_path(graph: Graph, task: Task) -> Path:
    return graph.out / "logs" / (task.id.replace("/", "__") + ".log")
