"""What a run folder holds, read without writing: its ``status.json`` (`read_status`), the runs
under a folder (`run_folders`), the stage a run belongs to (`run_kind`), a run interrupted before
its status was written (`interrupted_without_status`), and whether a run is a result:
only finished runs count (`require_finished`, `pretrained_source`); a run's results restored from
an experiment archive without its model (`restored_files`) count where only results are read.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.files import file_digest
from sgi_lab.config import ConfigError
from sgi_lab.runs.checkpoints import checkpoint_files, checkpoint_kind

# The status words every stage writes, and nothing else.
RUNNING, FINISHED, FAILED = "running", "finished", "failed"
STATES = (RUNNING, FINISHED, FAILED)


# Written last into a run folder whose results `sgi_lab.experiments.archive.restore` copied back
# from an archive (no model, no checkpoints): each file's SHA-256.
RESTORED_FILE = "restored.json"


# Written into a pretraining run folder that ``sgi-lab experiment --rebuild`` pretrained again
# after a restore: how its curve compares with the archived run's (`rebuilt_record`).
REBUILT_FILE = "rebuilt.json"


def rebuilt_record(folder: str | os.PathLike) -> dict[str, Any] | None:
    """A rebuilt pretraining run's comparison with its archived run (``rebuilt.json``: ``same``,
    ``steps``, ``max_difference``, ``first_difference``), None when the run was not rebuilt or
    the record is unreadable."""
    try:
        record = json.loads((Path(folder) / REBUILT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("same"), bool) else None


def file_sha256(path: str | os.PathLike) -> str:
    """A file's SHA-256 (what an experiment archive records of each file)."""
    return file_digest(path, hashlib.sha256())


def restored_files(folder: str | os.PathLike) -> dict[str, str]:
    """The files an archive's restore put in a run folder that are still there unchanged (name
    -> SHA-256, from its ``restored.json``); empty when it was not restored or a file changed."""
    folder = Path(folder)
    try:
        files = json.loads((folder / RESTORED_FILE).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(files, dict):
        return {}
    for rel, sha in files.items():
        path = folder / rel
        if not path.is_file() or file_sha256(path) != sha:
            return {}
    return files


class UnfinishedRunError(SgiLabError, RuntimeError):
    """A run that never finished was asked for as a result (evaluate, report, finetune from)."""


def read_status(path: str | os.PathLike) -> dict[str, Any] | None:
    """A folder's ``status.json`` when it is one of ours (a JSON object with a known ``state``).

    Returns None when the file is missing, unreadable, or not ours.
    """
    try:
        payload = json.loads((Path(path) / "status.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(payload, dict) or payload.get("state") not in (*STATES, "interrupted"):
        return None
    return payload


def run_folders(root: str | os.PathLike, interrupted: bool = False) -> list[Path]:
    """Run folders under ``root`` (``root`` itself when it is one), in path order: folders with a
    ``status.json`` of ours (`read_status`), not inside a run's ``checkpoints/``; none when
    ``root`` is not a folder. The one walk that finds runs (``sgi-lab status``, a notebook's
    `sgi_lab.notebook.find_runs_of_kind`).

    Symbolic links to folders are followed (runs kept on another disk), each folder visited
    once however many links lead to it (a link to a parent ends there, no loop).

    Args:
        root: the folder searched.
        interrupted: also the folders whose status is missing or torn but that hold a run of
            ours (`interrupted_without_status`: a ``config.yaml`` beside checkpoints, or a
            ``status.json`` that does not parse).
    """
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for folder, files in _walk_folders(root):
        if "status.json" not in files and not (interrupted and "config.yaml" in files):
            continue
        if read_status(folder) is not None or (interrupted and interrupted_without_status(folder)):
            found.append(folder)
    return sorted(found)


def _walk_folders(root: Path):
    """``(folder, file names)`` of every folder under ``root``, links followed, each real folder
    once, ``checkpoints/`` folders left out (a run's checkpoints hold no runs)."""
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            info = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        if (info.st_dev, info.st_ino) in seen:
            dirnames[:] = []  # reached again through a link: already walked (or a loop)
            continue
        seen.add((info.st_dev, info.st_ino))
        dirnames[:] = sorted(d for d in dirnames if d != "checkpoints")
        yield Path(dirpath), set(filenames)


def interrupted_without_status(path: str | os.PathLike) -> bool:
    """True when a folder holds a run of ours whose ``status.json`` is missing or torn: a
    ``config.yaml`` beside checkpoints, or a ``status.json`` that does not parse. Such a run
    never counts as finished; it is an interrupted run, resumed by its command."""
    path = Path(path)
    if read_status(path) is not None:
        return False
    try:
        json.loads((path / "status.json").read_text())
    except FileNotFoundError:
        pass
    except (OSError, ValueError):
        return True  # torn by a crash mid-write
    return (path / "config.yaml").is_file() and bool(checkpoint_files(path))


def run_kind(path: str | os.PathLike) -> str | None:
    """What kind of run of ours a folder holds, or None when it is not one of ours.

    A run is recognised by its ``status.json``: ``"kind"`` names the stage (``"pretrain"``,
    ``"finetune"``). Runs written before kinds were recorded are recognised by a status file
    beside a ``config.yaml`` (kind ``""``, any stage's), and a notebook run's folder by the
    status its runner wrote (kind ``""`` too: the stage it runs makes it its own). A run whose
    status is missing or torn (`interrupted_without_status`) is recognised by the kind its
    newest checkpoint records.
    """
    path = Path(path)
    status = read_status(path)
    if status is None:
        if (path / "config.yaml").is_file() and checkpoint_files(path):
            return checkpoint_kind(path)
        return None
    if status.get("kind"):
        return str(status["kind"])
    if (path / "config.yaml").is_file() or "notebook" in status:
        return ""
    return None


def require_finished(
    path: str | os.PathLike, what: str, allow_unfinished: bool = False, results_only: bool = False
) -> bool:
    """Refuse a run that never finished as a result; returns whether it finished.

    Args:
        path: the run folder.
        what: what is being done with it, for the message (``"evaluate"``, ``"report"``).
        allow_unfinished: accept it anyway (``--allow-unfinished``); the caller marks it.
        results_only: the caller reads the run's results (``eval.json``), not its model: a
            finished run restored from an archive without it counts (`restored_files`).

    Raises:
        UnfinishedRunError: the run's status is not ``finished`` and ``allow_unfinished`` is
            false. A folder without a status of ours (a bare exported model) is accepted.
    """
    path = Path(path)
    status = read_status(path)
    if status is None:
        if not interrupted_without_status(path):
            return True  # a bare exported model: nothing says it is a run
        checkpoints = checkpoint_files(path)
        newest = f", newest checkpoint {checkpoints[-1].name}" if checkpoints else ""
        problem = (
            f"its status.json is missing or unreadable{newest}: an interrupted run, not a result"
        )
    elif status.get("state") == FINISHED and has_final_model(path, status):
        return True
    elif status.get("state") == FINISHED and results_only and "eval.json" in restored_files(path):
        return True
    elif status.get("state") == FINISHED:
        problem = "its status says finished but its final model.pt is missing"
    else:
        reason = f": {status['message']}" if status.get("message") else ""
        problem = f"state {status.get('state')!r}, step {status.get('step')}{reason}"
    if not allow_unfinished:
        raise UnfinishedRunError(
            f"{path}: unfinished run ({problem}); "
            f"{what} counts finished runs only: re-run its command to finish it, or pass "
            "--allow-unfinished to include it marked as unfinished"
        )
    return False


def has_final_model(path: Path, status: Mapping[str, Any]) -> bool:
    """A finished training run holds its final model (``model.pt``); other folders (a notebook
    run's, a population's parent) have none to check."""
    return status.get("kind") not in ("pretrain", "finetune") or (path / "model.pt").is_file()


def pretrained_source(source: str | os.PathLike) -> Path:
    """The file a finetuning run may load its pretrained weights from.

    Args:
        source: a pretraining run folder (or a finished finetuning agent's: the positive
            control's source), or a model/checkpoint file named explicitly.

    Returns:
        ``RUN/model.pt`` of a finished pretraining run (or agent), or the file itself when ``source`` is a
        file (an explicit choice, e.g. ``RUN/checkpoints/ckpt_00002000.pt``).

    Raises:
        ConfigError (``pretrained: ...``): no such file or folder, a folder that is not a
            pretraining run, or one that never finished (its latest checkpoint is not a result;
            the message lists the checkpoints to name instead).
    """
    source = Path(source)
    if source.is_file():
        return source
    if not source.is_dir():
        raise ConfigError(f"pretrained: {source}: no such pretraining run folder or model file")
    kind = run_kind(source)
    if kind not in ("pretrain", "finetune", ""):
        what = "not an sgi-lab run" if kind is None else f"a {kind} run"
        raise ConfigError(
            f"pretrained: {source}: {what}, not a pretraining run (or a finetuned agent's run)"
        )
    status = read_status(source) or {}
    model = source / "model.pt"
    if status.get("state") == FINISHED and model.is_file():
        return model
    if status.get("state") == FINISHED and restored_files(source):
        raise ConfigError(
            f"pretrained: {source}: restored from an experiment archive, which keeps results, "
            "not models: there is no model.pt to finetune from; run its pretraining again (the "
            "experiment does, for a task still to run)"
        )
    checkpoints = checkpoint_files(source)
    names = ", ".join(str(p) for p in checkpoints[-2:]) or "none"
    raise ConfigError(
        f"pretrained: {source}: the pretraining run never finished (state "
        f"{status.get('state')!r}, step {status.get('step')}); finish it (re-run its pretrain "
        f"command), or name a checkpoint file explicitly to finetune from it (have: {names})"
    )
