"""File helpers every layer may use: the one atomic write (and its full-disk message), folder
locks, the one lenient reader of small JSON/YAML files, JSON lines and the one JSON cleaner, and
what produced a run (provenance: code, libraries, machine).

Low in the house (nothing of sgi_lab imported), so that stores (`sgi_lab.data`) and networks
(`sgi_lab.nets`) write files without the run lifecycle of `sgi_lab.runs.folder`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.yaml_io import load_yaml

# Temp files of our atomic writes: ``.{name}.{pid}.tmp`` (see atomic_write_text).
TEMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")


class RunFolderError(SgiLabError, FileExistsError):
    """A folder is not (this kind of) run of ours: nothing in it is written or removed."""


def cpu_model() -> str:
    """The CPU's model name with its family and model numbers (``/proc/cpuinfo``: a VM may
    report only "AMD EPYC", which spans generations), else ``platform.processor()``."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break  # the first processor says it all
    except OSError:
        pass
    if "model name" in fields:
        extra = [f"{k} {fields[k]}" for k in ("cpu family", "model") if k in fields]
        return " ".join([fields["model name"], *([f"({', '.join(extra)})"] if extra else [])])
    return platform.processor() or platform.machine() or "unknown CPU"


def _git(root: Path, *args: str) -> str | None:
    # --no-optional-locks: `git status` would otherwise refresh (write) the clone's index, and
    # could collide with the user's own git command holding its lock.
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """What produced a run: the code (sgi-lab's version, and its git commit with ``dirty``
    true when tracked files differ from it, when the package runs from a clone), the library
    versions that change numbers, and the machine (CPU model, GPU)."""
    from importlib import metadata

    import numpy as np
    import torch  # lazy: the CLI's parser and `--help` import this module and must not pay for torch

    try:
        version = metadata.version("sgi-lab")
    except metadata.PackageNotFoundError:
        version = None
    code: dict[str, Any] = {"sgi_lab": version, "commit": None, "dirty": None}
    root = Path(__file__).resolve().parents[2]  # sgi_lab/base/files.py -> the repo
    if (root / ".git").exists() and (root / "pyproject.toml").exists():
        code["commit"] = _git(root, "rev-parse", "HEAD")
        changes = _git(root, "status", "--porcelain", "--untracked-files=no")
        code["dirty"] = None if changes is None else bool(changes)
    machine = {"cpu": cpu_model(), "gpu": None}
    if torch.cuda.is_available():
        machine["gpu"] = torch.cuda.get_device_name()
    return {
        **code,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        **machine,
    }


def record_provenance(status: Mapping[str, Any], step: int | None = None) -> list[dict[str, Any]]:
    """``status["provenance"]`` with this process's `provenance` appended when it differs from
    the newest entry: a run resumed with other code or on another machine gets a second
    entry, stamped with when and (for training stages) the step it resumed at."""
    entries = [dict(e) for e in status.get("provenance") or [] if isinstance(e, Mapping)]
    now = provenance()
    stamps = ("step", "at")
    newest = {k: v for k, v in entries[-1].items() if k not in stamps} if entries else None
    if newest != now:
        stamp = {"at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if step is not None:
            stamp["step"] = int(step)
        entries.append({**stamp, **now})
    return entries


def atomic_write(path: str | os.PathLike, write: Callable[[IO], Any], binary: bool = False) -> None:
    """The one atomic write: ``write(fh)`` into a temp file in the same folder, fsync, rename.

    A crash leaves either the old file or the new one, never a torn one; the temp file
    (``.{name}.{pid}.tmp``, `TEMP_RE`) is removed by `clean_temp_files` on resume.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb" if binary else "w") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        # A failed write (a full disk, an interrupt) leaves no temp file behind: on a full disk
        # it would hold the very space the run needs to go on.
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise_if_disk_full(exc, path)
        raise


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


class DiskFullError(SgiLabError, OSError):
    """No space left on the device while writing a file (the message names the file)."""


def raise_if_disk_full(exc: BaseException, path: str | os.PathLike) -> None:
    """Raise `DiskFullError` naming ``path`` when ``exc`` (or an exception it arose from) is a
    full disk (ENOSPC, EDQUOT); else return. ``torch.save`` reports a full disk as a
    ``RuntimeError`` ("unexpected pos") raised while handling the OSError."""
    seen = exc
    while seen is not None:
        if isinstance(seen, DiskFullError):
            return
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            error = DiskFullError(f"no space left on device while writing {path}")
            error.errno = seen.errno
            raise error from None
        seen = seen.__cause__ or seen.__context__


def file_digest(path: str | os.PathLike, digest: Any, block: int = 16 << 20) -> str:
    """``digest`` (a hashlib object) fed a file's bytes in blocks: its hex digest."""
    with open(path, "rb") as fh:
        while data := fh.read(block):
            digest.update(data)
    return digest.hexdigest()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see `atomic_write`)."""
    atomic_write(path, lambda fh: fh.write(text))


@contextlib.contextmanager
def atomic_folder(out: str | os.PathLike) -> Iterator[Path]:
    """The one atomic folder write: yields a new temporary folder beside ``out``
    (``.NAME.PID.partial``, absolute) to fill; when the block ends it is renamed to ``out``, or,
    on any error, removed, ``out`` left as it was. ``out`` may be missing or an empty folder
    (replaced); a folder with files is never touched: the rename fails (OSError) and the temp
    folder goes. A reader sees no folder or a whole one, never half of it."""
    out = Path(out)
    temp = out.absolute().with_name(f".{out.name}.{os.getpid()}.partial")
    shutil.rmtree(temp, ignore_errors=True)  # this process's own leftover
    temp.mkdir(parents=True)
    try:
        yield temp
        if out.is_dir() and not out.is_symlink():
            out.rmdir()  # empty, or OSError: files of someone's are never replaced
        os.replace(temp, out)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def check_ours(path: str | os.PathLike, mark: str, what: str) -> None:
    """Refuse to write over ``path`` unless it is missing or a file of ours: one that holds
    ``mark`` (a figure's comment, say), so a user's file of the same name is never replaced.

    Raises:
        FileExistsError: ``{path}: exists and is not {what} of ours; choose another path``.
    """
    path = Path(path)
    if path.exists() and mark not in path.read_text(errors="replace"):
        raise FileExistsError(f"{path}: exists and is not {what} of ours; choose another path")


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to ``path`` atomically (see `atomic_write`), creating its folder."""
    import torch  # lazy: as in `provenance`, the module loads without torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda fh: torch.save(obj, fh), binary=True)


def read_mapping(path: str | os.PathLike) -> dict[str, Any]:
    """The one lenient reader of a run's small files: a JSON (``.json``) or YAML file's
    top-level mapping, or ``{}`` when the file is missing, unreadable, torn or not a mapping."""
    path = Path(path)
    try:
        text = path.read_text()
        # load_yaml: an alias bomb planted in a run's config.yaml is refused, not expanded.
        payload = json.loads(text) if path.suffix == ".json" else load_yaml(text, str(path))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError):
        return {}
    return payload if isinstance(payload, dict) else {}


# The lock file every writer of a folder (a run, a store being built, an experiment) holds an
# exclusive flock on while it writes; it holds the writer's PID, for the refusal's message.
LOCK_FILE = ".sgi-lab.lock"


# Seconds a writer waits for a folder's lock before refusing (an experiment's task waits for
# the task process a killed driver left, which stops at its next checkpoint).
LOCK_WAIT_ENV = "SGI_LAB_LOCK_WAIT"


class FolderLockedError(RunFolderError):
    """Another live process is writing the folder (it holds the folder's lock)."""


class FolderLock:
    """An exclusive lock on a folder for as long as this object is held (`fcntl.flock` on
    ``FOLDER/.sgi-lab.lock``): a second writer is refused with the holder's PID.

    The kernel releases a flock when its process dies, however it dies (kill -9 included), so
    a lock file a killed process left is no obstacle: the next writer simply takes it.

    Args:
        folder: the folder (must exist).
        what: what is being written, for the message (``"a pretrain run"``).
        wait: seconds to wait for the holder to finish before refusing (default: the
            ``SGI_LAB_LOCK_WAIT`` environment variable, else 0).

    Raises:
        FolderLockedError: naming the folder and the holder's PID.
    """

    def __init__(self, folder: str | os.PathLike, what: str, wait: float | None = None) -> None:
        import fcntl

        self.path = Path(folder) / LOCK_FILE
        # The folder resolved, not the lock file: a lock file that is a link is refused below.
        self._key = str(Path(folder).resolve() / LOCK_FILE)
        self._fh: IO | None = None
        if self._key in _HELD:  # this process holds it already (a notebook re-running a cell)
            _HELD[self._key][1] += 1
            self._fh = _HELD[self._key][0]
            return
        if wait is None:
            try:
                wait = float(os.environ.get(LOCK_WAIT_ENV, 0) or 0)
            except ValueError:
                wait = 0.0
        deadline = time.monotonic() + wait
        fh = open_lock_file(self.path)
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                fh.seek(0)
                holder = fh.read(64).strip() or "unknown"
                fh.close()
                raise FolderLockedError(
                    f"{Path(folder)}: in use by another sgi-lab process (PID {holder}) writing "
                    f"{what} there; wait for it to end (or stop it), then run this again"
                ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh
        _HELD[self._key] = [fh, 1]

    @property
    def held(self) -> bool:
        return self._fh is not None

    def release(self) -> None:
        if self._fh is None:
            return
        self._fh = None
        entry = _HELD.get(self._key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _HELD[self._key]
                entry[0].close()  # closing the descriptor releases the flock

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


def open_lock_file(path: str | os.PathLike, create: bool = True) -> IO:
    """Open a lock file for reading and writing without following a symbolic link, and only
    when it is a regular file: a link (a ``cp -rs`` copy of a run, or planted) would have the
    holder's PID written into the file it points at.

    Raises:
        RunFolderError: the lock file is a link, a folder, a FIFO or another non-regular file.
        FileNotFoundError: it does not exist and ``create`` is false.
    """
    import stat

    path = Path(path)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            raise RunFolderError(
                f"{path}: the folder's lock file is not a regular file (a symbolic link, a "
                "folder or a device); refusing to use it: remove it and run this again"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunFolderError(
            f"{path}: the folder's lock file is not a regular file; refusing to use it: "
            "remove it and run this again"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "r+")


def lock_holder(folder: str | os.PathLike) -> int | None:
    """The PID of the live process holding ``folder``'s `FolderLock`, else None (no lock file,
    a lock no one holds: its writer ended or was killed, or one this process holds itself is
    reported as held by this PID). Reads only: the lock is tested, never kept."""
    import fcntl

    path = Path(folder) / LOCK_FILE
    key = str(Path(folder).resolve() / LOCK_FILE)
    if key in _HELD:
        return os.getpid()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 64).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# The folder locks this process holds: lock file -> [open file, holders]. A flock conflicts
# with another descriptor of the same process too, so a second holder here shares the first.
_HELD: dict[str, list[Any]] = {}


# Pretraining keys written before pretraining and finetuning shared one metric namespace
# (``losses/...`` and ``charts/...``): renamed on read, so older runs plot and resume alike.
LEGACY_METRIC_KEYS = {
    **{f"loss/{k}": f"losses/{k}" for k in ("total", "spr", "goal", "inverse", "bc", "atc")},
    "perf/samples_per_s": "charts/samples_per_s",
    "inverse/accuracy": "charts/inverse_accuracy",
    "goal/reward_mean": "charts/goal_reward_mean",
    "bc/accuracy": "charts/bc_accuracy",
    "atc/accuracy": "charts/atc_accuracy",
    "repr/cosine_similarity": "charts/cosine_similarity",
}


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` (``[]`` if missing), with `LEGACY_METRIC_KEYS` renamed;
    a damaged line (torn by a crash, anywhere in the file) is skipped, the rows after it kept."""
    return _read_jsonl(path)[0]


def _read_jsonl(path: str | os.PathLike) -> tuple[list[dict[str, Any]], int]:
    """`read_jsonl`'s rows and the number of lines skipped as unreadable."""
    path = Path(path)
    if not path.exists():
        return [], 0
    rows, bad = [], 0
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict):
            bad += 1
            continue
        rows.append({LEGACY_METRIC_KEYS.get(k, k): v for k, v in row.items()})
    return rows, bad


def jsonable(value: Any) -> Any:
    """The one JSON cleaner: tensors and NumPy values to Python numbers or lists, NaN and
    infinities to None (JSON has neither), paths to strings, dataclasses to dicts, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0 and not isinstance(value, str):
        value = value.item()  # 0-d tensors and arrays, NumPy scalars
    elif hasattr(value, "tolist"):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
