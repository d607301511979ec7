"""Free the disk a finished study holds in checkpoints: ``sgi-lab prune PATH...``.

A training run keeps its newest checkpoints (``checkpoints/ckpt_*.pt``: the weights, the
optimiser, and for finetuning the replay) so that an interrupted run resumes. Once the run has
finished (its status says so and its final ``model.pt`` is there) nothing reads them but a
choice to start from an intermediate step, and a study's run folders hold tens of GB of them.
`prune_checkpoints` deletes those of finished pretraining and finetuning runs only: by name (a
file of the user's in ``checkpoints/`` stays, and so does the folder then), never an unfinished
run's (it needs them to resume), never a folder another sgi-lab process holds (its lock), and
with ``dry_run`` nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sgi_lab.base.files import FolderLock, FolderLockedError
from sgi_lab.runs.checkpoints import CHECKPOINT_RE
from sgi_lab.runs.status import FINISHED, read_status, run_folders

__all__ = ["Pruned", "prune_checkpoints"]

TRAINING_KINDS = ("pretrain", "finetune")
"""The runs whose checkpoints are pruned: a notebook run's or a collection's are left alone."""


@dataclass(frozen=True)
class Pruned:
    """One run folder's checkpoints: ``removed`` (or, in a dry run, to remove) and their bytes,
    or why they were kept (``kept``: ``unfinished``, ``in use``)."""

    folder: Path
    files: tuple[Path, ...]
    size: int
    kept: str = ""


def prune_checkpoints(paths: Iterable[str | os.PathLike], dry_run: bool = False) -> list[Pruned]:
    """Delete the checkpoints of the finished training runs at or below ``paths``.

    Args:
        paths: run folders, or folders holding them (an experiment's ``outputs/experiments/X``).
        dry_run: report what would go, delete nothing.

    Returns:
        One `Pruned` per run folder with checkpoints: removed, or kept and why.
    """
    results = []
    for folder, status in _training_runs(paths):
        files = tuple(sorted(p for p in (folder / "checkpoints").iterdir() if _is_checkpoint(p)))
        if not files:
            continue
        size = sum(p.stat().st_size for p in files)
        if status.get("state") != FINISHED or not (folder / "model.pt").is_file():
            results.append(Pruned(folder, files, size, kept="unfinished"))
            continue
        if dry_run:
            results.append(Pruned(folder, files, size))
            continue
        try:
            lock = FolderLock(folder, "a run (pruning its checkpoints)")
        except FolderLockedError:
            results.append(Pruned(folder, files, size, kept="in use"))
            continue
        try:
            for path in files:
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty: a file of the user's is there
                (folder / "checkpoints").rmdir()
        finally:
            lock.release()
        results.append(Pruned(folder, files, size))
    return results


def _is_checkpoint(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and bool(CHECKPOINT_RE.fullmatch(path.name))


def _training_runs(paths: Iterable[str | os.PathLike]) -> list[tuple[Path, dict]]:
    """``(folder, status)`` of the training runs with a ``checkpoints/`` folder at or below
    ``paths``, each once (`sgi_lab.runs.status.run_folders`' walk: links followed)."""
    found: dict[Path, dict] = {}
    for root in map(Path, paths):
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such file or folder")
        for folder in run_folders(root):
            status = read_status(folder) or {}
            if status.get("kind") in TRAINING_KINDS and (folder / "checkpoints").is_dir():
                found[folder] = status
    return list(found.items())
