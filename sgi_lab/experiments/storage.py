"""Run folders kept in a storage URI (an object store), for clusters without a shared filesystem.

`RunStorage` is the experiment folder as an fsspec location (``s3://bucket/exp``, ``gs://...``,
``file:///...``, ``memory://...``): names are ``/``-separated paths relative to it, the same as
in a local experiment folder (``pretrain/sgi_r__Pong/status.json``). Whole folders go back and
forth file by file; a push writes ``status.json`` and ``manifest.json`` last, so a reader never
sees a run marked finished whose other files are still on their way.

`run_in_scratch` is what a worker does with one task of an experiment: pull its inputs from the
storage into a local scratch folder, run the command there, push the run folder back (finished,
or partial after a failure so that a retry on another machine resumes from its checkpoints).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["RunStorage", "run_in_scratch", "scratch_root"]

# Files whose arrival says a folder is complete: pushed after every other file.
LAST = ("status.json", "manifest.json")


class RunStorage:
    """An experiment folder at an fsspec URI.

    Args:
        uri: ``s3://bucket/exp``, ``gs://bucket/exp``, ``file:///abs/path``, ``memory://exp``...
            (the protocol's fsspec package must be installed: s3fs, gcsfs).
        options: passed to the fsspec filesystem (credentials, endpoint...).
    """

    def __init__(self, uri: str, **options: Any) -> None:
        import fsspec

        self.uri = uri
        self.fs, root = fsspec.core.url_to_fs(uri, **options)
        self.root = root.rstrip("/")

    def __repr__(self) -> str:
        return f"RunStorage({self.uri!r})"

    def path(self, name: str) -> str:
        """The filesystem path of ``name`` (relative, ``/``-separated)."""
        name = str(PurePosixPath(name)).strip("/")
        return f"{self.root}/{name}" if name and name != "." else self.root

    def is_folder(self, local: str | os.PathLike) -> bool:
        """Whether the storage is local folder ``local`` itself (a ``file://`` URI of it)."""
        from fsspec.implementations.local import LocalFileSystem

        if not isinstance(self.fs, LocalFileSystem):
            return False
        return Path(self.root).resolve() == Path(local).resolve()

    def exists(self, name: str) -> bool:
        return self.fs.exists(self.path(name))

    def read_json(self, name: str) -> Any:
        """The JSON in file ``name``, or None when it is missing or not JSON."""
        try:
            return json.loads(self.fs.cat_file(self.path(name)))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None

    def write_text(self, name: str, text: str) -> None:
        self.fs.makedirs(self.path(str(PurePosixPath(name).parent)), exist_ok=True)
        self.fs.pipe_file(self.path(name), text.encode())

    def files(self, name: str) -> list[str]:
        """Every file under ``name`` (a folder or one file), relative to ``name``, sorted."""
        base = self.path(name)
        if not self.fs.exists(base):
            return []
        if self.fs.isfile(base):
            return [""]
        found = self.fs.find(base)
        prefix = self.fs._strip_protocol(base).rstrip("/") + "/"
        return sorted(self.fs._strip_protocol(f).removeprefix(prefix) for f in found)

    def pull(self, name: str, local: str | os.PathLike, exclude: Sequence[str] = ()) -> list[str]:
        """Copy folder (or file) ``name`` to ``local``, skipping paths with a component in
        ``exclude`` (``("checkpoints",)``). Returns the files copied (relative); none when
        ``name`` is not in the storage."""
        local = Path(local)
        copied = []
        for rel in self.files(name):
            if set(PurePosixPath(rel).parts) & set(exclude):
                continue
            target = local / rel if rel else local
            target.parent.mkdir(parents=True, exist_ok=True)
            source = self.path(f"{name}/{rel}") if rel else self.path(name)
            self.fs.get_file(source, str(target))
            copied.append(rel)
        return copied

    def push(self, local: str | os.PathLike, name: str, delete: bool = True) -> list[str]:
        """Copy folder (or file) ``local`` to ``name``; with ``delete``, files under ``name`` that
        ``local`` no longer has are removed (pruned checkpoints), so the storage mirrors it.
        ``status.json`` and ``manifest.json`` go last. Returns the files copied (relative)."""
        local = Path(local)
        if local.is_file():
            self.write_bytes(name, local.read_bytes())
            return [""]
        rels = sorted(
            (str(p.relative_to(local).as_posix()) for p in local.rglob("*") if p.is_file()),
            key=lambda r: (PurePosixPath(r).name in LAST, r),
        )
        stale = sorted(set(self.files(name)) - set(rels)) if delete else []
        first = [r for r in rels if PurePosixPath(r).name not in LAST]
        made = set()
        for rel in first:
            self._put(local / rel, PurePosixPath(name, rel), made)
        # Pruned files go once the new ones are in, before the marks: a push cut off at any
        # point leaves at least the checkpoints the storage had before it.
        for rel in stale:
            self.fs.rm_file(self.path(f"{name}/{rel}"))
        for rel in rels[len(first) :]:
            self._put(local / rel, PurePosixPath(name, rel), made)
        return rels

    def _put(self, local: Path, name: PurePosixPath, made: set[str]) -> None:
        parent = self.path(str(name.parent))
        if parent not in made:
            self.fs.makedirs(parent, exist_ok=True)
            made.add(parent)
        self.fs.put_file(str(local), self.path(str(name)))

    def write_bytes(self, name: str, data: bytes) -> None:
        self.fs.makedirs(self.path(str(PurePosixPath(name).parent)), exist_ok=True)
        self.fs.pipe_file(self.path(name), data)


def _drop_cut_off_push(folder: Path, log: Path) -> None:
    """Drop a pulled copy of a folder whose first push was cut off (a worker killed mid-push):
    files but no ``status.json`` / ``manifest.json`` at its top, which a push writes last and a
    run writes as it starts. No run resumes from such a folder (it would refuse it as not a
    run of ours), so the task starts afresh and its next push replaces the storage's copy.
    Only the scratch copy is removed, never the storage's."""
    if folder.is_dir() and not any((folder / name).is_file() for name in LAST):
        shutil.rmtree(folder)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(
                f"\n== {folder.name}: the storage's copy has no {' or '.join(LAST)} (a push cut "
                "off before it finished); starting afresh\n"
            )


def scratch_root(uri: str) -> Path:
    """Where a worker keeps the scratch folders of an experiment's tasks: the same path on every
    attempt, so paths a run records (its data, its pretrained model) still hold when it resumes.
    ``$SGI_LAB_SCRATCH`` overrides the system's temporary folder."""
    base = Path(os.environ.get("SGI_LAB_SCRATCH") or tempfile.gettempdir())
    return base / "sgi-lab-scratch" / hashlib.sha1(uri.encode()).hexdigest()[:12]


def run_in_scratch(
    argv: Sequence[str],
    threads: int,
    cwd: str | None,
    plan: dict[str, Any],
    run: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """Run one experiment task in a scratch folder, its run folders synced with a storage URI.

    Args:
        argv: the task's ``sgi-lab`` arguments, paths under ``plan["out"]``.
        threads: torch threads of the subprocess.
        cwd: working directory of the subprocess.
        plan: ``uri`` (the storage), ``out`` (the experiment folder the paths in ``argv`` name),
            ``task`` (its id), ``inputs`` (``[name, exclude]`` pairs pulled first: ``params``,
            the folders of the task's inputs), ``outputs`` (names pulled first, when present,
            then pushed back: the task's folder) and ``log`` (the log's name).
        run: runs the command: ``run(argv, log, threads, cwd)`` returning ``{returncode,
            seconds, tail}`` (`sgi_lab.experiments.run_command`).

    Returns:
        ``run``'s ``{returncode, seconds, tail}``; a failure to pull or push is a
        returncode of -1 with the error as ``tail``. Never raises.
    """
    storage = RunStorage(plan["uri"])
    scratch = scratch_root(plan["uri"]) / plan["task"].replace("/", "__")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    out = str(Path(plan["out"]))
    local_argv = [scratch.as_posix() + a[len(out) :] if a.startswith(out) else a for a in argv]
    log = scratch / plan["log"]
    result: dict[str, Any] = {"returncode": -1, "seconds": 0.0, "tail": ""}
    try:
        for name, exclude in plan["inputs"]:
            storage.pull(name, scratch / name, exclude=exclude)
        for name in [*plan["outputs"], plan["log"]]:
            storage.pull(name, scratch / name)
        for name in plan["outputs"]:
            _drop_cut_off_push(scratch / name, log)
        result = run(local_argv, str(log), threads, cwd)
    except Exception as exc:  # a storage that cannot be read: the task fails, is retried
        result["tail"] = f"pulling from {plan['uri']}: {type(exc).__name__}: {exc}"
    try:
        for name in plan["outputs"]:
            if (scratch / name).exists():
                storage.push(scratch / name, name)
        if log.exists():
            storage.push(log, plan["log"])
    except Exception as exc:
        result = {**result, "returncode": -1}
        result["tail"] = f"pushing to {plan['uri']}: {type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return result
