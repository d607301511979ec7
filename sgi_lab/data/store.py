"""On-disk transition store: single 84x84 frames in chunked ``.npy`` files read through memmaps.

A store is one folder: ``manifest.json`` and ``chunks/<field>_<index>.npy`` for every field of
`FIELDS` (its files: README.md, "Datasets on disk"). Row ``t`` holds the newest frame of state
``s_t``, the action ``a_t`` taken there, the reward ``r_t`` it earned and ``terminal_t`` = the
transition ended the episode for learning (game over, or a life loss when the data was recorded
that way). As in Dopamine, the observation after a terminal transition is not stored.
``first_t`` marks frame discontinuities (a reset): a 4-frame stack for row ``t`` is rebuilt from
rows ``t-3..t`` and is zero-padded before the episode's first row, so no stack ever crosses an
episode boundary. A life-loss terminal does *not* reset the game, so the frames after it
continue the same episode (``first`` stays 0), exactly as the environment's own frame stack
does.

Writing is crash-safe: a store is built in ``STORE.partial/`` and renamed to ``STORE`` only when
complete; every file goes through `sgi_lab.files.atomic_write`, and an interrupted collection
resumes from the last chunk the partial manifest records. The manifest holds a checksum of
every chunk and a content ``fingerprint`` of the store, which a run records (it survives moving
the folder); :meth:`TransitionStore.verify` checks the files against them. Only a store of ours
is ever replaced (:func:`check_store_target`).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.files import LOCK_FILE, TEMP_RE, FolderLock, atomic_write

FORMAT_VERSION = 1
FRAME_SHAPE = (84, 84)
DEFAULT_CHUNK_SIZE = 100_000
MANIFEST = "manifest.json"
PARTIAL_SUFFIX = ".partial"
# Sticky-action probability of a data source recorded elsewhere with a fixed protocol, for
# stores whose manifest predates the field: DQN Replay ran ALE with repeat probability 0.25
# (Agarwal et al., 2020, Dopamine's default), unlike Atari 100k (0).
SOURCE_STICKY_ACTION_PROB = {"dqn_replay": 0.25}

# name -> (dtype, per-row shape)
FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "frame": ("uint8", FRAME_SHAPE),
    "action": ("int32", ()),
    "reward": ("float32", ()),
    "terminal": ("uint8", ()),
    "first": ("uint8", ()),
}
SMALL_FIELDS = ("action", "reward", "terminal", "first")
RAM_SIZE = 128
# Fields a store may hold beside FIELDS (its manifest's ``fields`` says which): ``ram``, the
# console's 128-byte RAM in state ``s_t`` (what ALE's getRAM() returns there), the labels of
# `sgi_lab.probes`. Stores without them open as before.
OPTIONAL_FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {"ram": ("uint8", (RAM_SIZE,))}
ALL_FIELDS = {**FIELDS, **OPTIONAL_FIELDS}


class StoreError(RuntimeError):
    """A store on disk is missing, incomplete or inconsistent with its manifest."""


class StoreFolderError(FileExistsError):
    """A folder a store would be written to holds something else: nothing in it is touched."""


def _new_hash() -> Any:
    return hashlib.blake2b(digest_size=16)


class _HashingFile:
    """A write-only file wrapper that hashes what passes through (np.save writes via .write)."""

    def __init__(self, fh, digest) -> None:
        self._fh = fh
        self.hash = digest

    def write(self, data) -> int:
        self.hash.update(data)
        return self._fh.write(data)


def file_checksum(path: Path, block: int = 16 << 20) -> str:
    """The checksum the manifest records for a chunk file (blake2b-128 of its bytes)."""
    digest = _new_hash()
    with open(path, "rb") as fh:
        while data := fh.read(block):
            digest.update(data)
    return digest.hexdigest()


def _chunk_path(root: Path, field_name: str, index: int) -> Path:
    return root / "chunks" / f"{field_name}_{index:05d}.npy"


def _save_chunk(path: Path, array: np.ndarray) -> str:
    """``np.save`` one chunk file atomically; returns the checksum of the bytes written."""
    digest = _new_hash()
    atomic_write(
        path, lambda fh: np.save(_HashingFile(fh, digest), array, allow_pickle=False), binary=True
    )
    return digest.hexdigest()


def _write_manifest(path: Path, payload: dict) -> None:
    atomic_write(path, lambda fh: json.dump(payload, fh, indent=2, sort_keys=True))


def _temp_target(name: str) -> str | None:
    """The file a writer's temp file ``name`` would have become, or None if it is not one.

    Temp files are `sgi_lab.files.atomic_write`'s ``.NAME.PID.tmp``; stores written before it
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


@dataclass
class StoreManifest:
    """The JSON manifest of a store (what ``manifest.json`` holds)."""

    game: str
    source: str
    params: dict[str, Any] = field(default_factory=dict)
    num_transitions: int = 0
    num_episodes: int = 0
    num_terminals: int = 0
    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunks: list[int] = field(default_factory=list)  # rows per chunk, in order
    rewards_clipped: bool = False
    num_actions: int | None = None
    # Probability the emulator repeated the previous action (ALE sticky actions) when the data
    # was recorded: 0 for Atari 100k-style collection, 0.25 for DQN Replay; None: not recorded
    # (stores written before this field existed).
    sticky_action_prob: float | None = None
    format_version: int = FORMAT_VERSION
    created: str = ""
    complete: bool = False
    checksums: list[dict[str, str]] = field(default_factory=list)  # per chunk: field -> hash
    fingerprint: str | None = None  # content identity, set when the store is complete
    resume_state: dict[str, Any] | None = None  # a writer's state after its last chunk
    fields: dict[str, dict] = field(
        default_factory=lambda: {k: {"dtype": d, "shape": list(s)} for k, (d, s) in FIELDS.items()}
    )

    def to_json(self) -> dict:
        return dict(self.__dict__)

    def field_specs(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """``{name: (dtype, row shape)}`` of the fields this store holds, FIELDS first."""
        return {k: v for k, v in ALL_FIELDS.items() if k in self.fields}

    def content_fingerprint(self) -> str:
        """A hash of what the store holds; the same data gives the same value wherever it is."""
        identity = {
            "game": self.game,
            "source": self.source,
            "params": self.params,
            "chunks": self.chunks,
            "checksums": self.checksums,
        }
        digest = _new_hash()
        digest.update(json.dumps(identity, sort_keys=True, default=str).encode())
        return digest.hexdigest()

    @classmethod
    def from_json(cls, payload: Any, path: Path) -> StoreManifest:
        if not isinstance(payload, dict):
            raise StoreError(
                f"{path}: manifest must be a JSON object, got {type(payload).__name__}"
            )
        version = payload.get("format_version")
        if version != FORMAT_VERSION:
            raise StoreError(
                f"{path}: unknown store format version {version!r} "
                f"(this sgi-lab reads version {FORMAT_VERSION})"
            )
        known = set(cls.__dataclass_fields__)
        unknown = set(payload) - known
        if unknown:
            raise StoreError(f"{path}: unexpected manifest keys {sorted(unknown)}")
        fields = payload.get("fields")
        if fields is not None and (
            not isinstance(fields, dict) or not set(FIELDS) <= set(fields) <= set(ALL_FIELDS)
        ):
            raise StoreError(
                f"{path}: 'fields' must name {sorted(FIELDS)} and optionally "
                f"{sorted(OPTIONAL_FIELDS)}, got {fields!r}"
            )
        missing = {"game", "source", "chunks", "num_transitions"} - set(payload)
        if missing:
            raise StoreError(f"{path}: manifest lacks keys {sorted(missing)}")
        chunks = payload["chunks"]
        if not isinstance(chunks, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in chunks
        ):
            raise StoreError(f"{path}: 'chunks' must be a list of row counts")
        for key in ("num_transitions", "num_episodes", "num_terminals", "chunk_size"):
            value = payload.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise StoreError(f"{path}: {key!r} must be a non-negative integer, got {value!r}")
        sticky = payload.get("sticky_action_prob")  # absent in older stores: None, unknown
        if sticky is not None and (
            isinstance(sticky, bool) or not isinstance(sticky, (int, float)) or not 0 <= sticky <= 1
        ):
            raise StoreError(f"{path}: 'sticky_action_prob' must be in [0, 1], got {sticky!r}")
        return cls(**payload)


def read_manifest(path: str | os.PathLike) -> StoreManifest | None:
    """The manifest of a store folder when it is one of ours (complete or not), else None."""
    manifest_path = Path(path) / MANIFEST
    try:
        return StoreManifest.from_json(json.loads(manifest_path.read_text()), manifest_path)
    except (OSError, ValueError, StoreError, TypeError):
        return None


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
) -> TransitionStore | None:
    """Decide what writing a store to ``path`` may do; nothing is touched here.

    Returns:
        The existing store when ``path`` already holds a complete store of ours made with the
        same game, source and params and ``overwrite`` is false (re-running is a no-op), else
        None: the caller builds the store (``overwrite`` replaces an existing store of ours).

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
    same = (manifest.game, manifest.source, manifest.params) == (game, source, params)
    if same and manifest.complete:
        return TransitionStore(path)
    diff = {
        k: (getattr(manifest, k), v)
        for k, v in (("game", game), ("source", source), ("params", params))
        if getattr(manifest, k) != v
    }
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
    ) -> TransitionStoreWriter:
        """Start a new store at ``path`` (built under ``path.partial``); ``sticky_action_prob``:
        the recording environment's repeat-action probability (None: unknown); ``ram``: the
        store holds the optional ``ram`` field (every append then passes it)."""
        path = Path(path)
        if chunk_size < 1:
            raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
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
            created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        )
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
        cls, path: str | os.PathLike, game: str, params: dict[str, Any]
    ) -> TransitionStoreWriter | None:
        """The interrupted writer of ``path`` if it was started with this game and params.

        Returns None when there is nothing to resume or the leftovers are unreadable (the caller
        starts over); raises StoreError when they were made with other settings, which mixing
        into one store would corrupt.
        """
        path = Path(path)
        partial = path.with_name(path.name + PARTIAL_SUFFIX)
        if not partial.exists():
            return None
        try:
            writer = cls.resume(path)
        except StoreError:
            return None
        if writer.manifest.game != game or writer.manifest.params != params:
            raise StoreError(
                f"{partial} was started with different settings "
                f"({writer.manifest.game}, {writer.manifest.params}); remove it or match them"
            )
        return writer

    # -- appending ----------------------------------------------------------------------------
    @property
    def num_rows(self) -> int:
        """Rows appended so far (durable ones plus those in the open chunk)."""
        return self.manifest.num_transitions + self._fill

    @property
    def has_ram(self) -> bool:
        """Whether this store records the console RAM of every row (``ram`` is then required)."""
        return "ram" in self.manifest.fields

    def append(
        self,
        frame: np.ndarray,
        action: int,
        reward: float,
        terminal: bool,
        first: bool,
        ram: np.ndarray | None = None,
    ) -> None:
        """Append one row: the newest frame of ``s_t``, ``a_t``, ``r_t``, ``terminal_t``,
        ``first_t``, and in a store with RAM the 128 bytes of RAM in ``s_t``."""
        if (ram is not None) != self.has_ram:
            why = "records RAM: pass ram" if self.has_ram else "has no RAM field (create(ram=True))"
            raise ValueError(f"append: the store at {self.partial} {why}")
        i = self._fill
        if ram is not None:
            self._buffers["ram"][i] = ram
        self._buffers["frame"][i] = frame
        self._buffers["action"][i] = action
        self._buffers["reward"][i] = reward
        self._buffers["terminal"][i] = terminal
        self._buffers["first"][i] = first
        self._fill += 1
        if self._fill == self.manifest.chunk_size:
            self._flush_chunk()

    def append_many(self, **columns: np.ndarray) -> None:
        """Append aligned arrays ``frame (n,84,84), action, reward, terminal, first`` (each (n,)),
        and ``ram (n,128)`` in a store with RAM."""
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
                _chunk_path(self.partial, name, index), self._buffers[name][:rows]
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
        _write_manifest(self.partial / MANIFEST, self.manifest.to_json())

    # -- finishing ----------------------------------------------------------------------------
    def close(self) -> Path:
        """Flush the last chunk, validate, and rename the store into place. Returns its path."""
        if self._closed:
            return self.path
        self._flush_chunk()
        m = self.manifest
        if m.num_transitions == 0:
            raise StoreError(f"{self.path}: refusing to finish an empty store")
        first = np.load(_chunk_path(self.partial, "first", 0), allow_pickle=False)
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


class TransitionStore:
    """A finished store opened for reading: small fields in RAM, frames through memmaps.

    Args:
        path: the store folder.
        release_every_bytes: after this many frame bytes were gathered, the frame memmaps'
            pages are released from this process (they stay in the OS page cache), so sampling
            a store far larger than RAM keeps resident memory bounded.
    """

    def __init__(self, path: str | os.PathLike, release_every_bytes: int = 256 << 20) -> None:
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        if not self.path.is_dir():
            partial = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
            hint = f" (an unfinished store is at {partial}: resume it)" if partial.exists() else ""
            raise StoreError(f"{self.path}: no such store{hint}")
        if not manifest_path.exists():
            raise StoreError(f"{manifest_path}: manifest is missing")
        try:
            payload = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{manifest_path}: manifest is not valid JSON ({exc})") from exc
        self.manifest = StoreManifest.from_json(payload, manifest_path)
        m = self.manifest
        if not m.complete:
            raise StoreError(f"{manifest_path}: store is marked incomplete")
        if sum(m.chunks) != m.num_transitions:
            raise StoreError(
                f"{manifest_path}: chunk rows sum to {sum(m.chunks)} but "
                f"num_transitions is {m.num_transitions}"
            )
        self._frames: list[np.memmap] = []
        self._ram: list[np.memmap] = []
        columns: dict[str, list[np.ndarray]] = {name: [] for name in SMALL_FIELDS}
        for index, rows in enumerate(m.chunks):
            for name, (dtype, shape) in m.field_specs().items():
                array = self._open_chunk(name, index, rows, dtype, shape)
                if name == "frame":
                    self._frames.append(array)
                elif name == "ram":
                    self._ram.append(array)
                else:
                    columns[name].append(np.asarray(array))
        self.actions = np.concatenate(columns["action"]).astype(np.int64)
        if m.num_actions is not None and len(self.actions):
            low, high = int(self.actions.min()), int(self.actions.max())
            if low < 0 or high >= m.num_actions:
                raise StoreError(
                    f"{self.path / 'chunks'}: actions span [{low}, {high}] but the manifest "
                    f"says the game has {m.num_actions} actions"
                )
        self.rewards = np.concatenate(columns["reward"])
        self.terminals = np.concatenate(columns["terminal"]).astype(bool)
        self.firsts = np.concatenate(columns["first"]).astype(bool)
        if not self.firsts[0]:
            raise StoreError(
                f"{_chunk_path(self.path, 'first', 0)}: row 0 does not start an episode"
            )
        if int(self.firsts.sum()) != m.num_episodes:
            raise StoreError(
                f"{manifest_path}: manifest says {m.num_episodes} episodes, "
                f"first-flags mark {int(self.firsts.sum())}"
            )
        self._chunk_starts = np.concatenate([[0], np.cumsum(m.chunks)])
        self._uniform_chunks = all(r == m.chunk_size for r in m.chunks[:-1])
        self.episode_starts = np.flatnonzero(self.firsts)
        self.episode_ends = np.append(self.episode_starts[1:], len(self)) - 1  # inclusive
        episode_lengths = self.episode_ends - self.episode_starts + 1
        # Per row: its episode's first and last row (vectorized index arithmetic for samplers).
        self.episode_index = np.repeat(np.arange(len(self.episode_starts)), episode_lengths)
        self.row_episode_start = self.episode_starts[self.episode_index]
        self.row_episode_end = self.episode_ends[self.episode_index]
        self._release_every = release_every_bytes
        self._gathered = 0

    def _open_chunk(self, name: str, index: int, rows: int, dtype: str, shape: tuple) -> np.ndarray:
        path = _chunk_path(self.path, name, index)
        if not path.exists():
            raise StoreError(f"{path}: chunk file is missing")
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise StoreError(f"{path}: unreadable or truncated chunk ({exc})") from exc
        expected = (rows, *shape)
        if array.shape != expected or array.dtype != np.dtype(dtype):
            raise StoreError(
                f"{path}: holds {array.dtype}{list(array.shape)} but the manifest expects "
                f"{dtype}{list(expected)}"
            )
        return array

    def __len__(self) -> int:
        return self.manifest.num_transitions

    @property
    def fingerprint(self) -> str:
        """The store's content identity (recorded at creation; computed for older stores)."""
        return self.manifest.fingerprint or self.manifest.content_fingerprint()

    def verify(self) -> list[str]:
        """Read every chunk file and check it against the manifest; returns the problems found.

        Checks each file's checksum (stores written before checksums get the count checks only:
        their manifest's ``checksums`` is empty)
        and cross-checks the manifest's transition, episode and terminal counts against the
        data. An empty list means the store is intact.
        """
        m = self.manifest
        problems = []
        if m.checksums and len(m.checksums) != len(m.chunks):
            problems.append(
                f"{self.path / MANIFEST}: {len(m.checksums)} checksum entries for "
                f"{len(m.chunks)} chunks"
            )
        for index, expected in enumerate(m.checksums[: len(m.chunks)]):
            for name in m.field_specs():
                path = _chunk_path(self.path, name, index)
                try:
                    actual = file_checksum(path)
                except OSError as exc:
                    problems.append(f"{path}: unreadable ({exc})")
                    continue
                if expected.get(name) != actual:
                    problems.append(f"{path}: checksum {actual} differs from the manifest's")
        counts = {
            "num_transitions": len(self.actions),
            "num_episodes": int(self.firsts.sum()),
            "num_terminals": int(self.terminals.sum()),
        }
        for key, actual in counts.items():
            if getattr(m, key) != actual:
                problems.append(
                    f"{self.path / MANIFEST}: {key} is {getattr(m, key)} but the data hold {actual}"
                )
        if m.fingerprint is not None and m.fingerprint != m.content_fingerprint():
            problems.append(f"{self.path / MANIFEST}: fingerprint does not match its contents")
        return problems

    @property
    def game(self) -> str:
        return self.manifest.game

    @property
    def num_episodes(self) -> int:
        return len(self.episode_starts)

    @property
    def num_actions(self) -> int:
        if self.manifest.num_actions is not None:
            return int(self.manifest.num_actions)
        return int(self.actions.max()) + 1

    @property
    def rewards_clipped(self) -> bool:
        return bool(self.manifest.rewards_clipped)

    @property
    def sticky_action_prob(self) -> float | None:
        """The recording environment's repeat-action probability: the manifest's value, else the
        source's known one (``dqn_replay``: 0.25), else None (not recorded)."""
        if self.manifest.sticky_action_prob is not None:
            return float(self.manifest.sticky_action_prob)
        return SOURCE_STICKY_ACTION_PROB.get(self.manifest.source)

    @property
    def has_ram(self) -> bool:
        """Whether the store holds the console RAM of every row (the optional ``ram`` field)."""
        return "ram" in self.manifest.fields

    def gather_ram(self, rows: np.ndarray) -> np.ndarray:
        """The 128-byte console RAM of state ``s_t`` at ``rows`` (any shape) -> ``rows.shape +
        (128,)`` uint8.

        Raises:
            StoreError: the store was recorded without RAM.
        """
        if not self.has_ram:
            raise StoreError(
                f"{self.path}: this store holds no RAM (source {self.manifest.source!r}); "
                "collect it again with this sgi-lab (Random and Exploratory collectors record it)"
            )
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        chunk = np.searchsorted(self._chunk_starts, flat, side="right") - 1
        out = np.empty((flat.size, RAM_SIZE), dtype=np.uint8)
        for c in np.unique(chunk):
            sel = chunk == c
            out[sel] = self._ram[c][flat[sel] - self._chunk_starts[c]]
        return out.reshape(*rows.shape, RAM_SIZE)

    def gather_frames(self, rows: np.ndarray) -> np.ndarray:
        """Frames at arbitrary row indices: ``rows`` of any shape -> ``rows.shape + (84, 84)``."""
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        out = np.empty((flat.size, *FRAME_SHAPE), dtype=np.uint8)
        if self._uniform_chunks:
            chunk = flat // self.manifest.chunk_size
        else:
            chunk = np.searchsorted(self._chunk_starts, flat, side="right") - 1
        if len(self._frames) == 1:
            out[:] = self._frames[0][flat]
        else:
            for c in np.unique(chunk):
                sel = chunk == c
                out[sel] = self._frames[c][flat[sel] - self._chunk_starts[c]]
        self._gathered += out.nbytes
        if self._gathered >= self._release_every:
            self.release_pages()
        return out.reshape(*rows.shape, *FRAME_SHAPE)

    def release_pages(self) -> None:
        """Drop this process's mappings of frame pages (they stay in the OS page cache)."""
        self._gathered = 0
        for array in self._frames:
            mm = getattr(array, "_mmap", None)
            if mm is not None and hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_DONTNEED)

    def stack(self, rows: np.ndarray, history: int = 4) -> np.ndarray:
        """Frame stacks for rows: ``rows.shape + (history, 84, 84)``, zero before episode starts."""
        rows = np.asarray(rows, dtype=np.int64)
        offsets = np.arange(-history + 1, 1)
        idx = rows[..., None] + offsets
        valid = idx >= self.row_episode_start[rows][..., None]
        frames = self.gather_frames(np.where(valid, idx, rows[..., None]))
        frames[~valid] = 0
        return frames

    def episode(self, index: int) -> dict[str, np.ndarray]:
        """One whole episode's small fields (and its row range) as a dict of arrays."""
        start, end = int(self.episode_starts[index]), int(self.episode_ends[index])
        rows = np.arange(start, end + 1)
        return {
            "rows": rows,
            "action": self.actions[rows],
            "reward": self.rewards[rows],
            "terminal": self.terminals[rows],
        }

    def summary(self) -> dict[str, Any]:
        """Counts and episode statistics (returns use the stored rewards)."""
        returns = np.add.reduceat(self.rewards.astype(np.float64), self.episode_starts)
        lengths = self.episode_ends - self.episode_starts + 1
        return {
            "game": self.game,
            "source": self.manifest.source,
            "transitions": len(self),
            "episodes": self.num_episodes,
            "terminals": int(self.terminals.sum()),
            "mean_episode_return": float(returns.mean()),
            "mean_episode_length": float(lengths.mean()),
            "max_episode_length": int(lengths.max()),
            "reward_density": float((self.rewards != 0).mean()),
            "num_actions": self.num_actions,
            "sticky_action_prob": self.sticky_action_prob,
            "ram": self.has_ram,
            "frames_gb": len(self) * FRAME_SHAPE[0] * FRAME_SHAPE[1] / 1e9,
        }

    def episode_returns(self) -> np.ndarray:
        return np.add.reduceat(self.rewards.astype(np.float64), self.episode_starts)

    def episode_lengths(self) -> np.ndarray:
        return self.episode_ends - self.episode_starts + 1
