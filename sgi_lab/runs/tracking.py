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
import struct
import time
import warnings
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.files import atomic_write_text, read_jsonl

TENSORBOARD_ENV = "SGI_LAB_TENSORBOARD"
"""``0`` (or ``false``, ``off``, ``no``) switches the TensorBoard event files off; on by default."""
WANDB_ENV = "SGI_LAB_WANDB"
"""``offline`` (or ``online``) mirrors every run's metrics to a W&B run inside its folder."""
TENSORBOARD_FLUSH_SECS = 30
"""How often the event files are flushed. The rows are already durable in ``metrics.jsonl``, so
TensorBoard may lag by this much (and lose as much in a kill -9) for no write per row."""
EVENT_FILE_RE = re.compile(r"^events\.out\.tfevents\.(\d{10})\.")
WANDB_RUNS_FILE = "sgi_lab_runs.json"
"""In ``RUN/wandb/``: the W&B runs made since the folder's last fresh start, oldest first (their
folder names, and the step each resumed at), which a resume checks ``metrics.jsonl`` against
(`WandbMirror`)."""
WANDB_RUN_DIR_RE = re.compile(r"^(offline-)?run-[A-Za-z0-9_-]+$")

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
    (the folder's name). W&B writes its ``.wandb`` file in batches, so a kill -9 loses the rows
    it had not written yet; a resume from step N therefore first replays the rows of
    ``metrics.jsonl`` (all at steps up to N) that no W&B run since the folder's last fresh
    start holds, then goes on after N. Those runs are listed in `WANDB_RUNS_FILE`; a run's rows
    past a later resume's step are not counted (``metrics.jsonl`` dropped and rewrote them).

    Attributes:
        replayed: the steps replayed into this run when it started (empty for a fresh start).
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
        earlier = None if resume_step is None else wandb_history(folder)
        runs = [*(earlier or []), (Path(self.run.dir).parent.name, resume_step)]
        # listed before replaying: a kill during the replay leaves what it wrote counted
        _write_wandb_history(folder, runs)
        self.replayed = [] if resume_step is None else self._replay(earlier, resume_step)

    def _replay(self, earlier: list[tuple[str, int | None]] | None, resume_step: int) -> list[int]:
        """Log, at their steps, the rows of ``metrics.jsonl`` whose step none of the ``earlier``
        W&B runs holds (all of them when the list is unknown); returns those steps."""
        held: set[int] = set()
        for k, (name, _) in enumerate(earlier or ()):
            # its rows past a later resume's step were dropped from metrics.jsonl, then redone
            valid_to = min([resume_step, *(s for _, s in earlier[k + 1 :] if s is not None)])
            try:
                steps = wandb_history_steps(self.folder / "wandb" / name)
            except WandbFileError as exc:  # its rows are logged again rather than lost
                _say(f"W&B: {exc}; its steps are replayed")
                continue
            held |= {s for s in steps if s <= valid_to}
        rows = [r for r in read_jsonl(self.folder / "metrics.jsonl") if _step_of(r) is not None]
        rows = [r for r in rows if _step_of(r) not in held and scalars(r)]
        rows.sort(key=_step_of)  # W&B drops a step lower than one it has logged
        for row in rows:
            self.run.log(scalars(row), step=_step_of(row))
        steps = sorted({_step_of(r) for r in rows})
        if steps:
            why = (
                "that the folder's earlier W&B runs lack (a kill -9 loses what W&B had not written)"
                if earlier is not None
                else f"(no {WANDB_RUNS_FILE} names the folder's earlier W&B runs)"
            )
            _say(
                f"W&B: replayed {len(rows)} row(s) of metrics.jsonl at {len(steps)} step(s) "
                f"({_ranges(steps)}) {why} into {self.run.name}"
            )
        return steps

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        self.run.finish()


class WandbFileError(SgiLabError, ValueError):
    """A W&B run's ``.wandb`` file that cannot be read (another format, say)."""


def wandb_history(folder: Path) -> list[tuple[str, int | None]] | None:
    """The W&B runs of ``folder`` made since its last fresh start, oldest first, as (folder name
    under ``RUN/wandb/``, the step it resumed at or None for the fresh start), from
    `WANDB_RUNS_FILE`; None when that file is missing or unreadable (a folder written before it
    existed, or with W&B off at its fresh start)."""
    runs = _read_json(folder / "wandb" / WANDB_RUNS_FILE).get("runs")
    if not isinstance(runs, list):
        return None
    # an entry edited into something else is not read: its steps are replayed, not lost
    return [
        (r["name"], r["resume_step"])
        for r in runs
        if isinstance(r, dict)
        and isinstance(r.get("name"), str)
        and WANDB_RUN_DIR_RE.match(r["name"])
        and (r.get("resume_step") is None or _as_step(r["resume_step"]) is not None)
    ]


def _write_wandb_history(folder: Path, runs: list[tuple[str, int | None]]) -> None:
    payload = {"runs": [{"name": name, "resume_step": step} for name, step in runs]}
    atomic_write_text(folder / "wandb" / WANDB_RUNS_FILE, json.dumps(payload, indent=1))


# The .wandb file: a header (":W&B", magic 0xBEE1, version 0), then LevelDB log blocks of
# 32 KiB, each record in chunks with a header of crc32 (seeded by the chunk type), length, type.
_WANDB_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_CHUNK_CRC = [zlib.crc32(bytes([kind])) for kind in range(5)]


def wandb_records(path: Path) -> list[bytes]:
    """The serialized records of a ``.wandb`` file, up to its first damaged or cut chunk (a
    kill -9 leaves the file cut anywhere).

    Raises:
        WandbFileError: the file does not start with W&B's header (another format).
    """
    data = path.read_bytes()
    if len(data) < _WANDB_HEADER.size or _WANDB_HEADER.unpack_from(data) != (b":W&B", 0xBEE1, 0):
        raise WandbFileError(f"{path}: not a W&B transaction log this version can read")
    records, parts, at = [], [], _WANDB_HEADER.size
    while True:
        if _BLOCK - at % _BLOCK < _CHUNK_HEADER.size:  # a block's tail too short for a header
            at += _BLOCK - at % _BLOCK
        if at + _CHUNK_HEADER.size > len(data):
            return records
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, at)
        chunk = data[at + _CHUNK_HEADER.size : at + _CHUNK_HEADER.size + length]
        if kind > _LAST or len(chunk) < length or zlib.crc32(chunk, _CHUNK_CRC[kind]) != crc:
            return records
        at += _CHUNK_HEADER.size + length
        if kind in (_FULL, _FIRST):
            parts = [chunk]
        elif parts:
            parts.append(chunk)
        if kind in (_FULL, _LAST) and parts:
            records.append(b"".join(parts))
            parts = []


def wandb_history_steps(run_dir: Path) -> set[int]:
    """The steps a W&B run folder's ``.wandb`` file holds history rows for (none when it has no
    such file: deleted, or the run died before W&B made it).

    Raises:
        WandbFileError: a file this version cannot read.
    """
    try:  # lazy: wandb is optional
        from wandb.proto.wandb_internal_pb2 import Record
    except ImportError as exc:
        raise WandbFileError(f"{run_dir}: cannot read without wandb's protobufs ({exc})") from exc
    steps = set()
    for path in sorted(run_dir.glob("run-*.wandb")):
        for raw in wandb_records(path):
            record = Record()
            try:
                record.ParseFromString(raw)
            except Exception:  # a record of a newer wandb: the rest can still be read
                continue
            if record.WhichOneof("record_type") == "history":
                steps.add(_history_step(record.history))
    return steps


def _history_step(history: Any) -> int:
    """A W&B history record's step: its ``step.num``, or its ``_step`` item."""
    if history.HasField("step"):
        return int(history.step.num)
    for item in history.item:
        if item.key == "_step" or list(item.nested_key) == ["_step"]:
            return int(json.loads(item.value_json))
    return -1


def _step_of(row: Mapping[str, Any]) -> int | None:
    return _as_step(row.get("step"))


def _as_step(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ranges(steps: list[int], most: int = 8) -> str:
    """``3, 6, 9`` (the first and last few of a long list)."""
    shown = steps if len(steps) <= most else [*steps[:4], "...", *steps[-3:]]
    return ", ".join(map(str, shown))


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
    checkpoint), and forgets its W&B runs (`WANDB_RUNS_FILE`): W&B runs already written stay,
    as W&B cannot take back what it logged, but a resume no longer counts their rows as held.

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
            with contextlib.suppress(FileNotFoundError):
                (folder / "wandb" / WANDB_RUNS_FILE).unlink()
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
