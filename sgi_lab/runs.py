"""Run folders: layout, status, metrics JSONL, atomic checkpoints and resume.

A run folder holds everything a run writes and nothing is written outside it::

    RUN/
      config.yaml          resolved config
      status.json          {"state": "running" | "finished" | "failed", "message", "step", ...}
      metrics.jsonl        one JSON object per row, always with a "step" key (pandas.read_json)
      checkpoints/ckpt_00001000.pt   atomic (temp file + rename), loaded with weights_only=True
      figures/             HTML figures
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_RE = re.compile(r"ckpt_(\d{8})\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, or not one of ours."""


def slug(text: str) -> str:
    """File-system-friendly name: ``ALE/Pong-v5`` -> ``ALE-Pong-v5``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-")


def run_name(*parts: Any) -> str:
    """``{notebook}__{config}__{game}__s{seed}`` style names (cleanrl's convention)."""
    return "__".join(slug(p) for p in parts if p is not None and p != "")


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to a temp file in the same folder, fsync, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, pickle of foreign classes, ...
        raise CheckpointError(f"{path}: not a readable sgi-lab checkpoint ({exc})") from exc
    if not isinstance(payload, dict) or payload.get("format") != "sgi-lab":
        raise CheckpointError(f"{path}: not an sgi-lab checkpoint (foreign file)")
    if kind is not None and payload.get("kind") != kind:
        raise CheckpointError(f"{path}: a {payload.get('kind')!r} checkpoint, expected {kind!r}")
    return payload


class RunDir:
    """A run folder: status, metrics and checkpoints.

    Args:
        path: the folder (created if missing).
        keep_checkpoints: how many of the newest checkpoints to keep.
    """

    def __init__(self, path: str | os.PathLike, keep_checkpoints: int = 2) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.keep = keep_checkpoints

    # -- layout -------------------------------------------------------------------------------
    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def figures_dir(self) -> Path:
        d = self.path / "figures"
        d.mkdir(exist_ok=True)
        return d

    # -- status -------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        path = self.path / "status.json"
        if not path.exists():
            return {"state": "new"}
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return {"state": "unknown"}

    def set_status(self, state: str, **info: Any) -> None:
        payload = {
            **self.status(),
            **info,
            "state": state,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        atomic_write_text(self.path / "status.json", json.dumps(payload, indent=2, default=str))

    @property
    def finished(self) -> bool:
        return self.status().get("state") == "finished"

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoints(self) -> list[Path]:
        if not self.checkpoints_dir.exists():
            return []
        found = [p for p in self.checkpoints_dir.iterdir() if CHECKPOINT_RE.search(p.name)]
        return sorted(found, key=lambda p: int(CHECKPOINT_RE.search(p.name).group(1)))

    def latest_checkpoint(self) -> Path | None:
        ckpts = self.checkpoints()
        return ckpts[-1] if ckpts else None

    def save_checkpoint(self, step: int, payload: dict[str, Any], kind: str) -> Path:
        """Write ``checkpoints/ckpt_{step:08d}.pt`` atomically and prune old ones."""
        path = self.checkpoints_dir / f"ckpt_{step:08d}.pt"
        atomic_torch_save({"format": "sgi-lab", "kind": kind, "step": step, **payload}, path)
        for old in self.checkpoints()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def load_latest(self, kind: str, map_location: Any = "cpu") -> dict[str, Any] | None:
        """The newest checkpoint, or None when the run has none yet."""
        latest = self.latest_checkpoint()
        return None if latest is None else load_checkpoint(latest, map_location, kind=kind)

    # -- metrics ------------------------------------------------------------------------------
    def metrics_logger(self, resume_step: int | None = None) -> MetricsLogger:
        return MetricsLogger(self.metrics_path, resume_step=resume_step)

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.metrics_path)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line from a crash
    return rows


def _clean(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            return value.item()
        except (ValueError, AttributeError):
            pass
    return value


class MetricsLogger:
    """Appends JSON rows to ``metrics.jsonl``; on resume drops rows past the checkpoint's step.

    Args:
        path: the JSONL file.
        resume_step: when resuming from a checkpoint at this step, rows with a larger step (logged
            after that checkpoint, before the crash) are removed so no step appears twice.
            ``None`` starts a fresh file.
    """

    def __init__(self, path: str | os.PathLike, resume_step: int | None = None) -> None:
        self.path = Path(path)
        if resume_step is None:
            atomic_write_text(self.path, "")
        else:
            kept = [r for r in read_jsonl(self.path) if r.get("step", -1) <= resume_step]
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self._fh = open(self.path, "a")

    def log(self, step: int, **values: Any) -> dict[str, Any]:
        row = {"step": int(step), **{k: _clean(v) for k, v in values.items()}}
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        return row

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def restore_generator(generator: torch.Generator, state: torch.Tensor) -> bool:
    """Put a saved ``generator.get_state()`` back; False when it came from another device type.

    A run checkpointed on a GPU and resumed on a CPU (or the reverse) cannot carry its random
    stream across, since CPU and CUDA generators keep different states: the generator is then
    reseeded from the saved state's bytes, which keeps the resumed run deterministic but not
    identical to an uninterrupted one. The caller says so in its log.
    """
    state = state.detach().to("cpu", torch.uint8)
    try:
        generator.set_state(state)
        return True
    except (RuntimeError, TypeError, ValueError):
        generator.manual_seed(int.from_bytes(bytes(state.flatten()[:8].tolist()), "little"))
        return False
