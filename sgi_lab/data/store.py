"""A finished transition store opened for reading: small fields in RAM, frames through memmaps.

The format (fields, chunk files, manifest) is `sgi_lab.data.store_format`'s; stores are written
by `sgi_lab.data.store_writer`. Opening a store reads only its small fields and checks them
against the manifest; :meth:`TransitionStore.verify` reads every chunk file and checks its
checksum. Samplers read frames through :meth:`TransitionStore.gather_frames` and
:meth:`TransitionStore.stack`.
"""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.base.paths import did_you_mean
from sgi_lab.data.store_format import (
    MANIFEST,
    PARTIAL_SUFFIX,
    RAM_SIZE,
    SMALL_FIELDS,
    SOURCE_STICKY_ACTION_PROB,
    StoreError,
    StoreManifest,
    chunk_path,
    file_checksum,
)
from sgi_lab.envs.spec import ObservationSpec


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
            if partial.exists():
                raise StoreError(
                    f"{self.path}: no such store (an unfinished store is at {partial}: resume it)"
                )
            raise StoreError(did_you_mean(self.path, "store"))
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
        self.observation_spec: ObservationSpec = m.observation_spec
        """What one observation is (Atari's for stores older than the field)."""
        self.frame_shape = self.observation_spec.frame_shape
        self._frames: list[np.memmap] = []
        self._ram: list[np.memmap] = []
        self._labels: list[np.memmap] = []
        columns: dict[str, list[np.ndarray]] = {name: [] for name in SMALL_FIELDS}
        for index, rows in enumerate(m.chunks):
            for name, (dtype, shape) in m.field_specs().items():
                array = self._open_chunk(name, index, rows, dtype, shape)
                if name == "frame":
                    self._frames.append(array)
                elif name == "ram":
                    self._ram.append(array)
                elif name == "labels":
                    self._labels.append(array)
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
                f"{chunk_path(self.path, 'first', 0)}: row 0 does not start an episode"
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
        path = chunk_path(self.path, name, index)
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
                path = chunk_path(self.path, name, index)
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

    @property
    def has_labels(self) -> bool:
        """Whether the store holds a game's own state per row (the optional ``labels`` field)."""
        return "labels" in self.manifest.fields

    @property
    def label_names(self) -> tuple[str, ...]:
        """The names of the ``labels`` columns (empty without labels)."""
        return tuple(self.manifest.label_names or ())

    def gather_labels(self, rows: np.ndarray) -> np.ndarray:
        """The game's state in ``s_t`` at ``rows`` (any shape) -> ``rows.shape + (L,)`` int16,
        columns named by `label_names`.

        Raises:
            StoreError: the store was recorded without labels.
        """
        if not self.has_labels:
            raise StoreError(
                f"{self.path}: this store holds no game-state labels (source "
                f"{self.manifest.source!r}); MinAtar collectors record them"
            )
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        chunk = np.searchsorted(self._chunk_starts, flat, side="right") - 1
        out = np.empty((flat.size, len(self.label_names)), dtype=np.int16)
        for c in np.unique(chunk):
            sel = chunk == c
            out[sel] = self._labels[c][flat[sel] - self._chunk_starts[c]]
        return out.reshape(*rows.shape, len(self.label_names))

    def gather_frames(self, rows: np.ndarray) -> np.ndarray:
        """Frames at arbitrary row indices: ``rows`` of any shape -> ``rows.shape +
        frame_shape`` ((84, 84) for Atari, (C, 10, 10) for MinAtar)."""
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        out = np.empty((flat.size, *self.frame_shape), dtype=np.uint8)
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
        return out.reshape(*rows.shape, *self.frame_shape)

    def release_pages(self) -> None:
        """Drop this process's mappings of frame pages (they stay in the OS page cache)."""
        self._gathered = 0
        for array in self._frames:
            mm = getattr(array, "_mmap", None)
            if mm is not None and hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_DONTNEED)

    def stack(self, rows: np.ndarray, history: int | None = None) -> np.ndarray:
        """Observations for rows: ``rows.shape + (history * channels, height, width)``, the
        ``history`` newest frames (default: the spec's ``frames``), zero before episode starts;
        ``rows.shape + stacked_shape`` by default ((4, 84, 84) for Atari)."""
        spec = self.observation_spec
        history = spec.frames if history is None else history
        rows = np.asarray(rows, dtype=np.int64)
        offsets = np.arange(-history + 1, 1)
        idx = rows[..., None] + offsets
        valid = idx >= self.row_episode_start[rows][..., None]
        frames = self.gather_frames(np.where(valid, idx, rows[..., None]))
        frames[~valid] = 0
        return frames.reshape(*rows.shape, history * spec.channels, spec.height, spec.width)

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
            "env_protocol": self.manifest.env_protocol,
            "ram": self.has_ram,
            "labels": self.has_labels,
            "observation": self.observation_spec.to_json(),
            "frames_gb": len(self) * int(np.prod(self.frame_shape)) / 1e9,
        }

    def episode_returns(self) -> np.ndarray:
        return np.add.reduceat(self.rewards.astype(np.float64), self.episode_starts)

    def episode_lengths(self) -> np.ndarray:
        return self.episode_ends - self.episode_starts + 1
