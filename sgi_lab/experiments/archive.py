"""An experiment's results where a fresh clone finds them: `archive` and `restore`.

An experiment folder (``outputs/experiments/NAME``) holds gigabytes: stores, models,
checkpoints. What its tables and figures read is small: each finished agent's ``status.json``,
``config.yaml``, ``eval.json`` and ``metrics.jsonl``, each probe's ``probes.json``, each
pretraining run's config and curves. `archive` copies those files of every finished task into an
archive folder meant for git (``results/NAME``), their SHA-256 in
``archive.json``, written last. `restore` copies them back into an experiment folder that lacks
them (a fresh clone, a wiped disk), marking each restored run folder with ``restored.json``;
the tasks they complete count as done (`restored_files`), so the experiment goes on from there
instead of from zero. An archive reads as an experiment folder too: its ``experiment.yaml`` and
run folders are where the study tables look (`sgi_lab.studies.finetune_study`).

A task is restored only while its command and params are the archived ones (its
`task_fingerprint`): change a budget and its tasks run again. Nothing restored replaces a file
of the experiment folder: a run folder holding a different file of the same name is left as it
is, and named. No model comes back, so a pretraining run is restored only when every task that
reads it is restored too; one still needed is pretrained again, from its start. One another
experiment reuses is pretrained again with ``sgi-lab experiment --rebuild`` and checked against
the archived run (`compare_rebuilt`); a rebuilt run is never archived.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from sgi_lab.base.files import LOCK_FILE, RunFolderError, atomic_write, atomic_write_text
from sgi_lab.config import OLD_SPR_KEYS, FinetuneConfig, PretrainConfig
from sgi_lab.experiments.graph import Graph, Task
from sgi_lab.experiments.spec import EXPERIMENT_FILE
from sgi_lab.experiments.state import task_done
from sgi_lab.runs.folder import recorded_config
from sgi_lab.runs.status import REBUILT_FILE, RESTORED_FILE, file_sha256, restored_files

__all__ = [
    "ARCHIVE_FILE",
    "REBUILT_FILE",
    "RESTORED_FILE",
    "archive",
    "archived_tasks",
    "check_archive_folder",
    "compare_rebuilt",
    "keep_study_scores",
    "kept",
    "restore",
    "restored_files",
    "task_folders",
    "verified_archive",
    "task_fingerprint",
]

ARCHIVE_FILE = "archive.json"

# What an archive leaves out of a run folder: weights, checkpoints, the TensorBoard copy of
# metrics.jsonl, locks and temp files (`sgi_lab.base.files.atomic_write`'s ``.NAME.PID.tmp``).
LEFT_OUT_SUFFIXES = (".pt", ".npz", ".npy", ".tmp")


def kept(rel: str | PurePosixPath) -> bool:
    """Whether an archive keeps a run folder's file ``rel`` (a path relative to the folder)."""
    rel = PurePosixPath(rel)
    return not (
        "checkpoints" in rel.parts[:-1]
        or rel.name.startswith((".", "events.out.tfevents"))
        or rel.name in (LOCK_FILE, RESTORED_FILE, REBUILT_FILE)
        or rel.suffix in LEFT_OUT_SUFFIXES
    )


def task_fingerprint(
    graph: Graph, task: Task, archived: dict[str, dict[str, Any]] | None = None
) -> str:
    """SHA-256 of what a task computes: its command and the params files it names, with the
    experiment folder's path as ``{out}`` (an archive restores into another clone's folder).

    ``archived`` (params file path -> the payload the archive holds for it) computes it as the
    archive's code did: a config key the archived payload lacks, at its field's default, is left
    out (`_as_archived`), so that a field added to a config since, which changes nothing of what
    ran, does not make every archived task run again."""
    out = str(graph.out)
    parts = [" ".join(task.argv).replace(out, "{out}")]
    for arg in task.argv:
        if arg in graph.params_files:
            payload = graph.params_files[arg]
            if archived is not None and arg in archived:
                payload = _as_archived(payload, archived[arg])
            text = yaml.safe_dump(payload, sort_keys=True)
            parts.append(text.replace(out, "{out}"))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _as_archived(payload: dict[str, Any], archived: dict[str, Any]) -> dict[str, Any]:
    """``payload`` without the config keys ``archived`` lacks that are at their default in
    every stage config that has them (a field added since, which changes nothing), and with a
    key renamed since (spr_weight, now spr_coefficient) as ``archived`` wrote it where it means
    the same value (`recorded_config`); a key at another value stays, so the fingerprints
    differ and the task runs again."""
    config, old = payload.get("config"), archived.get("config")
    if not isinstance(config, dict) or not isinstance(old, dict):
        return payload
    renamed = {k: old[k] for k in OLD_SPR_KEYS if k in old and k not in config}
    if renamed and recorded_config(old).get("spr_coefficient") == config.get("spr_coefficient"):
        config = {**{k: v for k, v in config.items() if k != "spr_coefficient"}, **renamed}
    added = {k for k in set(config) - set(old) if _at_default(k, config[k])}
    return {**payload, "config": {k: v for k, v in config.items() if k not in added}}


def _at_default(key: str, value: Any) -> bool:
    """Whether ``value`` is ``key``'s default in every stage config that has the field."""
    defaults = [
        f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for cls in (PretrainConfig, FinetuneConfig)
        for f in dataclasses.fields(cls)
        if f.name == key
        and (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)
    ]
    return bool(defaults) and all(d == value for d in defaults)


def task_folders(task: Task) -> list[Path]:
    """The run folders a task's results are in (a data store is not archived)."""
    if task.kind == "finetune":
        return list(task.agent_folders)
    if task.kind in ("pretrain", "probe"):
        return [task.folder]
    return []


def _rel(graph: Graph, path: Path) -> str:
    return path.relative_to(graph.out).as_posix()


def check_archive_folder(dest: Path, graph: Graph) -> dict[str, Any]:
    """The archive's index, or a new one for a missing or empty folder; refuses a user's folder,
    another experiment's archive and one that overlaps the experiment folder."""
    out, dest_abs = graph.out.resolve(), dest.resolve()
    if dest_abs == out or out in dest_abs.parents or dest_abs in out.parents:
        raise RunFolderError(
            f"archive {dest}: inside the experiment folder {graph.out} or holding it; an archive "
            "is a folder of its own (results/NAME)"
        )
    name = graph.experiment.name
    if dest.exists() and not dest.is_dir():
        raise RunFolderError(f"archive {dest}: exists and is not a folder")
    if not dest.exists() or not any(dest.iterdir()):
        return {"experiment": name, "tasks": {}, "files": {}}
    index = _read_index(dest)
    if index["experiment"] != name:
        raise RunFolderError(
            f"archive {dest}: holds experiment {index['experiment']!r}, not {name!r}; choose "
            "another archive folder"
        )
    return index


def verified_archive(source: Path, graph: Graph) -> dict[str, Any]:
    """The index of the archive ``source`` of ``graph``'s experiment, every file it names
    checked against its SHA-256 (what a restore and a dry run read first).

    Raises:
        RunFolderError: not this experiment's archive, or a file missing or changed (named).
    """
    index = check_archive_folder(source, graph)
    for rel, sha in index["files"].items():
        path = source / rel
        if not path.is_file() or file_sha256(path) != sha:
            raise RunFolderError(
                f"archive {source}: {rel} is missing or differs from the SHA-256 {ARCHIVE_FILE} "
                "records; restore it from git (git checkout -- PATH) before resuming"
            )
    return index


def _read_index(dest: Path) -> dict[str, Any]:
    try:
        index = json.loads((dest / ARCHIVE_FILE).read_text())
    except (OSError, ValueError):
        index = None
    if not (
        isinstance(index, dict)
        and isinstance(index.get("experiment"), str)
        and isinstance(index.get("tasks"), dict)
        and isinstance(index.get("files"), dict)
    ):
        raise RunFolderError(
            f"archive {dest}: not empty and no readable {ARCHIVE_FILE} of ours; refusing to use "
            "it as an experiment archive"
        )
    for rel in index["files"]:
        problem = _unsafe_rel(rel)
        if problem:
            raise RunFolderError(
                f"archive {dest}: {ARCHIVE_FILE} names the file {str(rel)[:120]!r}, {problem}; "
                "an archive's files lie inside it and inside their run folders: refusing it"
            )
    return index


def _unsafe_rel(rel: Any) -> str | None:
    """Why ``rel`` (a file name of ``archive.json``) could lead outside the folder it is
    joined to, or None: it must be a relative POSIX path of plain parts (no ``..``, ``.``,
    empty part, backslash, NUL or drive)."""
    if not isinstance(rel, str) or not rel:
        return "not a file name"
    if "\\" in rel or "\0" in rel or rel.startswith("/") or ":" in rel.split("/")[0]:
        return "not a relative POSIX path"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "a path with '..', '.' or an empty part"
    return None


def _copy(source: Path, target: Path) -> None:
    """Copy a file atomically (a cut-off copy never looks like the file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as src:
        atomic_write(target, lambda fh: shutil.copyfileobj(src, fh), binary=True)


def _copy_inside(source: Path, folder: Path, rel: str) -> None:
    """`_copy` into ``folder / rel``, refused where that lands outside ``folder`` (a symlink
    inside it; the names were checked when the index was read)."""
    target = folder / rel
    if not target.resolve().is_relative_to(folder.resolve()):
        raise RunFolderError(
            f"archive {source.parent}: {rel!r} would be written to {target.resolve()}, outside "
            f"its run folder {folder}; refusing to restore it"
        )
    _copy(source, target)


STUDY_SCORE_FILES = ("scores.npz", "scores.json")
"""What `keep_study_scores` copies into an archive's root."""


def keep_study_scores(out: Path, dest: Path) -> list[Path]:
    """Copy a finetuning study's per-seed score matrices (``scores.npz``, ``scores.json``:
    `sgi_lab.analysis.score_matrices.write_study_scores`, written by its report) from ``out``
    into the archive's root, atomically, over the copy made before, so a clone redraws its
    figures with numpy or rliable alone. They are derived, not archived run files: not in
    ``archive.json``, never restored; an archive with no ``archive.json`` yet (no task
    finished) gets none. Returns the files copied."""
    kept_files: list[Path] = []
    if not (dest / ARCHIVE_FILE).is_file():
        return kept_files
    for name in STUDY_SCORE_FILES:
        if (out / name).is_file():
            _copy(out / name, dest / name)
            kept_files.append(dest / name)
    return kept_files


class ArchivedFileChangedError(RunFolderError):
    """An archived file would be replaced by one of other content where that is not asked for
    (``--report-only`` re-archives from the working tree)."""


def archive(
    graph: Graph,
    dest: str | os.PathLike,
    tasks: Iterable[Task] | None = None,
    replace_changed: bool = True,
) -> list[str]:
    """Copy the results of the finished tasks of ``graph`` (all, or ``tasks``) into ``dest``.

    ``dest`` gets the experiment's ``experiment.yaml`` and the params files the archived tasks
    name, and each task's run folders without what `kept` leaves out; ``archive.json`` (written
    last) lists every file with its SHA-256 and every task with its `task_fingerprint` and
    folders. A file already archived is rewritten only when its content changed, and the index
    only when a task or file did (a run that finishes nothing new leaves the archive as it was).

    A run folder that ``--rebuild`` pretrained again (its ``rebuilt.json``) is not archived:
    the archive keeps the results of the run its readers read (`compare_rebuilt`).

    ``replace_changed`` False refuses, before anything is written, to replace an archived file
    of other content (``--report-only``'s inputs come from the working tree, whose params may
    differ from those the archived runs ran with: a field added since, a key renamed).

    Returns:
        The ids of the tasks archived (finished ones only: `sgi_lab.experiments.state.task_done`).

    Raises:
        RunFolderError: ``dest`` is a user's folder or another experiment's archive.
        ArchivedFileChangedError: with ``replace_changed`` False, naming the first archived
            file whose content differs.
    """
    dest = Path(dest)
    index = check_archive_folder(dest, graph)
    before = json.dumps({k: index.get(k) for k in ("tasks", "files")}, sort_keys=True)
    old_tasks = dict(index["tasks"])
    chosen = graph.tasks if tasks is None else tuple(tasks)
    done = [
        t
        for t in chosen
        if t.kind != "report"
        and task_folders(t)
        and task_done(t)
        and not any((f / REBUILT_FILE).exists() for f in task_folders(t))
    ]
    if not done:
        return []
    wanted: list[tuple[str, Path]] = [(EXPERIMENT_FILE, graph.out / EXPERIMENT_FILE)]
    for task in done:
        folders = task_folders(task)
        for folder in folders:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                if kept(path.relative_to(folder).as_posix()):
                    wanted.append((_rel(graph, path), path))
        wanted += [(_rel(graph, Path(a)), Path(a)) for a in task.argv if a in graph.params_files]
        index["tasks"][task.id] = {
            "kind": task.kind,
            "fingerprint": task_fingerprint(graph, task),
            "folders": [_rel(graph, f) for f in folders],
        }
    shas = {rel: file_sha256(path) for rel, path in dict(wanted).items() if path.is_file()}
    replaced = [
        rel
        for rel, sha in shas.items()
        if index["files"].get(rel) != sha or not (dest / rel).is_file()
    ]
    changed = [rel for rel in replaced if rel in index["files"] and (dest / rel).is_file()]
    if changed and not replace_changed:
        raise ArchivedFileChangedError(
            f"{dest / changed[0]}: archived with other content than {dict(wanted)[changed[0]]}"
            f" ({len(changed)} such file(s)); refusing to overwrite the archive (pass "
            "--overwrite-archive to replace them)"
        )
    _before_replacing(dest, index, old_tasks, replaced)
    for rel in replaced:
        _copy(dict(wanted)[rel], dest / rel)
    index["files"].update(shas)
    index["tasks"] = dict(sorted(index["tasks"].items()))
    index["files"] = dict(sorted(index["files"].items()))
    if json.dumps({k: index[k] for k in ("tasks", "files")}, sort_keys=True) != before:
        index["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")  # (only when something changed)
        atomic_write_text(dest / ARCHIVE_FILE, json.dumps(index, indent=1) + "\n")
    return [t.id for t in done]


def _before_replacing(
    dest: Path, index: dict[str, Any], old_tasks: dict[str, Any], replaced: list[str]
) -> None:
    """The index never describes a file it does not hold: before a file it lists is replaced,
    an index without it (and without the tasks whose folders hold such a file, so none
    restores in part) is written, so a write cut short leaves an archive that restores what it
    lists. A new archive gets its index first: a folder of copied files without one would read
    as someone else's folder ever after."""
    if not any(rel in index["files"] for rel in replaced) and (dest / ARCHIVE_FILE).exists():
        return
    interim = {
        **index,
        "tasks": {
            k: v
            for k, v in old_tasks.items()
            if not any(r.startswith(f + "/") for f in v.get("folders", []) for r in replaced)
        },
        "files": {k: v for k, v in index["files"].items() if k not in replaced},
    }
    dest.mkdir(parents=True, exist_ok=True)
    atomic_write_text(dest / ARCHIVE_FILE, json.dumps(interim, indent=1) + "\n")


def _same(graph: Graph, index: dict[str, Any], source: Path) -> set[str]:
    """The tasks the archive holds with their current `task_fingerprint`, or with the one the
    archive's code computed (the archive's params files, `_as_archived`)."""
    tasks = index["tasks"]
    archived: dict[str, dict[str, Any]] = {}
    for path in graph.params_files:
        rel = _rel(graph, Path(path))
        if rel in index["files"] and (source / rel).is_file():
            loaded = yaml.safe_load((source / rel).read_text())
            if isinstance(loaded, dict):
                archived[path] = loaded
    return {
        t.id
        for t in graph.tasks
        if t.id in tasks
        and tasks[t.id].get("fingerprint")
        in (task_fingerprint(graph, t), task_fingerprint(graph, t, archived))
    }


def _folder_owners(graph: Graph, same: set[str]) -> dict[Path, tuple[list[Task], bool]]:
    """Each run folder -> (the tasks whose results it holds, whether all may be restored): a
    task the archive holds unchanged, and a pretraining run only when every task that reads it
    is one too (no model comes back). A pretraining run's folder also holds its probe's
    probes.json: both or neither."""
    readers = graph.readers()

    def restorable(task: Task) -> bool:
        if task.id not in same:
            return False
        return task.kind != "pretrain" or all(r in same for r in readers.get(task.id, []))

    owners: dict[Path, list[Task]] = {}
    for task in graph.tasks:
        for folder in task_folders(task):
            owners.setdefault(folder, []).append(task)
    return {f: (tasks, all(map(restorable, tasks))) for f, tasks in owners.items()}


def archived_tasks(graph: Graph, source: str | os.PathLike) -> list[str]:
    """The tasks of ``graph`` a restore from ``source`` would bring back (read without writing
    or checking the files: the dry run's), assuming the experiment folder lacks them."""
    owners = _folder_owners(graph, _same(graph, _read_index(Path(source)), Path(source)))
    found = {t.id for tasks, ok in owners.values() if ok for t in tasks}
    return [t.id for t in graph.tasks if t.id in found]


def restore(graph: Graph, source: str | os.PathLike) -> dict[str, Any]:
    """Copy an archive's results into the experiment folder ``graph.out`` where they are missing.

    A task is restored when the archive holds it with the current `task_fingerprint`; a
    pretraining run's folder only when every task that reads it is restored too (no model comes
    back). A task is restored whole or not at all: a run folder holding a file the archive has
    with other content is left as it is, and so are the other folders of its task. Each
    restored folder gets ``restored.json`` (written last) with its files' SHA-256:
    `restored_files`.

    Returns:
        ``{"restored": [task ids], "changed": [task ids whose command or params differ from the
        archive's], "conflicts": [run folders left as they were, with the files that differ],
        "left_alone": [those run folders' paths]}``.

    Raises:
        RunFolderError: ``source`` is not an archive of this experiment, or one of its files does
            not have the content ``archive.json`` records (named).
    """
    source = Path(source)
    if not (source / ARCHIVE_FILE).is_file():
        raise RunFolderError(f"archive {source}: no {ARCHIVE_FILE} (not an experiment archive)")
    index = verified_archive(source, graph)
    same = _same(graph, index, source)
    changed = sorted(t.id for t in graph.tasks if t.id in index["tasks"] and t.id not in same)
    folders = _folder_owners(graph, same)

    plans: dict[Path, dict[str, str]] = {}  # run folder -> its archived files (name -> SHA)
    conflicts: dict[Path, list[str]] = {}
    for folder, (_, ok) in folders.items():
        if not ok:
            continue
        prefix = _rel(graph, folder) + "/"
        files = {r[len(prefix) :]: s for r, s in index["files"].items() if r.startswith(prefix)}
        if not files:
            continue
        plans[folder] = files
        clash = [
            rel
            for rel, sha in files.items()
            if (folder / rel).exists() and file_sha256(folder / rel) != sha
        ]
        if clash:
            conflicts[folder] = sorted(clash)

    def whole(task: Task) -> bool:  # every folder of the task can be restored
        return all(f in plans and f not in conflicts for f in task_folders(task))

    restored = []
    for folder, files in plans.items():
        owners, _ = folders[folder]
        if not all(whole(t) for t in owners):
            continue
        missing = [rel for rel in files if not (folder / rel).exists()]
        if not missing and not (folder / RESTORED_FILE).exists():
            continue  # the run that wrote these files is here: nothing to restore
        restored += [t.id for t in owners]
        if not missing and restored_files(folder) == files:
            continue  # restored before
        for rel in missing:
            _copy_inside(source / _rel(graph, folder) / rel, folder, rel)
        marker = {"from": str(source), "archived": index.get("updated"), "files": files}
        atomic_write_text(folder / RESTORED_FILE, json.dumps(marker, indent=1) + "\n")
    return {
        "restored": sorted(set(restored)),
        "changed": changed,
        "conflicts": [
            f"{_rel(graph, f)} ({', '.join(c)} differ)" for f, c in sorted(conflicts.items())
        ],
        "left_alone": sorted(conflicts),
    }


# Metrics that time the machine, not the run: left out when a rebuilt run is compared.
TIMING_SUFFIXES = ("_per_s", "seconds", "/time")


def _metric_rows(path: Path) -> dict[int, dict[str, float]]:
    """``metrics.jsonl`` as step -> {key: value}, numbers only, timings left out."""
    rows: dict[int, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            continue
        rows[row["step"]] = {
            k: float(v)
            for k, v in row.items()
            if k != "step"
            and isinstance(v, int | float)
            and not isinstance(v, bool)
            and not k.endswith(TIMING_SUFFIXES)
        }
    return rows


def compare_rebuilt(
    folder: str | os.PathLike, archived: str | os.PathLike, rtol: float = 1e-5
) -> dict[str, Any]:
    """A pretraining run pretrained again (``--rebuild``) against the run an archive kept: its
    ``metrics.jsonl`` row by row, every logged value but timings (`TIMING_SUFFIXES`).

    The two are the same run when they logged the same steps and keys and every value agrees
    to ``rtol`` (at fixed code on the same kind of CPU a rebuild reproduces bit for bit; chaotic
    training amplifies any other difference, so a looser tolerance would not help). One
    exception: the row logged right after a resume of the archived run (its ``status.json``
    provenance records each resume's step) at a step that is not a logged one. Before
    pretraining checkpoints kept their logging window (2026-11-29), such a row was the mean of
    the steps since the resume only, so it may differ from an uninterrupted rebuild's while
    the weights agree: its differences are listed under ``across_resumes``, not failed.

    Returns:
        ``{"same", "steps" (compared), "max_difference" (relative), "first_difference",
        "across_resumes"}``: the first difference None or ``{"step", "key", "rebuilt",
        "archived"}`` (a value None where it is missing), or ``{"steps": "..."}`` when the
        logged steps differ; ``across_resumes`` the rows after a resume that differ (steps).

    Raises:
        FileNotFoundError: either run has no ``metrics.jsonl``.
    """
    mine = _metric_rows(Path(folder) / "metrics.jsonl")
    kept_rows = _metric_rows(Path(archived) / "metrics.jsonl")
    if sorted(mine) != sorted(kept_rows):
        first = {"steps": f"rebuilt logged {len(mine)} rows, the archive {len(kept_rows)}"}
        return {"same": False, "steps": 0, "max_difference": None, "first_difference": first}
    worst, first, forgiven = 0.0, None, set()
    straddling = _rows_after_resumes(Path(archived), sorted(kept_rows))
    for step in sorted(mine):
        a, b = mine[step], kept_rows[step]
        for key in sorted(set(a) | set(b)):
            x, y = a.get(key), b.get(key)
            if x is None or y is None or (math.isnan(x) != math.isnan(y)):
                gap = math.inf
            elif math.isnan(x):
                gap = 0.0
            else:
                gap = abs(x - y) / max(abs(x), abs(y)) if x != y else 0.0
            if gap > rtol and step in straddling and x is not None and y is not None:
                forgiven.add(step)
                continue
            worst = max(worst, gap)
            if gap > rtol and first is None:
                first = {"step": step, "key": key, "rebuilt": x, "archived": y}
    return {
        "same": first is None,
        "steps": len(mine),
        "max_difference": worst if math.isfinite(worst) else None,
        "first_difference": first,
        "across_resumes": sorted(forgiven),
    }


def _rows_after_resumes(folder: Path, logged: list[int]) -> set[int]:
    """The logged steps right after each resume of the run in ``folder`` at a step that is not
    a logged one (its ``status.json`` provenance: one entry per start, the first at step 0)."""
    try:
        provenance = json.loads((folder / "status.json").read_text()).get("provenance") or []
    except (OSError, ValueError, AttributeError):
        return set()
    resumes = {e.get("step") for e in provenance if isinstance(e, dict)} - {0, None}
    rows = set()
    for r in resumes:
        later = [s for s in logged if isinstance(r, int) and s > r]
        if later and r not in logged:
            rows.add(later[0])
    return rows
