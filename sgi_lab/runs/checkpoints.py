"""Checkpoint files: their names, the safe loader that checks a file is ours and undamaged,
the listing of a run folder's checkpoints, and putting a saved random generator back.

Low in the house (nothing of sgi_lab imported): anything that reads a checkpoint or a model file
(the run lifecycle, transfer, evaluation, probes) loads it through `load_checkpoint`.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sgi_lab.base.errors import SgiLabError

# torch is imported by the functions that load: the run lifecycle, `sgi-lab status` and the
# CLI's parser import this module for the names alone, and must not pay for torch.
if TYPE_CHECKING:
    import torch

CHECKPOINT_RE = re.compile(r"ckpt_(\d{8})\.pt$")


class CheckpointError(SgiLabError, RuntimeError):
    """A checkpoint is missing, truncated, or not one of ours."""


def verify_checksums(path: str | os.PathLike, block: int = 16 << 20) -> None:
    """Check a checkpoint or model file against the checksums recorded when it was written.

    ``torch.save`` writes a zip archive whose every record (the pickled index, each tensor's
    bytes) carries the CRC-32 of its content; reading every record back checks them all, so a
    flipped byte anywhere in the weights is caught before they are used.

    Raises:
        CheckpointError: naming the file and the damaged record, or saying the file is not a
            PyTorch zip archive (what an sgi-lab checkpoint or model always is).
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                with archive.open(info) as fh:
                    while fh.read(block):
                        pass
    except zipfile.BadZipFile as exc:
        if "CRC" in str(exc):
            raise CheckpointError(
                f"{path}: damaged since it was written ({exc}: its checksum does not match)"
            ) from None
        raise CheckpointError(
            f"{path}: not a PyTorch checkpoint (not a zip archive, or a truncated one: {exc}); "
            "expected an sgi-lab model.pt or checkpoints/ckpt_*.pt"
        ) from None
    except (OSError, EOFError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable ({exc})") from None


def load_checkpoint(
    path: str | os.PathLike, map_location: Any = "cpu", kind: str | None = None
) -> dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``) and check it is ours.

    Args:
        path: checkpoint file.
        map_location: passed to ``torch.load``.
        kind: expected ``"kind"`` entry (``"pretrain"``, ``"finetune"``), checked when given.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: checkpoint not found")
    if path.is_dir():
        raise CheckpointError(f"{path}: a folder, expected a checkpoint or model file (.pt)")
    verify_checksums(path)
    import torch  # lazy: see the module's imports

    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        # PyTorch's own text advises weights_only=False: unsafe for a file of unknown origin.
        raise CheckpointError(
            f"{path}: holds pickled Python objects, not only tensors and plain data; sgi-lab "
            "refuses to load them (unpickling can run code)"
        ) from None
    except Exception as exc:  # a foreign zip, a record torch cannot read, ...
        raise CheckpointError(f"{path}: not a readable sgi-lab checkpoint ({exc})") from exc
    if not isinstance(payload, dict) or payload.get("format") != "sgi-lab":
        raise CheckpointError(f"{path}: not an sgi-lab checkpoint (foreign file)")
    if kind is not None and payload.get("kind") != kind:
        raise CheckpointError(f"{path}: a {payload.get('kind')!r} checkpoint, expected {kind!r}")
    return payload


def checkpoint_files(path: str | os.PathLike) -> list[Path]:
    """The checkpoint files (``checkpoints/ckpt_*.pt``) of run folder ``path``, oldest first;
    none when it has no ``checkpoints/`` folder."""
    folder = Path(path) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if CHECKPOINT_RE.search(p.name) and p.is_file()]
    return sorted(found, key=lambda p: int(CHECKPOINT_RE.search(p.name).group(1)))


def checkpoint_kind(path: str | os.PathLike) -> str | None:
    """The ``kind`` recorded in a folder's newest readable checkpoint of ours, or None.

    Only the checkpoint's small index is read (``mmap``: its tensors stay on disk)."""
    import torch  # lazy: see the module's imports

    for ckpt in reversed(checkpoint_files(path)):
        try:
            payload = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # torn, foreign, pickled: try an older one
            continue
        if isinstance(payload, dict) and payload.get("format") == "sgi-lab":
            return str(payload.get("kind") or "")
    return None


def restore_generator(generator: torch.Generator, state: torch.Tensor) -> bool:
    """Put a saved ``generator.get_state()`` back; False when it came from another device type.

    A run checkpointed on a GPU and resumed on a CPU (or the reverse) cannot carry its random
    stream across, since CPU and CUDA generators keep different states: the generator is then
    reseeded from the saved state's bytes, which keeps the resumed run deterministic but not
    identical to an uninterrupted one. The caller says so in its log.
    """
    import torch  # lazy: see the module's imports

    state = state.detach().to("cpu", torch.uint8)
    try:
        generator.set_state(state)
        return True
    except (RuntimeError, TypeError, ValueError):
        generator.manual_seed(int.from_bytes(bytes(state.flatten()[:8].tolist()), "little"))
        return False
