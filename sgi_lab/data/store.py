"""On-disk transition store: single 84x84 frames in chunked ``.npy`` files read through memmaps.

A store is one folder::

    STORE/
      manifest.json           format version, game, source, creation params, counts, fields
      chunks/frame_00000.npy  (rows, 84, 84) uint8 — one frame per row, stored once
      chunks/action_00000.npy (rows,) int32
      chunks/reward_00000.npy (rows,) float32, raw (unclipped) unless manifest says otherwise
      chunks/terminal_00000.npy (rows,) uint8
      chunks/first_00000.npy  (rows,) uint8 — 1 where an episode starts

Row ``t`` holds the newest frame of state ``s_t``, the action ``a_t`` taken there, the reward
``r_t`` it earned and ``terminal_t`` = the transition ended the episode for learning (game over,
or a life loss when the data was recorded that way). As in Dopamine, the observation after a
terminal transition is not stored. ``first_t`` marks frame discontinuities (a reset): a 4-frame
stack for row ``t`` is rebuilt from rows ``t-3..t`` and is zero-padded before the episode's first
row, so no stack ever crosses an episode boundary. A life-loss terminal does *not* reset the game,
so the frames after it continue the same episode (``first`` stays 0), exactly as the environment's
own frame stack does.

Writing is crash-safe: a store is built in ``STORE.partial/`` and renamed to ``STORE`` only when
complete. Each finished chunk is recorded in the partial manifest, so an interrupted collection
resumes from its last finished chunk; nothing under ``STORE`` exists until the rename.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_VERSION = 1
FRAME_SHAPE = (84, 84)
DEFAULT_CHUNK_SIZE = 100_000
MANIFEST = "manifest.json"
PARTIAL_SUFFIX = ".partial"

# name -> (dtype, per-row shape)
FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "frame": ("uint8", FRAME_SHAPE),
    "action": ("int32", ()),
    "reward": ("float32", ()),
    "terminal": ("uint8", ()),
    "first": ("uint8", ()),
}
SMALL_FIELDS = ("action", "reward", "terminal", "first")


class StoreError(RuntimeError):
    """A store on disk is missing, incomplete or inconsistent with its manifest."""


def _chunk_path(root: Path, field_name: str, index: int) -> Path:
    return root / "chunks" / f"{field_name}_{index:05d}.npy"


def _write_json_atomic(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(payload, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
    format_version: int = FORMAT_VERSION
    created: str = ""
    complete: bool = False
    fields: dict[str, dict] = field(
        default_factory=lambda: {k: {"dtype": d, "shape": list(s)} for k, (d, s) in FIELDS.items()}
    )

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, payload: dict, path: Path) -> StoreManifest:
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
        missing = {"game", "source", "chunks", "num_transitions"} - set(payload)
        if missing:
            raise StoreError(f"{path}: manifest lacks keys {sorted(missing)}")
        return cls(**payload)


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
            for name, (dtype, shape) in FIELDS.items()
        }
        self._fill = 0
        self._closed = False

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
    ) -> TransitionStoreWriter:
        """Start a new store at ``path`` (built under ``path.partial``)."""
        path = Path(path)
        if path.exists():
            if not overwrite:
                raise FileExistsError(f"{path} already exists (pass overwrite=True to replace it)")
        partial = path.with_name(path.name + PARTIAL_SUFFIX)
        if partial.exists():
            shutil.rmtree(partial)
        (partial / "chunks").mkdir(parents=True)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        manifest = StoreManifest(
            game=game,
            source=source,
            params=dict(params or {}),
            chunk_size=int(chunk_size),
            num_actions=num_actions,
            rewards_clipped=rewards_clipped,
            created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        )
        writer = cls(path, manifest)
        writer._overwrite = overwrite
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
        # Drop any chunk files written after the last one the manifest records.
        for stray in (partial / "chunks").glob("*.npy*"):
            index = int(stray.name.split("_")[-1].split(".")[0])
            if index >= len(manifest.chunks) or stray.name.endswith(".tmp"):
                stray.unlink()
        writer = cls(path, manifest)
        writer._overwrite = True
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

    def append(
        self, frame: np.ndarray, action: int, reward: float, terminal: bool, first: bool
    ) -> None:
        """Append one row: the newest frame of ``s_t``, ``a_t``, ``r_t``, ``terminal_t``, ``first_t``."""
        i = self._fill
        self._buffers["frame"][i] = frame
        self._buffers["action"][i] = action
        self._buffers["reward"][i] = reward
        self._buffers["terminal"][i] = terminal
        self._buffers["first"][i] = first
        self._fill += 1
        if self._fill == self.manifest.chunk_size:
            self._flush_chunk()

    def append_many(self, **columns: np.ndarray) -> None:
        """Append aligned arrays ``frame (n,84,84), action, reward, terminal, first`` (each (n,))."""
        if set(columns) != set(FIELDS):
            raise ValueError(f"append_many needs exactly the fields {sorted(FIELDS)}")
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
        for name in FIELDS:
            target = _chunk_path(self.partial, name, index)
            tmp = target.with_name(target.name + ".tmp")
            with open(tmp, "wb") as fh:
                np.save(fh, self._buffers[name][:rows], allow_pickle=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        m = self.manifest
        m.chunks.append(rows)
        m.num_transitions += rows
        m.num_episodes += int(self._buffers["first"][:rows].sum())
        m.num_terminals += int(self._buffers["terminal"][:rows].sum())
        self._fill = 0
        self._save_manifest()

    def _save_manifest(self) -> None:
        _write_json_atomic(self.partial / MANIFEST, self.manifest.to_json())

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
        self._save_manifest()
        if self.path.exists():
            if not getattr(self, "_overwrite", False):
                raise FileExistsError(f"{self.path} already exists")
            shutil.rmtree(self.path)
        os.replace(self.partial, self.path)
        _fsync_dir(self.path.parent)
        self._closed = True
        return self.path

    def abort(self) -> None:
        """Remove the partial store."""
        shutil.rmtree(self.partial, ignore_errors=True)
        self._closed = True


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
        except json.JSONDecodeError as exc:
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
        columns: dict[str, list[np.ndarray]] = {name: [] for name in SMALL_FIELDS}
        for index, rows in enumerate(m.chunks):
            for name, (dtype, shape) in FIELDS.items():
                array = self._open_chunk(name, index, rows, dtype, shape)
                if name == "frame":
                    self._frames.append(array)
                else:
                    columns[name].append(np.asarray(array))
        self.actions = np.concatenate(columns["action"]).astype(np.int64)
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
            "frames_gb": len(self) * FRAME_SHAPE[0] * FRAME_SHAPE[1] / 1e9,
        }

    def episode_returns(self) -> np.ndarray:
        return np.add.reduceat(self.rewards.astype(np.float64), self.episode_starts)

    def episode_lengths(self) -> np.ndarray:
        return self.episode_ends - self.episode_starts + 1
