"""Run folders: layout, status, metrics JSONL, atomic checkpoints and resume.

A run folder holds everything a run writes and nothing is written outside it (its files:
outputs/README.md). Every stage that writes a run (pretraining, finetuning) goes through one lifecycle,
:meth:`RunDir.open` -> :meth:`RunDir.start` -> :meth:`RunDir.finish` (or :meth:`RunDir.fail`),
so they all refuse the same folders, check a resumed config the same way and write the same
status words and fields.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import re
import signal
import sys
import threading
import time
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import yaml

from sgi_lab.config import ConfigError
from sgi_lab.files import (
    LOCK_FILE,
    TEMP_RE,
    DiskFullError,
    FolderLock,
    RunFolderError,
    _read_jsonl,
    atomic_torch_save,
    atomic_write_text,
    jsonable,
    raise_if_disk_full,
    read_jsonl,
    record_provenance,
)

CHECKPOINT_RE = re.compile(r"ckpt_(\d{8})\.pt$")

# The status words every stage writes, and nothing else.
RUNNING, FINISHED, FAILED = "running", "finished", "failed"
STATES = (RUNNING, FINISHED, FAILED)

# Config keys that may change when a run resumes: where and how fast it runs, not what it
# learns. Every other key must match the run's config.yaml (one list, for every stage).
RUNTIME_KEYS = frozenset(
    {
        "device",
        "threads",
        "prefetch",
        "env_workers",
        "cuda_graphs",
        "population_batching",
        "cpu_amp",
        "channels_last",
    }
)

# What a run writes at its top level, and the folders it writes checkpoints (and a notebook its
# figures) into: --overwrite removes these files and the checkpoints, nothing else.
RUN_FILES = (
    "config.yaml",
    "status.json",
    "metrics.jsonl",
    "log.txt",
    "model.pt",
    "eval.json",
    "transfer.json",
)
RUN_FOLDERS = ("checkpoints", "figures")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, or not one of ours."""


class RunStopped(Exception):
    """A run stopped cleanly before finishing, at a step it has a checkpoint for: its time
    limit passed or it was asked to stop (SIGTERM). The same command resumes it."""

    def __init__(self, step: int | None, why: str) -> None:
        where = "during its evaluation" if step is None else f"at step {step}"
        super().__init__(f"stopped {where}: {why}; re-run the same command to resume")
        self.step = step
        self.why = why


class Deadline:
    """When a long run should stop at its next checkpointable step: ``seconds`` after it was
    made (None: no time limit), or as soon as `request_stop` is called (a SIGTERM handler, a
    scheduler's pre-emption notice).

    A GPU lent for ten-minute commands, a cluster's wall-clock limit: the run checkpoints and
    stops inside the limit instead of being killed and losing the work since its last periodic
    checkpoint.
    """

    def __init__(self, seconds: float | None = None) -> None:
        if seconds is not None and not seconds > 0:
            raise ConfigError(f"a time limit must be a positive number of seconds, got {seconds!r}")
        self.seconds = seconds
        self.end = math.inf if seconds is None else time.monotonic() + seconds
        self.requested: str | None = None

    def request_stop(self, why: str = "asked to stop") -> None:
        self.requested = why

    def left(self) -> float:
        """Seconds until the time limit (inf without one)."""
        return self.end - time.monotonic()

    def reason(self) -> str | None:
        """Why the run must stop now, or None to go on."""
        if self.requested:
            return self.requested
        if self.left() <= 0:
            return f"its time limit of {self.seconds:g} s passed"
        return None


@contextlib.contextmanager
def stop_on_signals(stop: Deadline, *signums: int) -> Iterator[None]:
    """The first of ``signums`` to arrive asks ``stop`` to stop at the next step (every agent
    checkpoints there) instead of acting at once; a second one acts as it did before (SIGINT:
    KeyboardInterrupt, SIGTERM: the process ends). Outside the main thread nothing changes.

    SIGINT is Ctrl-C in a terminal and a notebook's "interrupt kernel"; SIGTERM is what
    `timeout` and schedulers send before they kill.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        for number, before in previous.items():
            signal.signal(number, before)
        name = signal.Signals(signum).name
        stop.request_stop(f"{name} received")
        print(
            f"{name}: stopping at the next step, with a checkpoint; send it again to stop at "
            "once without one",
            file=sys.stderr,
            flush=True,
        )

    for number in signums:
        before = signal.signal(number, handler)
        previous[number] = signal.SIG_DFL if before is None else before
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)


def failure_reason(exc: BaseException) -> str:
    """The ``message`` of a run that ended with ``exc`` (status.json)."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (re-run the same command to resume)"
    if isinstance(exc, RunStopped):
        return str(exc)
    if isinstance(exc, DiskFullError):
        return f"stopped: {exc}; free some space, then re-run the same command to resume"
    return f"{type(exc).__name__}: {exc}"


def parse_duration(text: str | float) -> float:
    """Seconds from ``540``, ``90s``, ``9m``, ``1.5h``; a clear error otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", str(text))
    seconds = float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]] if match else 0
    if not seconds > 0:
        raise ConfigError(f"a duration like 540, 90s, 9m or 1.5h was expected, got {text!r}")
    return seconds


class UnfinishedRunError(RuntimeError):
    """A run that never finished was asked for as a result (evaluate, report, finetune from)."""


def slug(text: str) -> str:
    """File-system-friendly name: ``ALE/Pong-v5`` -> ``ALE-Pong-v5``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-")


def run_name(*parts: Any) -> str:
    """``{notebook}__{config}__{game}__s{seed}`` style names (cleanrl's convention)."""
    return "__".join(slug(p) for p in parts if p is not None and p != "")


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


def run_folders(root: str | os.PathLike) -> list[Path]:
    """Run folders under ``root`` (``root`` itself when it is one), in path order: folders with a
    ``status.json`` of ours (`read_status`), not inside a run's ``checkpoints/``; none when
    ``root`` is not a folder. The one walk that finds runs (``sgi-lab status``, a notebook's
    `sgi_lab.launch.notebook_api.find_runs_of_kind`)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for status in sorted(root.rglob("status.json")):
        folder = status.parent
        if "checkpoints" in folder.relative_to(root).parts:
            continue
        if read_status(folder) is not None:
            found.append(folder)
    return found


def _checkpoint_files(path: Path) -> list[Path]:
    folder = path / "checkpoints"
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if CHECKPOINT_RE.search(p.name) and p.is_file()]
    return sorted(found, key=lambda p: int(CHECKPOINT_RE.search(p.name).group(1)))


def _checkpoint_kind(path: Path) -> str | None:
    """The ``kind`` recorded in a folder's newest readable checkpoint of ours, or None.

    Only the checkpoint's small index is read (``mmap``: its tensors stay on disk)."""
    for ckpt in reversed(_checkpoint_files(path)):
        try:
            payload = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # torn, foreign, pickled: try an older one
            continue
        if isinstance(payload, dict) and payload.get("format") == "sgi-lab":
            return str(payload.get("kind") or "")
    return None


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
    return (path / "config.yaml").is_file() and bool(_checkpoint_files(path))


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
        if (path / "config.yaml").is_file() and _checkpoint_files(path):
            return _checkpoint_kind(path)
        return None
    if status.get("kind"):
        return str(status["kind"])
    if (path / "config.yaml").is_file() or "notebook" in status:
        return ""
    return None


def _entries(path: Path) -> list[Path]:
    """A folder's entries, but for the lock file (a folder holding only it is empty)."""
    return [p for p in path.iterdir() if p.name != LOCK_FILE]


def check_run_folder(path: str | os.PathLike, kind: str) -> bool:
    """Refuse a folder a ``kind`` run must not write into; True when it already holds one.

    A missing or empty folder is fine (False); a folder holding a ``kind`` run of ours (or an
    older run without a kind) is fine (True); anything else raises :class:`RunFolderError`
    naming the folder, before anything in it is touched.
    """
    path = Path(path)
    if not path.exists():
        return False
    if not path.is_dir():
        raise RunFolderError(f"{path}: exists and is not a folder; refusing to write a run there")
    if not _entries(path):
        return False
    found = run_kind(path)
    if found is None:
        raise RunFolderError(
            f"{path}: not empty and not an sgi-lab run (no status.json of ours); refusing to "
            f"write a {kind} run into it: choose another --out"
        )
    if found and found != kind:
        raise RunFolderError(
            f"{path}: holds a {found} run, not a {kind} run; refusing to write into it"
        )
    return True


def config_changes(
    saved: Mapping[str, Any], config: Mapping[str, Any], runtime_keys=RUNTIME_KEYS
) -> dict[str, tuple[Any, Any]]:
    """``{key: (saved, new)}`` for every non-runtime key whose value differs (the one check)."""
    keys = sorted((set(saved) | set(config)) - set(runtime_keys))
    missing = object()
    changes = {}
    for key in keys:
        old, new = saved.get(key, missing), config.get(key, missing)
        if old is missing or new is missing:
            # A key added to (or dropped from) the config class since the run started: only
            # a real value on both sides can differ.
            continue
        if old != new:
            changes[key] = (old, new)
    return changes


def check_same_config(
    path: str | os.PathLike,
    saved: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    runtime_keys=RUNTIME_KEYS,
) -> None:
    """Raise ConfigError naming every changed key when a run is resumed with another config."""
    if not saved:
        return
    changes = config_changes(saved, config, runtime_keys)
    if changes:
        details = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items())
        raise ConfigError(
            f"{path} holds a run with a different config ({list(changes)}: {details}); "
            "re-run with its config, use another folder, or --overwrite to start it over"
        )


def clean_temp_files(*folders: str | os.PathLike) -> list[Path]:
    """Remove the temp files a killed atomic write left (``.NAME.PID.tmp``); returns them.

    Only our own naming pattern is touched, and a file whose writer is still alive is kept.
    """
    removed = []
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            match = TEMP_RE.match(path.name)
            if not match or not path.is_file():
                continue
            pid = int(match["pid"])
            if pid != os.getpid() and _alive(pid):
                continue
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


class RunDir:
    """A run folder: status, metrics and checkpoints, and the lifecycle every stage shares.

    A stage writes its run through :meth:`open` (refuse a foreign folder, check a resumed
    config and inputs, clean crash litter), :meth:`start` (create the folder, write
    ``config.yaml``, status ``running``), then :meth:`finish` or :meth:`fail`. Used as a
    context manager after :meth:`start`, an exception marks the run ``failed`` with its reason.

    ``RunDir(path)`` on its own is the reader (and low-level writer) of an existing folder.

    Args:
        path: the folder.
        keep_checkpoints: how many of the newest checkpoints to keep.
        create: create the folder now (readers of old code expect it); :meth:`open` does not,
            so a run that fails its checks leaves nothing behind.
    """

    def __init__(
        self, path: str | os.PathLike, keep_checkpoints: int = 2, create: bool = True
    ) -> None:
        self.path = Path(path)
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
        self.keep = keep_checkpoints
        self.kind: str | None = None
        self.run_config: dict[str, Any] | None = None
        self.inputs: dict[str, str] = {}
        self.started = False
        self._lock: FolderLock | None = None
        self._new = False  # opened (`open`) as a missing or empty folder

    # -- lifecycle ----------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        kind: str,
        config: Mapping[str, Any],
        *,
        overwrite: bool = False,
        inputs: Mapping[str, str] | None = None,
        runtime_keys=RUNTIME_KEYS,
        keep_checkpoints: int = 2,
    ) -> RunDir:
        """Open run folder ``path`` for a ``kind`` run with ``config``; writes nothing yet.

        Order of checks, all before anything is written:

        1. A folder that is not empty and not a ``kind`` run of ours is refused
           (:class:`RunFolderError` naming it), with or without ``overwrite``.
        2. ``overwrite``: the run's own files (:data:`RUN_FILES`, and the checkpoints in
           ``checkpoints/``) are removed; anything else in the folder and its sub-folders
           stays.
        3. Otherwise an existing run must have been started with the same config (every key
           but :data:`RUNTIME_KEYS`) and the same inputs (e.g. ``{"data": store fingerprint}``);
           :class:`sgi_lab.config.ConfigError` names what differs. Temp files of killed
           atomic writes are removed from the folder and ``checkpoints/``.

        Then check what else can fail (load the pretrained model, build the network), call
        :meth:`start`, and resume from :meth:`load_latest` when :attr:`resuming`. A finished run
        has :attr:`finished` true: return its results instead of training again.

        Args:
            path: the run folder (created by :meth:`start`, not here).
            kind: the stage, recorded in ``status.json`` (``"pretrain"``, ``"finetune"``).
            config: the resolved config as a plain dict (``config.to_dict``).
            overwrite: start over, discarding this run's files (only ever a run of ours).
            inputs: identities of what the run reads (name -> string, e.g. a store's content
                fingerprint), recorded in the status and checked on resume.
            runtime_keys: config keys allowed to change on resume.
            keep_checkpoints: how many of the newest checkpoints to keep.

        Returns:
            The run folder, not yet started.
        """
        path = Path(path)
        exists = check_run_folder(path, kind)
        run = cls(path, keep_checkpoints, create=False)
        run.kind = kind
        run.run_config = dict(config)
        run.inputs = {k: str(v) for k, v in (inputs or {}).items()}
        run._new = not exists
        if exists and not overwrite:
            check_same_config(path, run.saved_config(), run.run_config, runtime_keys)
            recorded = run.status().get("inputs") or {}
            for name, identity in run.inputs.items():
                if recorded.get(name) not in (None, identity):
                    raise ConfigError(
                        f"{path} was started on {name} {recorded[name]}, not {identity} "
                        f"(--{name} points at another one); use the same {name}, another "
                        "folder, or --overwrite to start it over"
                    )
        if exists and (overwrite or not run.finished):
            run.lock()  # before anything in it is written or removed
        if exists and overwrite:
            run._clear()
        elif exists and not run.finished:
            clean_temp_files(path, run.checkpoints_dir)
        return run

    def lock(self) -> None:
        """Take the folder's `FolderLock` (once) for as long as this run writes."""
        if self._lock is None or not self._lock.held:
            self._lock = FolderLock(self.path, f"a {self.kind or ''} run".replace("  ", " "))

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def saved_config(self) -> dict[str, Any] | None:
        """The run's ``config.yaml`` as a dict (None when missing or unreadable)."""
        try:
            saved = yaml.safe_load((self.path / "config.yaml").read_text())
        except (OSError, yaml.YAMLError):
            return None
        return saved if isinstance(saved, dict) else None

    @property
    def resuming(self) -> bool:
        """True when the run has a checkpoint to resume from."""
        return bool(self.checkpoints())

    def start(self, step: int = 0, **info: Any) -> None:
        """Create the folder, take its lock, write ``config.yaml`` and status ``running``
        (with ``info``)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock()
        if self._new and (self.path / "status.json").exists():
            # Opened as a new folder, but another process started a run here since.
            self.unlock()
            raise RunFolderError(
                f"{self.path}: another sgi-lab process started a run here meanwhile; run this "
                "again to resume (or return) that run"
            )
        if self.run_config is not None:
            atomic_write_text(
                self.path / "config.yaml", yaml.safe_dump(self.run_config, sort_keys=False)
            )
        fields = {"kind": self.kind, "step": int(step), "message": ""}
        if self.inputs:
            fields["inputs"] = {**(self.status().get("inputs") or {}), **self.inputs}
        if step == 0 or "started" not in self.status():
            fields["started"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        fields["provenance"] = record_provenance(self.status(), step)
        self.set_status(RUNNING, **fields, **info)
        self.started = True

    def fail(self, reason: str, step: int | None = None, **info: Any) -> None:
        """Status ``failed`` with the reason (a resumable run: re-run the command)."""
        if step is not None:
            info["step"] = int(step)
        self.set_status(FAILED, message=reason, **info)
        self.unlock()

    def finish(self, step: int, **info: Any) -> None:
        """Status ``finished``: the run's results are complete and may be reported."""
        self.set_status(FINISHED, step=int(step), message="", **info)
        self.unlock()

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and not self.started:
            self.unlock()
        if exc is None or not self.started:
            return
        try:
            self.fail(failure_reason(exc))
        except OSError:
            pass  # the disk that failed the run may fail this too; the exception says why

    def _clear(self) -> None:
        keep_status = "notebook" in self.status()  # a notebook runner's status: keep it
        for name in RUN_FILES:
            if name == "status.json" and keep_status:
                continue
            (self.path / name).unlink(missing_ok=True)
        # In its folders, only the files a run writes (checkpoints, by name); a user's files
        # there stay, and a folder left empty goes.
        for name in RUN_FOLDERS:
            folder = self.path / name
            if not folder.is_dir():
                continue
            for path in folder.iterdir():
                if CHECKPOINT_RE.fullmatch(path.name) and path.is_file() and name == "checkpoints":
                    path.unlink()
            clean_temp_files(folder)
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty
        clean_temp_files(self.path)

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
            payload = json.loads(path.read_text())
        except ValueError:  # torn by a crash (or not text)
            return {"state": "unknown"}
        return payload if isinstance(payload, dict) else {"state": "unknown"}

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
        """Finished on positive evidence only: a readable status saying so and, for a training
        run, its final ``model.pt``."""
        status = self.status()
        return status.get("state") == FINISHED and _has_final_model(self.path, status)

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
        """The newest readable checkpoint, or None when the run has none yet.

        A newer checkpoint that cannot be read (a kill mid-write on a file system without
        atomic rename, a disk error) is skipped with a warning naming it, and the run resumes
        from the newest one that loads. When none loads, the newest one's error is raised.
        """
        checkpoints = self.checkpoints()
        errors: list[CheckpointError] = []
        for path in reversed(checkpoints):
            try:
                payload = load_checkpoint(path, map_location, kind=kind)
            except CheckpointError as exc:
                errors.append(exc)
                continue
            if errors:
                warnings.warn(
                    f"{self.path}: newest checkpoint(s) unreadable ({'; '.join(map(str, errors))}); "
                    f"resuming from {path.name} instead",
                    stacklevel=2,
                )
            return payload
        if errors:
            raise errors[0]
        return None

    # -- metrics ------------------------------------------------------------------------------
    def metrics_logger(self, resume_step: int | None = None) -> MetricsLogger:
        return MetricsLogger(self.metrics_path, resume_step=resume_step)

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.metrics_path)


class MetricsLogger:
    """Appends JSON rows to ``metrics.jsonl``; on resume drops rows past the checkpoint's step.

    Args:
        path: the JSONL file.
        resume_step: when resuming from a checkpoint at this step, rows with a larger step (logged
            after that checkpoint, before the crash) are removed so no step appears twice, and
            so are damaged lines; every other row is kept, and a warning says what was dropped.
            ``None`` starts a fresh file.
    """

    def __init__(self, path: str | os.PathLike, resume_step: int | None = None) -> None:
        self.path = Path(path)
        if resume_step is None:
            atomic_write_text(self.path, "")
        else:
            rows, bad = _read_jsonl(self.path)
            kept = [r for r in rows if _row_step(r) <= resume_step]
            past = len(rows) - len(kept)
            if bad or past:
                warnings.warn(
                    f"{self.path}: resuming at step {resume_step}, kept {len(kept)} row(s); "
                    f"dropped {bad} unreadable line(s) and {past} row(s) logged after that "
                    "checkpoint",
                    stacklevel=2,
                )
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self._fh = open(self.path, "a")

    def log(self, step: int, **values: Any) -> dict[str, Any]:
        row = {"step": int(step), **{k: jsonable(v) for k, v in values.items()}}
        try:
            self._fh.write(json.dumps(row) + "\n")
            self._fh.flush()
        except OSError as exc:
            raise_if_disk_full(exc, self.path)
            raise
        return row

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _row_step(row: Mapping[str, Any]) -> float:
    """A metrics row's step; a row without a numeric one sorts first (kept on resume)."""
    step = row.get("step", -1)
    return step if isinstance(step, (int, float)) and not isinstance(step, bool) else -1


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


# -- results: only finished runs count ---------------------------------------------------------


def require_finished(path: str | os.PathLike, what: str, allow_unfinished: bool = False) -> bool:
    """Refuse a run that never finished as a result; returns whether it finished.

    Args:
        path: the run folder.
        what: what is being done with it, for the message (``"evaluate"``, ``"report"``).
        allow_unfinished: accept it anyway (``--allow-unfinished``); the caller marks it.

    Raises:
        UnfinishedRunError: the run's status is not ``finished`` and ``allow_unfinished`` is
            false. A folder without a status of ours (a bare exported model) is accepted.
    """
    path = Path(path)
    status = read_status(path)
    if status is None:
        if not interrupted_without_status(path):
            return True  # a bare exported model: nothing says it is a run
        checkpoints = _checkpoint_files(path)
        newest = f", newest checkpoint {checkpoints[-1].name}" if checkpoints else ""
        problem = (
            f"its status.json is missing or unreadable{newest}: an interrupted run, not a result"
        )
    elif status.get("state") == FINISHED and _has_final_model(path, status):
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


def _has_final_model(path: Path, status: Mapping[str, Any]) -> bool:
    """A finished training run holds its final model (``model.pt``); other folders (a notebook
    run's, a population's parent) have none to check."""
    return status.get("kind") not in ("pretrain", "finetune") or (path / "model.pt").is_file()


def pretrained_source(source: str | os.PathLike) -> Path:
    """The file a finetuning run may load its pretrained weights from.

    Args:
        source: a pretraining run folder, or a model/checkpoint file named explicitly.

    Returns:
        ``RUN/model.pt`` of a finished pretraining run, or the file itself when ``source`` is a
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
    if kind not in ("pretrain", ""):
        what = "not an sgi-lab run" if kind is None else f"a {kind} run"
        raise ConfigError(f"pretrained: {source}: {what}, not a pretraining run")
    status = read_status(source) or {}
    model = source / "model.pt"
    if status.get("state") == FINISHED and model.is_file():
        return model
    checkpoints = RunDir(source, create=False).checkpoints()
    names = ", ".join(str(p) for p in checkpoints[-2:]) or "none"
    raise ConfigError(
        f"pretrained: {source}: the pretraining run never finished (state "
        f"{status.get('state')!r}, step {status.get('step')}); finish it (re-run its pretrain "
        f"command), or name a checkpoint file explicitly to finetune from it (have: {names})"
    )


class FinetuneRun(RunDir):
    """A finetuning run folder, with readers for its outputs.

    Layout (beside the common run files)::

        RUN/log.txt            what was loaded, resumed, evaluated
        RUN/transfer.json      which tensors came from the pretrained run, which are fresh
        RUN/model.pt           the final model (kind "finetuned_model")
        RUN/eval.json          evaluation of the final model (sgi_lab.train.evaluate)
    """

    @property
    def evaluation(self) -> dict[str, Any] | None:
        """``eval.json`` (None until the run is evaluated)."""
        path = self.path / "eval.json"
        return json.loads(path.read_text()) if path.exists() else None

    @property
    def transfer(self) -> dict[str, Any] | None:
        path = self.path / "transfer.json"
        return json.loads(path.read_text()) if path.exists() else None

    @property
    def config(self) -> dict[str, Any] | None:
        path = self.path / "config.yaml"
        return yaml.safe_load(path.read_text()) if path.exists() else None

    def metrics(self):
        """metrics.jsonl as a pandas DataFrame (one row per logged step)."""
        import pandas as pd

        return pd.DataFrame(read_jsonl(self.metrics_path))

    def episodes(self):
        """The episode rows of the metrics: step, return (raw), clipped_return, length."""
        import pandas as pd

        df = self.metrics()
        if df.empty or "episode/return" not in df:
            return pd.DataFrame(columns=["step", "return", "clipped_return", "length"])
        df = df.dropna(subset=["episode/return"])
        return df[["step", "episode/return", "episode/clipped_return", "episode/length"]].rename(
            columns=lambda c: c.removeprefix("episode/")
        )

    def __repr__(self) -> str:
        return f"FinetuneRun({str(self.path)!r}, state={self.status().get('state')!r})"
