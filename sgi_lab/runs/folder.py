"""Run folders: the lifecycle every stage shares, their layout, status, metrics and checkpoints.

A run folder holds everything a run writes and nothing is written outside it (its files:
outputs/README.md). Every stage that writes a run (pretraining, finetuning) goes through one lifecycle,
:meth:`RunDir.open` -> :meth:`RunDir.start` -> :meth:`RunDir.finish` (or :meth:`RunDir.fail`),
so they all refuse the same folders, check a resumed config the same way and write the same
status words and fields.

Beside it: how a run stops early (`sgi_lab.runs.stopping`), the checkpoint files and their loader
(`sgi_lab.runs.checkpoints`), and the reading of a folder someone else wrote, finished or not
(`sgi_lab.runs.status`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sgi_lab.base.files import (
    LOCK_FILE,
    FolderLock,
    RunFolderError,
    _read_jsonl,
    atomic_torch_save,
    atomic_write_text,
    clean_temp_files,
    jsonable,
    raise_if_disk_full,
    read_jsonl,
    read_mapping,
    record_provenance,
)
from sgi_lab.base.yaml_io import load_yaml
from sgi_lab.config import ConfigError, FinetuneConfig, PretrainConfig, read_old_spr_keys
from sgi_lab.runs.checkpoints import CHECKPOINT_RE, CheckpointError, load_checkpoint
from sgi_lab.runs.status import FAILED, FINISHED, RUNNING, has_final_model, run_kind
from sgi_lab.runs.stopping import failure_reason
from sgi_lab.runs.tracking import Trackers, event_files, tracking_settings

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
        "lean_kernels",
        "cpu_amp",
        "channels_last",
        "compile",
        # writing a checkpoint advances nothing (tests/train/test_finetune.py): a stopped run
        # may resume checkpointing more often, or less
        "checkpoint_every",
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
# The probe results of the run's model and checkpoints (``sgi-lab probe``): results of the model
# a --overwrite discards, so they go with it (a report would show them as the new run's).
PROBE_FILE_RE = re.compile(r"probes(_ckpt_\d+)?\.json")


def slug(text: str) -> str:
    """File-system-friendly name: ``ALE/Pong-v5`` -> ``ALE-Pong-v5``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-")


def run_name(*parts: Any) -> str:
    """``{notebook}__{config}__{game}__s{seed}`` style names (cleanrl's convention)."""
    return "__".join(slug(p) for p in parts if p is not None and p != "")


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


def recorded_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """A config as a run or an archive recorded it (``config.yaml``, a params payload), a key
    renamed since read as today's (`sgi_lab.config.read_old_spr_keys`: an old spr_weight as its
    spr_coefficient), silently: a record is no file to fix. A finetuning record has a game."""
    cls = FinetuneConfig if "game" in values else PretrainConfig
    try:
        return read_old_spr_keys(cls, dict(values), warn=False)
    except (ConfigError, TypeError):
        return dict(values)


def config_changes(
    saved: Mapping[str, Any], config: Mapping[str, Any], runtime_keys=RUNTIME_KEYS
) -> dict[str, tuple[Any, Any]]:
    """``{key: (saved, new)}`` for every non-runtime key whose value differs (the one check),
    each side's old keys read as today's (`recorded_config`)."""
    saved, config = recorded_config(saved), recorded_config(config)
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


def foreign_model_problem(
    run: str | os.PathLike, model_file: str | os.PathLike, model_config: Mapping[str, Any] | None
) -> str | None:
    """Why a model file is not ``run``'s own model, or None: the config recorded inside it
    differs from the run folder's ``config.yaml`` (runtime keys aside), as when a model is
    copied in from another run. Nothing recorded on either side: None (an older file).

    Probing (`sgi_lab.analysis.probe_encoders`) refuses such a model; finetuning from a run
    folder should too (its objective is the folder's label)."""
    saved = read_mapping(Path(run) / "config.yaml")
    if not model_config or not saved:
        return None
    changes = config_changes(saved, model_config)
    if not changes:
        return None
    shown = ", ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in list(changes.items())[:4])
    return (
        f"{model_file}: not this run's model: its config differs from "
        f"{Path(run) / 'config.yaml'} in {sorted(changes)} ({shown})"
    )


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
        2. ``overwrite``: the run's own files (:data:`RUN_FILES`, its probe results
           (:data:`PROBE_FILE_RE`) and the checkpoints in ``checkpoints/``) are removed; anything else in the folder and its sub-folders
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
                        f"({name} names another one, or its contents changed); use the same "
                        f"{name}, another folder, or --overwrite to start it over"
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
            saved = load_yaml(self.path / "config.yaml")
        except (OSError, ValueError, yaml.YAMLError):
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
        for path in self.path.iterdir():
            if PROBE_FILE_RE.fullmatch(path.name) and path.is_file() and not path.is_symlink():
                path.unlink()
        for path in event_files(self.path):  # TensorBoard's copy of the metrics cleared above
            path.unlink()
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
        return status.get("state") == FINISHED and has_final_model(self.path, status)

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
    def metrics_logger(
        self, resume_step: int | None = None, buffered: bool = False
    ) -> MetricsLogger:
        return MetricsLogger(self.metrics_path, resume_step=resume_step, buffered=buffered)

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
    buffered: rows wait in memory and are written together by `flush` (called at least every
        `FLUSH_SECONDS`, and by the caller before each checkpoint, so that a resume finds
        every row up to its step): one write and one tracker round per flush instead of per
        row (a population logs a row per episode end, ~20 a step at 300 MinAtar agents, and
        a flushed JSON row plus TensorBoard cost ~2.6 ms each on the GPU machine's host).

    Every row also goes, with the same keys and step, to TensorBoard event files beside the
    file (unless ``SGI_LAB_TENSORBOARD=0``) and, with ``SGI_LAB_WANDB=offline``, to a W&B run
    in the same folder (`sgi_lab.runs.tracking`; docs/tracking.md); what ``metrics.jsonl``
    drops on resume is purged from TensorBoard too.
    """

    FLUSH_SECONDS = 2.0

    def __init__(
        self, path: str | os.PathLike, resume_step: int | None = None, buffered: bool = False
    ) -> None:
        self.path = Path(path)
        self.buffered, self._pending, self._flushed_at = buffered, [], time.monotonic()
        tracking_settings()  # a mistyped SGI_LAB_TENSORBOARD / SGI_LAB_WANDB before any write
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
        try:
            self.trackers = Trackers(self.path.parent, resume_step)
        except BaseException:
            self._fh.close()
            raise

    def log(self, step: int, **values: Any) -> dict[str, Any]:
        row = {"step": int(step), **{k: jsonable(v) for k, v in values.items()}}
        self._pending.append(row)
        if not self.buffered or time.monotonic() - self._flushed_at >= self.FLUSH_SECONDS:
            self.flush()
        return row

    def flush(self) -> None:
        """Write the rows logged since the last flush (all at once) and hand them to the
        trackers."""
        rows, self._pending, self._flushed_at = self._pending, [], time.monotonic()
        if not rows:
            return
        try:
            self._fh.write("".join(json.dumps(row) + "\n" for row in rows))
            self._fh.flush()
        except OSError as exc:
            raise_if_disk_full(exc, self.path)
            raise
        for row in rows:
            self.trackers.log(row)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._fh.close()
            self.trackers.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _row_step(row: Mapping[str, Any]) -> float:
    """A metrics row's step; a row without a numeric one sorts first (kept on resume)."""
    step = row.get("step", -1)
    return step if isinstance(step, (int, float)) and not isinstance(step, bool) else -1


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
        return load_yaml(path) if path.exists() else None

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
