"""The tools researchers already use, fed by the metrics logger: TensorBoard event files beside
``metrics.jsonl`` (on unless ``SGI_LAB_TENSORBOARD=0``) and, as an option, a Weights & Biases run
(``SGI_LAB_WANDB=offline``). Guide: docs/tracking.md.

``metrics.jsonl`` stays the record every sgi-lab reader uses; the trackers are views of the same
rows, with the same keys and steps. A tracker that cannot start (its package missing) or that
breaks mid-run says so in one line and stops; the run and its ``metrics.jsonl`` go on.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sgi_lab.base.errors import SgiLabError

TENSORBOARD_ENV = "SGI_LAB_TENSORBOARD"
"""``0`` (or ``false``, ``off``, ``no``) switches the TensorBoard event files off; on by default."""
WANDB_ENV = "SGI_LAB_WANDB"
"""``offline`` (or ``online``) mirrors every run's metrics to a W&B run inside its folder."""
TENSORBOARD_FLUSH_SECS = 30
"""How often the event files are flushed. The rows are already durable in ``metrics.jsonl``, so
TensorBoard may lag by this much (and lose as much in a kill -9) for no write per row."""
EVENT_FILE_RE = re.compile(r"^events\.out\.tfevents\.(\d{10})\.")

_OFF = ("0", "false", "off", "no")
_ON = ("", "1", "true", "on", "yes")
WANDB_MODES = ("offline", "online")


class TrackingSettingError(SgiLabError, ValueError):
    """An ``SGI_LAB_TENSORBOARD`` / ``SGI_LAB_WANDB`` value that means nothing."""


def tensorboard_enabled() -> bool:
    """Whether runs write TensorBoard event files (`TENSORBOARD_ENV`; on when unset).

    Raises:
        TrackingSettingError: a value that is neither on nor off (named).
    """
    value = os.environ.get(TENSORBOARD_ENV, "").strip().lower()
    if value in _OFF or value in _ON:
        return value not in _OFF
    raise TrackingSettingError(
        f"{TENSORBOARD_ENV}={os.environ[TENSORBOARD_ENV]!r}: use 0 to switch TensorBoard off, "
        "1 (or unset) for on"
    )


def wandb_mode() -> str | None:
    """The W&B mode asked for (`WANDB_ENV`): ``"offline"``, ``"online"``, or None (off).

    Raises:
        TrackingSettingError: any other value (named).
    """
    value = os.environ.get(WANDB_ENV, "").strip().lower()
    if value in _OFF or value == "":
        return None
    if value in WANDB_MODES:
        return value
    raise TrackingSettingError(
        f"{WANDB_ENV}={os.environ[WANDB_ENV]!r}: use offline (or online; 0 or unset for none)"
    )


def tracking_settings() -> tuple[bool, str | None]:
    """``(TensorBoard on, W&B mode or None)`` from the environment, checked.

    Raises:
        TrackingSettingError: a value that means nothing (the variable named).
    """
    return tensorboard_enabled(), wandb_mode()


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The values of a metrics row a tracker can plot: numbers (bools as 0/1), finite ones; the
    step, None (a NaN in JSON), text and lists are left out."""
    out = {}
    for key, value in row.items():
        if key == "step" or not isinstance(value, (int, float)):
            continue
        value = float(value)
        if math.isfinite(value):
            out[key] = value
    return out


class TensorBoardMirror:
    """Event files in ``folder`` holding every row's scalars under the row's keys, at its step.

    Args:
        folder: the run folder (``tensorboard --logdir`` on it, or on any folder above it).
        resume_step: the checkpoint step a run resumes from: events past it (the rows
            ``metrics.jsonl`` drops) are purged from TensorBoard's view by a session-start
            marker at ``resume_step + 1``; None for a fresh start.
    """

    def __init__(self, folder: Path, resume_step: int | None) -> None:
        # tensorboard is a declared dependency, but an image built without it still trains
        from tensorboard.compat.proto.summary_pb2 import Summary
        from torch.utils.tensorboard import SummaryWriter

        self._summary = Summary
        self.folder = folder
        _after_event_files(event_files(folder))
        self.writer = SummaryWriter(
            log_dir=str(folder),
            purge_step=None if resume_step is None else int(resume_step) + 1,
            flush_secs=TENSORBOARD_FLUSH_SECS,
        )

    def log(self, step: int, values: Mapping[str, float]) -> None:
        # One event per row holding every key: what add_scalar writes per key (a simple_value
        # under its tag), at a 17th of the cost (0.07 ms a 20-key row against 1.2 ms).
        summary = self._summary(
            value=[self._summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        )
        self.writer.file_writer.add_summary(summary, step)

    def close(self) -> None:
        self.writer.close()


def event_files(folder: Path) -> list[Path]:
    """The TensorBoard event files of a run folder (its top level only)."""
    return sorted(p for p in folder.glob("events.out.tfevents.*") if p.is_file())


def _after_event_files(older: list[Path]) -> None:
    """Wait (at most about a second) until a new event file's name sorts after ``older``'s.

    TensorBoard reads a folder's event files in name order, and a name starts with the second
    it was made in: a resumed writer made within the same second as the last one could sort
    first, and the dropped rows would then show again after its purge marker.
    """
    stamps = [int(m.group(1)) for p in older if (m := EVENT_FILE_RE.match(p.name))]
    newest = max(stamps, default=0)
    deadline = time.monotonic() + 1.5  # a clock set back is not waited for
    while int(time.time()) <= newest and time.monotonic() < deadline:
        time.sleep(0.05)


class WandbMirror:
    """An offline (or online) W&B run inside the run folder (``RUN/wandb/``), logging every row
    at its step, with the run's ``config.yaml`` as its config.

    W&B cannot take back what it logged: a resumed run is a new W&B run of the same group
    (the folder's name) starting after the checkpoint's step.
    """

    def __init__(self, folder: Path, mode: str, resume_step: int | None) -> None:
        # wandb is optional and heavy: imported only when SGI_LAB_WANDB asks for it
        import wandb

        self.folder = folder
        status = _read_json(folder / "status.json")
        config_path = folder / "config.yaml"
        config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else None
        self.run = wandb.init(
            mode=mode,
            dir=str(folder),
            project=os.environ.get("WANDB_PROJECT", "sgi-lab"),
            name=folder.name if resume_step is None else f"{folder.name}@{resume_step}",
            group=folder.name,
            job_type=status.get("kind"),
            config=config if isinstance(config, dict) else None,
            # a population logs all its agents from one process: one W&B run per agent
            reinit="create_new",
        )

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        self.run.finish()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


class Trackers:
    """The mirrors a `sgi_lab.runs.folder.MetricsLogger` feeds (none, TensorBoard, W&B).

    A fresh start (``resume_step`` None) deletes the folder's earlier event files, TensorBoard
    on or off, as ``metrics.jsonl`` is emptied (``--overwrite``, or a restart before the first
    checkpoint). W&B runs already written stay: W&B cannot take back what it logged.

    Raises:
        TrackingSettingError: an unreadable `TENSORBOARD_ENV` or `WANDB_ENV` value.
    """

    def __init__(self, folder: str | os.PathLike, resume_step: int | None = None) -> None:
        folder = Path(folder)
        self.mirrors: list[Any] = []
        tensorboard, mode = tracking_settings()
        if resume_step is None:  # metrics.jsonl starts empty: so do the curves, on or off
            for path in event_files(folder):
                path.unlink()
        wanted = []
        if tensorboard:
            wanted.append(("TensorBoard", "pip install tensorboard", TensorBoardMirror, ()))
        if mode:
            wanted.append(
                (f"W&B ({WANDB_ENV}={mode})", "pip install 'sgi-lab[wandb]'", WandbMirror, (mode,))
            )
        for name, install, cls, args in wanted:
            try:
                self.mirrors.append(cls(folder, *args, resume_step))
            except ImportError:
                _say(f"{name}: not installed ({install}); metrics.jsonl is written as always")
            except Exception as exc:  # e.g. a wandb older than 0.19.10; the run goes on
                _say(
                    f"{name}: could not start ({type(exc).__name__}: {exc}); metrics.jsonl goes on"
                )

    def log(self, row: Mapping[str, Any]) -> None:
        values = scalars(row)
        if not values:
            return
        for mirror in list(self.mirrors):
            try:
                mirror.log(int(row["step"]), values)
            except Exception as exc:  # a view failing must not stop the run it shows
                self._drop(mirror, exc)

    def close(self) -> None:
        mirrors, self.mirrors = self.mirrors, []
        for mirror in mirrors:
            try:
                mirror.close()
            except Exception as exc:  # the rows are in metrics.jsonl whatever happens here
                _say(f"{type(mirror).__name__} of {getattr(mirror, 'folder', '')}: close: {exc}")

    def _drop(self, mirror: Any, exc: Exception) -> None:
        self.mirrors.remove(mirror)
        _say(
            f"{type(mirror).__name__}: stopped ({type(exc).__name__}: {exc}); metrics.jsonl goes on"
        )
        with contextlib.suppress(Exception):
            mirror.close()


def _say(message: str) -> None:
    warnings.warn(message, stacklevel=4)
