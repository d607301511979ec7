"""Writing a transition store: crash-safe, resumable, and never over anything but a store of ours.

A store (`sgi_lab.data.store_format`) is built in ``STORE.partial/`` and renamed to ``STORE``
only when complete; every file goes through `sgi_lab.base.files.atomic_write`, and an interrupted
collection resumes from the last chunk the partial manifest records. Only a store of ours is
ever replaced (:func:`check_store_target`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.base.files import LOCK_FILE, TEMP_RE, FolderLock, atomic_write
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import (
    ALL_FIELDS,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_ENV_PROTOCOL,
    MANIFEST,
    OPTIONAL_FIELDS,
    PARTIAL_SUFFIX,
    STORE_ENV_PROTOCOLS,
    StoreError,
    StoreFolderError,
    StoreManifest,
    chunk_path,
    new_hash,
    read_manifest,
    write_manifest,
)
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec


class _HashingFile:
    """A write-only file wrapper that hashes what passes through (np.save writes via .write)."""

    def __init__(self, fh, digest) -> None:
        self._fh = fh
        self.hash = digest

    def write(self, data) -> int:
        self.hash.update(data)
        return self._fh.write(data)


def _save_chunk(path: Path, array: np.ndarray) -> str:
    """``np.save`` one chunk file atomically; returns the checksum of the bytes written."""
    digest = new_hash()
    atomic_write(
        path, lambda fh: np.save(_HashingFile(fh, digest), array, allow_pickle=False), binary=True
    )
    return digest.hexdigest()


def _temp_target(name: str) -> str | None:
    """The file a writer's temp file ``name`` would have become, or None if it is not one.

    Temp files are `sgi_lab.base.files.atomic_write`'s ``.NAME.PID.tmp``; stores written before it
    used ``NAME.tmp``, and their partial folders may still hold those.
    """
    match = TEMP_RE.match(name)
    if match:
        return match["name"]
    if name.endswith(".tmp"):
        return name[: -len(".tmp")]
    return None


def _chunk_index(name: str) -> int | None:
    """The chunk index of a chunk file name (``action_00003.npy``), or None if it is not one."""
    stem, dot, ext = name.partition(".")
    field_name, _, index = stem.rpartition("_")
    if dot and ext == "npy" and field_name in ALL_FIELDS and index.isdigit():
        return int(index)
    return None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_our_partial(partial: Path) -> bool:
    """A ``.partial`` folder holds nothing but what a writer puts there (possibly unfinished)."""
    for entry in partial.iterdir():
        if MANIFEST in (entry.name, _temp_target(entry.name)) or entry.name == LOCK_FILE:
            continue
        if entry.name != "chunks" or not entry.is_dir():
            return False
        for chunk in entry.iterdir():
            if _chunk_index(_temp_target(chunk.name) or chunk.name) is None:
                return False
    return True


def _keep_foreign_files(store: Path, partial: Path) -> list[Path]:
    """Move what a user put into a store being replaced (anything but its manifest and chunk
    files) into the new store's ``partial`` folder, at the same relative paths, so replacing
    a store removes only what a writer wrote. Returns the moved paths (in their new place)."""
    moved = []
    for entry in sorted(store.rglob("*"), key=lambda p: len(p.parts)):
        if not entry.exists() or entry.is_dir() and not entry.is_symlink():
            continue
        relative = entry.relative_to(store)
        parts = relative.parts
        ours = (len(parts) == 1 and MANIFEST in (entry.name, _temp_target(entry.name))) or (
            len(parts) == 2
            and parts[0] == "chunks"
            and _chunk_index(_temp_target(entry.name) or entry.name) is not None
        )
        if ours:
            continue
        target = partial / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(entry, target)
        moved.append(target)
    return moved


def check_store_target(
    path: str | os.PathLike,
    game: str,
    source: str,
    params: dict[str, Any],
    overwrite: bool = False,
    env_protocol: str | None = None,
) -> TransitionStore | None:
    """Decide what writing a store to ``path`` may do; nothing is touched here.

    Returns:
        The existing store when ``path`` already holds a complete store of ours made with the
        same game, source and params (and ``env_protocol``, when given) and ``overwrite`` is
        false (re-running is a no-op), else None: the caller builds the store (``overwrite``
        replaces an existing store of ours).

    Raises:
        StoreFolderError: ``path`` (or ``path.partial``) holds something that is not a store
            of ours, whatever ``overwrite`` says; or a store made with other settings and
            ``overwrite`` is false.
    """
    path = Path(path)
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    if partial.exists() and (not partial.is_dir() or not _is_our_partial(partial)):
        raise StoreFolderError(
            f"{partial}: not an unfinished sgi-lab store; refusing to touch it "
            "(move it away or choose another --out)"
        )
    if not path.exists():
        return None
    if path.is_dir() and not any(path.iterdir()):
        if overwrite:
            return None
        raise StoreFolderError(f"{path} already exists (an empty folder); remove it first")
    manifest = read_manifest(path)
    if manifest is None or not path.is_dir():
        raise StoreFolderError(
            f"{path}: exists and is not an sgi-lab store (no manifest of ours); refusing to "
            "replace it, with or without --overwrite: choose another --out"
        )
    if overwrite:
        return None
    asked = {"game": game, "source": source, "params": params}
    if env_protocol is not None:
        asked["env_protocol"] = env_protocol
    diff = {k: (getattr(manifest, k), v) for k, v in asked.items() if getattr(manifest, k) != v}
    same = not diff
    if same and manifest.complete:
        return TransitionStore(path)
    what = "is incomplete" if same else f"was made with other settings ({diff})"
    raise StoreFolderError(f"{path} already exists and {what}; use --overwrite to replace it")


class TransitionStoreWriter:
    """Appends transitions to a store being built under ``<path>.partial``.

    Use :meth:`create` for a new store or :meth:`resume` to continue an interrupted one, call
    :meth:`append` per step (or :meth:`append_many`), and :meth:`close` to finish and rename into
    place. Only whole chunks are durable: rows appended after the last finished chunk are lost
    if the process dies, and :attr:`num_rows` after :meth:`resume` says where to continue.
    """

    def __init__(self, path: Path, manifest: StoreManifest) -> None:
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
        self.manifest = manifest
        self._buffers = {
            name: np.zeros((manifest.chunk_size, *shape), dtype=dtype)
            for name, (dtype, shape) in manifest.field_specs().items()
        }
        self._fill = 0
        self._closed = False
        # Called after each finished chunk; what it returns (JSON) is saved in the manifest
        # with the chunk, so a resumed writer continues e.g. a policy's random stream.
        self.state_fn: Any = None

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        *,
        game: str,
        source: str,
        params: dict | None = None,
        num_actions: int | None = None,
        rewards_clipped: bool = False,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        overwrite: bool = False,
        sticky_action_prob: float | None = None,
        ram: bool = False,
        env_protocol: str = DEFAULT_ENV_PROTOCOL,
        observation_spec: ObservationSpec = ATARI_SPEC,
        label_names: tuple[str, ...] | list[str] | None = None,
    ) -> TransitionStoreWriter:
        """Start a new store at ``path`` (built under ``path.partial``); ``sticky_action_prob``:
        the recording environment's repeat-action probability (None: unknown); ``ram``: the
        store holds the optional ``ram`` field (every append then passes it);
        ``env_protocol``: the env that made the frames (`STORE_ENV_PROTOCOLS`);
        ``observation_spec``: what one observation is (its frame is a row of ``frame``);
        ``label_names``: the store holds the optional ``labels`` field, one int16 column per
        name (a game's own state, every append then passes it)."""
        path = Path(path)
        if chunk_size < 1:
            raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
        if env_protocol not in STORE_ENV_PROTOCOLS:
            raise ValueError(
                f"env_protocol: must be one of {', '.join(STORE_ENV_PROTOCOLS)}, "
                f"got {env_protocol!r}"
            )
        if path.exists():
            if not overwrite:
                raise FileExistsError(f"{path} already exists (pass overwrite=True to replace it)")
            if read_manifest(path) is None:
                raise StoreFolderError(
                    f"{path}: exists and is not an sgi-lab store; refusing to replace it"
                )
        partial = path.with_name(path.name + PARTIAL_SUFFIX)
        if partial.exists() and (not partial.is_dir() or not _is_our_partial(partial)):
            raise StoreFolderError(
                f"{partial}: not an unfinished sgi-lab store; refusing to remove it"
            )
        partial.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(partial, f"the store {path}")  # before anything in it is removed
        for entry in partial.iterdir():  # an earlier, interrupted writer's files
            if entry.is_dir():
                shutil.rmtree(entry)
            elif entry.name != LOCK_FILE:
                entry.unlink()
        (partial / "chunks").mkdir()
        manifest = StoreManifest(
            game=game,
            source=source,
            params=dict(params or {}),
            chunk_size=int(chunk_size),
            num_actions=num_actions,
            rewards_clipped=rewards_clipped,
            sticky_action_prob=sticky_action_prob,
            env_protocol=env_protocol,
            observation=observation_spec.to_json(),
            created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        )
        manifest.fields["frame"]["shape"] = list(observation_spec.frame_shape)
        if label_names:
            manifest.label_names = list(label_names)
            manifest.fields["labels"] = {"dtype": "int16", "shape": [len(label_names)]}
        if ram:
            dtype, shape = OPTIONAL_FIELDS["ram"]
            manifest.fields["ram"] = {"dtype": dtype, "shape": list(shape)}
        writer = cls(path, manifest)
        writer._overwrite = overwrite
        writer._lock = lock
        writer._save_manifest()
        return writer

    @classmethod
    def resume(cls, path: str | os.PathLike) -> TransitionStoreWriter:
        """Reopen an interrupted store; rows after its last finished chunk are dropped."""
        path = Path(path)
        partial = path.with_name(path.name + PARTIAL_SUFFIX)
        manifest_path = partial / MANIFEST
        if not manifest_path.exists():
            raise StoreError(f"nothing to resume: {manifest_path} does not exist")
        try:
            raw = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{manifest_path}: not valid JSON ({exc})") from exc
        manifest = StoreManifest.from_json(raw, manifest_path)
        lock = FolderLock(partial, f"the store {path}")  # before anything in it is removed
        # Drop what a killed writer left: temp files, and chunk files written after the last
        # one the manifest records.
        for stray in partial.iterdir():
            if stray.is_file() and _temp_target(stray.name) == MANIFEST:
                stray.unlink()
        for stray in (partial / "chunks").iterdir():
            index = _chunk_index(stray.name)
            if _temp_target(stray.name) is not None or (
                index is not None and index >= len(manifest.chunks)
            ):
                stray.unlink()
        writer = cls(path, manifest)
        writer._overwrite = True
        writer._lock = lock
        return writer

    @classmethod
    def resume_matching(
        cls,
        path: str | os.PathLike,
        game: str,
        params: dict[str, Any],
        env_protocol: str | None = None,
    ) -> TransitionStoreWriter | None:
        """The interrupted writer of ``path`` if it was started with this game and params (and
        ``env_protocol``, when given; an interrupted store older than the field: dopamine).

        Returns None when there is nothing to resume or the leftovers are unreadable (the caller
        starts over); raises StoreError when they were made with other settings, which mixing
        into one store would corrupt. The settings are compared before anything in
        ``path.partial`` is touched.
        """
        path = Path(path)
        partial = path.with_name(path.name + PARTIAL_SUFFIX)
        if not partial.exists():
            return None
        recorded = read_manifest(partial)
        if recorded is None:
            return None
        if recorded.game != game or recorded.params != params:
            raise StoreError(
                f"{partial} was started with different settings "
                f"({recorded.game}, {recorded.params}); remove it or match them"
            )
        if env_protocol is not None and recorded.env_protocol != env_protocol:
            raise StoreError(
                f"{partial}: an interrupted collection in the env protocol "
                f"{recorded.env_protocol!r}, asked to resume in {env_protocol!r}: one store "
                f"holds the frames of one protocol. Resume with --env-protocol "
                f"{recorded.env_protocol}, or remove {partial} to start over"
            )
        try:
            return cls.resume(path)
        except StoreError:
            return None

    # -- appending ----------------------------------------------------------------------------
    @property
    def num_rows(self) -> int:
        """Rows appended so far (durable ones plus those in the open chunk)."""
        return self.manifest.num_transitions + self._fill

    @property
    def has_ram(self) -> bool:
        """Whether this store records the console RAM of every row (``ram`` is then required)."""
        return "ram" in self.manifest.fields

    @property
    def has_labels(self) -> bool:
        """Whether this store records a game's state per row (``labels`` is then required)."""
        return "labels" in self.manifest.fields

    def append(
        self,
        frame: np.ndarray,
        action: int,
        reward: float,
        terminal: bool,
        first: bool,
        ram: np.ndarray | None = None,
        labels: np.ndarray | None = None,
    ) -> None:
        """Append one row: the newest frame of ``s_t``, ``a_t``, ``r_t``, ``terminal_t``,
        ``first_t``, in a store with RAM the 128 bytes of RAM in ``s_t``, and in a store with
        labels the game's state in ``s_t`` (one value per ``label_names``)."""
        if (ram is not None) != self.has_ram:
            why = "records RAM: pass ram" if self.has_ram else "has no RAM field (create(ram=True))"
            raise ValueError(f"append: the store at {self.partial} {why}")
        if (labels is not None) != self.has_labels:
            why = "records labels: pass labels" if self.has_labels else "has no labels field"
            raise ValueError(f"append: the store at {self.partial} {why}")
        i = self._fill
        if ram is not None:
            self._buffers["ram"][i] = ram
        if labels is not None:
            self._buffers["labels"][i] = labels
        self._buffers["frame"][i] = frame
        self._buffers["action"][i] = action
        self._buffers["reward"][i] = reward
        self._buffers["terminal"][i] = terminal
        self._buffers["first"][i] = first
        self._fill += 1
        if self._fill == self.manifest.chunk_size:
            self._flush_chunk()

    def append_many(self, **columns: np.ndarray) -> None:
        """Append aligned arrays ``frame (n, *frame_shape)`` (the spec's frame row: (n, 84, 84)
        for Atari), ``action, reward, terminal, first`` (each (n,)), ``ram (n, 128)`` in a store
        with RAM and ``labels (n, L)`` in a store with labels."""
        if set(columns) != set(self._buffers):
            raise ValueError(f"append_many needs exactly the fields {sorted(self._buffers)}")
        n = len(columns["frame"])
        if any(len(v) != n for v in columns.values()):
            raise ValueError("append_many: columns differ in length")
        done = 0
        while done < n:
            take = min(n - done, self.manifest.chunk_size - self._fill)
            for name, values in columns.items():
                self._buffers[name][self._fill : self._fill + take] = values[done : done + take]
            self._fill += take
            done += take
            if self._fill == self.manifest.chunk_size:
                self._flush_chunk()

    def _flush_chunk(self) -> None:
        if self._fill == 0:
            return
        index = len(self.manifest.chunks)
        rows = self._fill
        checksums = {}
        for name in self._buffers:
            checksums[name] = _save_chunk(
                chunk_path(self.partial, name, index), self._buffers[name][:rows]
            )
        m = self.manifest
        if len(m.checksums) == len(m.chunks):  # stores begun before checksums have none
            m.checksums.append(checksums)
        m.chunks.append(rows)
        m.num_transitions += rows
        m.num_episodes += int(self._buffers["first"][:rows].sum())
        m.num_terminals += int(self._buffers["terminal"][:rows].sum())
        self._fill = 0
        if self.state_fn is not None:
            m.resume_state = self.state_fn()
        self._save_manifest()

    def _save_manifest(self) -> None:
        write_manifest(self.partial / MANIFEST, self.manifest.to_json())

    # -- finishing ----------------------------------------------------------------------------
    def close(self) -> Path:
        """Flush the last chunk, validate, and rename the store into place. Returns its path."""
        if self._closed:
            return self.path
        self._flush_chunk()
        m = self.manifest
        if m.num_transitions == 0:
            raise StoreError(f"{self.path}: refusing to finish an empty store")
        first = np.load(chunk_path(self.partial, "first", 0), allow_pickle=False)
        if not first[0]:
            raise StoreError(f"{self.path}: the first row must start an episode (first=1)")
        m.complete = True
        m.fingerprint = m.content_fingerprint()
        self._save_manifest()
        if self.path.exists():
            if not getattr(self, "_overwrite", False):
                raise FileExistsError(f"{self.path} already exists")
            if read_manifest(self.path) is None:
                raise StoreFolderError(
                    f"{self.path}: exists and is not an sgi-lab store; refusing to replace it"
                )
            _keep_foreign_files(self.path, self.partial)
            shutil.rmtree(self.path)  # now only the old store's own files
        os.replace(self.partial, self.path)
        _fsync_dir(self.path.parent)
        (self.path / LOCK_FILE).unlink(missing_ok=True)
        self._unlock()
        self._closed = True
        return self.path

    def abort(self) -> None:
        """Remove the partial store."""
        shutil.rmtree(self.partial, ignore_errors=True)
        self._unlock()
        self._closed = True

    def _unlock(self) -> None:
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()
