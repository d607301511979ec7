"""Importer for the DQN Replay dataset (the paper's Weak and Mixed datasets).

The dataset is a folder of Dopamine replay-buffer checkpoints, one set of files per checkpoint
``N`` (e.g. ``gs://atari-replay-datasets/dqn/Pong/1/replay_logs``)::

    $store$_observation_ckpt.N.gz   (capacity, 84, 84) uint8, one frame per row
    $store$_action_ckpt.N.gz        (capacity,) int32
    $store$_reward_ckpt.N.gz        (capacity,) float32, clipped to [-1, 1] by Dopamine's runner
    $store$_terminal_ckpt.N.gz      (capacity,) uint8
    add_count_ckpt.N.gz             () int: transitions ever added, padding included
    invalid_range_ckpt.N.gz         (stack_size + update_horizon,) int: rows around the cursor

each a gzip stream holding one ``np.save`` array (Dopamine's ``OutOfGraphReplayBuffer.save``).

How Dopamine filled the buffer, and what the importer undoes:

- The buffer is circular: the next row is written at ``cursor = add_count % capacity``. Once
  ``add_count > capacity`` the oldest row sits at the cursor and time wraps around the end, so
  the rows just after the cursor do not continue the rows just before it (the *seam*).
- ``add`` writes ``stack_size - 1`` all-zero transitions before the first frame of the buffer
  and before the first frame after every terminal, so its frame stacks start zero-padded. Every
  episode end (game over, the step cap, or a life loss when training ended episodes there) is
  stored as a terminal and followed by this padding, and the agent's own frame stack restarts.
- ``invalid_range`` lists the rows Dopamine never samples around the cursor: the
  ``update_horizon`` newest rows (their next state is not stored) and the ``stack_size`` rows on
  and after the cursor (their stacks would cross the seam).

The importer keeps the real transitions in chronological order, drops the padding, the invalid
range and — in a wrapped buffer — the ``stack_size - 1`` oldest rows (which may be padding whose
terminal was overwritten; Dopamine's sampler skips them too), and marks ``first=1`` on every row
that starts an episode: after padding, after a dropped row and at the start of each checkpoint's
slice. A slice whose last row is not terminal ends a truncated episode.

DQN Replay was recorded with sticky actions (the emulator repeats the previous action with
probability 0.25), unlike Atari 100k (0): the store's manifest records ``sticky_action_prob:
0.25`` and ``sgi-lab info`` shows it.
"""

from __future__ import annotations

import gzip
import os
import re
import warnings
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm.auto import tqdm

from sgi_lab.base.errors import SgiLabError
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import FRAME_SHAPE, SOURCE_STICKY_ACTION_PROB
from sgi_lab.data.store_writer import TransitionStoreWriter, check_store_target

STORE_FILENAME_PREFIX = "$store$_"  # Dopamine's prefix for the arrays of ``_store``
STORE_ARRAYS = ("observation", "action", "reward", "terminal")
STACK_SIZE = 4  # Dopamine's Atari stack size, which sets the padding length (stack_size - 1)
DEFAULT_CHUNK_SIZE = 50_000  # 50k frames = 353 MB of writer buffers
READ_BLOCK_ROWS = 4_096  # observation rows decompressed at a time (29 MB)

_CORRUPT = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError


class DQNReplayError(SgiLabError, ValueError):
    """A DQN Replay checkpoint is missing, malformed or inconsistent; the message names the file."""


def checkpoint_files(src: str | os.PathLike, checkpoint: int) -> dict[str, Path]:
    """The six files of one checkpoint: the four store arrays plus ``add_count``, ``invalid_range``."""
    src = Path(src)
    files = {
        name: src / f"{STORE_FILENAME_PREFIX}{name}_ckpt.{checkpoint}.gz" for name in STORE_ARRAYS
    }
    for name in ("add_count", "invalid_range"):
        files[name] = src / f"{name}_ckpt.{checkpoint}.gz"
    return files


def available_checkpoints(src: str | os.PathLike) -> list[int]:
    """Checkpoint numbers in ``src`` for which all six files are present, ascending."""
    pattern = re.compile(re.escape(f"{STORE_FILENAME_PREFIX}observation_ckpt.") + r"(\d+)\.gz$")
    found = []
    for path in Path(src).glob(f"{STORE_FILENAME_PREFIX}observation_ckpt.*.gz"):
        match = pattern.match(path.name)
        if match and all(p.exists() for p in checkpoint_files(src, int(match[1])).values()):
            found.append(int(match[1]))
    return sorted(found)


# -- reading gzip'd .npy streams -------------------------------------------------------------
class NpyGzipStream:
    """One ``np.save`` array inside a gzip file, read front to back in row blocks.

    Only the header is parsed on opening, so a 7 GB observation array streams through a
    fixed-size buffer. Object dtypes are refused and nothing is ever unpickled.

    Attributes:
        shape: the array's shape; ``dtype``: its dtype; ``row_shape``: ``shape[1:]``;
        ``num_rows``: ``shape[0]`` (1 for a 0-d array).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fh = None
        self._rows_read = 0
        try:
            self._fh = gzip.open(self.path, "rb")
            version = np.lib.format.read_magic(self._fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(self._fh)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(self._fh)
            else:
                raise DQNReplayError(f"{self.path}: unsupported .npy format version {version}")
        except DQNReplayError:
            self.close()
            raise
        except _CORRUPT as exc:
            self.close()
            raise DQNReplayError(
                f"{self.path}: corrupted or truncated gzip stream ({exc})"
            ) from exc
        except ValueError as exc:
            self.close()
            raise DQNReplayError(f"{self.path}: not an np.save array ({exc})") from exc
        if dtype.hasobject:
            self.close()
            raise DQNReplayError(f"{self.path}: holds an object array, which is refused")
        if fortran and len(shape) > 1:
            self.close()
            raise DQNReplayError(f"{self.path}: Fortran-ordered arrays are not supported")
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: np.dtype = dtype
        self.row_shape = self.shape[1:]
        self.num_rows = self.shape[0] if self.shape else 1  # a 0-d array reads as one row

    def __enter__(self) -> NpyGzipStream:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    @property
    def rows_left(self) -> int:
        return self.num_rows - self._rows_read

    def read(self, rows: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The next ``rows`` rows (all remaining when None), into ``out`` when given."""
        rows = self.rows_left if rows is None else rows
        if rows > self.rows_left:
            raise ValueError(f"{self.path}: asked for {rows} rows, {self.rows_left} left")
        if out is None:
            out = np.empty((rows, *self.row_shape) if self.shape else (), self.dtype)
        elif not out.flags.c_contiguous:
            raise ValueError("out must be C-contiguous")
        view = memoryview(out.reshape(-1)).cast("B")
        got = 0
        try:
            while got < len(view):
                n = self._fh.readinto(view[got:])
                if not n:
                    raise DQNReplayError(
                        f"{self.path}: stream ends before the {self.shape} array its header "
                        "declares (truncated file?)"
                    )
                got += n
            if self._rows_read + rows == self.num_rows:
                self._fh.read(1)  # reach the gzip trailer so its CRC gets checked
        except _CORRUPT as exc:
            raise DQNReplayError(
                f"{self.path}: corrupted or truncated gzip stream ({exc})"
            ) from exc
        self._rows_read += rows
        return out

    def skip(self, rows: int, block_rows: int = READ_BLOCK_ROWS) -> None:
        """Decompress and discard ``rows`` rows (gzip streams cannot seek)."""
        scratch = np.empty((min(rows, block_rows), *self.row_shape), self.dtype)
        while rows > 0:
            take = min(rows, block_rows)
            self.read(take, out=scratch[:take])
            rows -= take


def _load_small(path: Path) -> np.ndarray:
    with NpyGzipStream(path) as stream:
        return stream.read()


def _check_kind(path: Path, dtype: np.dtype, kinds: str, expected: str) -> None:
    if dtype.kind not in kinds:
        raise DQNReplayError(f"{path}: holds {dtype} values, expected {expected}")


# -- cleaning one checkpoint -----------------------------------------------------------------
class ReplayRows(NamedTuple):
    """The rows of one checkpoint that survive cleaning.

    Attributes:
        positions: (n,) int64 buffer indices of the kept rows, in chronological order.
        first: (n,) bool, True where a kept row starts an episode.
        padding: buffer indices that hold Dopamine's zero padding (dropped).
    """

    positions: np.ndarray
    first: np.ndarray
    padding: np.ndarray


def clean_replay_rows(
    terminal: np.ndarray,
    add_count: int,
    invalid_range: np.ndarray,
    stack_size: int = STACK_SIZE,
) -> ReplayRows:
    """Chronological order of a Dopamine circular buffer without padding and invalid rows.

    Args:
        terminal: (capacity,) the buffer's terminal flags.
        add_count: transitions ever added to the buffer, padding included.
        invalid_range: buffer indices Dopamine marked invalid around the cursor.
        stack_size: Dopamine's frame-stack size; ``stack_size - 1`` zero rows pad each episode.

    Returns:
        The kept rows with their first flags, and the padding rows (see :class:`ReplayRows`).
    """
    capacity = len(terminal)
    held = min(int(add_count), capacity)
    age = int(add_count) - held + np.arange(held)  # the add number of each held row
    pos = age % capacity
    term = np.asarray(terminal)[pos].astype(bool)
    pad = stack_size - 1
    padding = age < pad  # before the buffer's first frame
    for k in range(1, min(pad, held - 1) + 1):  # after every terminal
        padding[k:] |= term[:-k]
    keep = ~padding & ~np.isin(pos, np.asarray(invalid_range, dtype=np.int64) % capacity)
    if add_count > capacity:
        # The oldest rows may be padding whose terminal was overwritten.
        keep[:pad] = False
    prev_kept = np.concatenate([[False], keep[:-1]])
    prev_terminal = np.concatenate([[False], term[:-1]])
    first = keep & (~prev_kept | prev_terminal)
    return ReplayRows(pos[keep], first[keep], pos[padding])


class _Checkpoint(NamedTuple):
    number: int
    files: dict[str, Path]
    capacity: int


def _inspect_checkpoint(src: Path, number: int) -> _Checkpoint:
    """Check a checkpoint's files exist and their headers agree, without reading the arrays."""
    files = checkpoint_files(src, number)
    for path in files.values():
        if not path.is_file():
            have = available_checkpoints(src)
            raise DQNReplayError(
                f"{path}: missing file for checkpoint {number} "
                f"(complete checkpoints in {src}: {have or 'none'})"
            )
    headers = {}
    for name in STORE_ARRAYS:
        with NpyGzipStream(files[name]) as stream:
            headers[name] = (stream.shape, stream.dtype)
    shape, dtype = headers["observation"]
    if dtype != np.uint8 or len(shape) != 3 or tuple(shape[1:]) != FRAME_SHAPE:
        raise DQNReplayError(
            f"{files['observation']}: holds {dtype}{list(shape)}, expected uint8 "
            f"(capacity, {FRAME_SHAPE[0]}, {FRAME_SHAPE[1]}) frames"
        )
    capacity = shape[0]
    expected = {
        "action": ("iu", "integers"),
        "reward": ("f", "floats"),
        "terminal": ("biu", "flags"),
    }
    for name, (kinds, what) in expected.items():
        shape, dtype = headers[name]
        _check_kind(files[name], dtype, kinds, what)
        if len(shape) != 1:
            raise DQNReplayError(f"{files[name]}: holds shape {list(shape)}, expected (capacity,)")
        if shape[0] != capacity:
            raise DQNReplayError(
                f"{files[name]}: holds {shape[0]} rows but {files['observation'].name} holds "
                f"{capacity}; the arrays of a checkpoint must have the same length"
            )
    if capacity < STACK_SIZE:
        raise DQNReplayError(f"{files['observation']}: capacity {capacity} is below the stack size")
    return _Checkpoint(number, files, capacity)


def _plan_checkpoint(ckpt: _Checkpoint, num_actions: int | None) -> dict[str, np.ndarray]:
    """Read a checkpoint's small arrays and return its kept rows and their fields."""
    files = ckpt.files
    add_count = _load_small(files["add_count"])
    if add_count.size != 1 or add_count.dtype.kind not in "iu" or int(add_count.flat[0]) < 0:
        raise DQNReplayError(
            f"{files['add_count']}: expected a non-negative integer, got "
            f"{add_count.dtype}{list(add_count.shape)}"
        )
    add_count = int(add_count.flat[0])
    invalid = _load_small(files["invalid_range"])
    _check_kind(files["invalid_range"], invalid.dtype, "iuf", "buffer indices")
    # Dopamine initialises invalid_range as float zeros, so accept integral floats.
    if invalid.ndim != 1 or np.any(invalid != np.round(invalid)) or np.any(invalid < 0):
        raise DQNReplayError(f"{files['invalid_range']}: expected a 1-D array of buffer indices")
    if np.any(invalid >= ckpt.capacity):
        raise DQNReplayError(
            f"{files['invalid_range']}: indices exceed the buffer capacity {ckpt.capacity}"
        )
    terminal = _load_small(files["terminal"])
    rows = clean_replay_rows(terminal, add_count, invalid.astype(np.int64))
    if len(rows.positions) == 0:
        raise DQNReplayError(
            f"{files['add_count']}: checkpoint {ckpt.number} holds no usable transitions "
            f"(add_count {add_count})"
        )
    action = _load_small(files["action"])
    reward = _load_small(files["reward"])
    for name, array in (("action", action), ("reward", reward), ("terminal", terminal)):
        loud = np.count_nonzero(array[rows.padding])
        if loud:
            raise DQNReplayError(
                f"{files[name]}: {loud} rows where Dopamine's zero padding should be hold "
                f"data (is this a stack_size={STACK_SIZE} Dopamine replay buffer?)"
            )
    plan = {
        "positions": rows.positions,
        "first": rows.first,
        "action": action[rows.positions].astype(np.int32),
        "reward": reward[rows.positions].astype(np.float32),
        "terminal": terminal[rows.positions] != 0,
    }
    if plan["action"].min() < 0 or (num_actions and plan["action"].max() >= num_actions):
        raise DQNReplayError(
            f"{files['action']}: actions span [{plan['action'].min()}, {plan['action'].max()}] "
            f"but the game has {num_actions} actions"
        )
    if np.abs(plan["reward"]).max() > 1:
        raise DQNReplayError(
            f"{files['reward']}: rewards outside [-1, 1]; DQN Replay stores clipped rewards"
        )
    return plan


def _resolve_game(game: str) -> tuple[str, int | None]:
    """Canonical game name and minimal action-set size (None when the ALE is unavailable)."""
    try:  # the ALE is optional for importing: without it the game's name is taken as given
        from sgi_lab.envs import canonical_game, num_actions
    except ImportError:
        return game, None
    game = canonical_game(game)
    try:
        return game, int(num_actions(game))
    except Exception:  # no ALE ROMs here: fall back to the largest action in the data
        return game, None


def _stream_frames(ckpt: _Checkpoint, plan: dict[str, np.ndarray], start: int, writer, bar) -> None:
    """Append kept rows ``start..`` of a checkpoint, reading its observations block by block."""
    positions = plan["positions"]
    # Kept positions ascend within each run; a wrapped buffer has two runs (after the seam).
    breaks = np.flatnonzero(np.diff(positions) < 0) + 1
    bounds = [0, *breaks.tolist(), len(positions)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        lo = max(lo, start)
        if lo >= hi:
            continue
        with NpyGzipStream(ckpt.files["observation"]) as stream:
            block = np.empty((READ_BLOCK_ROWS, *FRAME_SHAPE), np.uint8)
            at = 0  # the stream's next row
            i = lo
            while i < hi:
                stream.skip(int(positions[i]) - at)  # rows before the next kept one
                at = int(positions[i])
                n = min(READ_BLOCK_ROWS, stream.rows_left)
                stream.read(n, out=block[:n])
                j = int(np.searchsorted(positions[i:hi], at + n)) + i
                writer.append_many(
                    frame=block[positions[i:j] - at],
                    action=plan["action"][i:j],
                    reward=plan["reward"][i:j],
                    terminal=plan["terminal"][i:j],
                    first=plan["first"][i:j],
                )
                at += n
                bar.update(j - i)
                i = j


def import_dqn_replay(
    src: str | os.PathLike | Sequence[str | os.PathLike],
    game: str,
    checkpoints: list[int],
    samples: int | None,
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    resume: bool = True,
    progress: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> TransitionStore:
    """Import DQN Replay checkpoints into one TransitionStore (the Weak and Mixed datasets).

    For each source folder in order (one DQN run's ``replay_logs``; the paper's Weak dataset
    takes checkpoint 0 of all five runs), and within it each checkpoint in order, the first
    ``samples`` real transitions (chronological, after dropping Dopamine's padding and invalid
    rows) are appended to the store, each slice starting an episode. Only one
    checkpoint's small arrays are held at a time, and frames stream through in blocks, so
    memory stays at a few hundred MB for 1M-frame checkpoints.

    Args:
        src: folder with Dopamine's ``$store$_*_ckpt.N.gz`` files (a ``replay_logs`` folder),
            or several such folders (DQN runs), imported one after another.
        game: any accepted spelling of the game (recorded in the manifest; sets ``num_actions``).
        checkpoints: checkpoint numbers ``N`` to import, in this order.
        samples: transitions taken from each checkpoint; None takes all of them. A checkpoint
            holding fewer gives what it has, with a warning.
        out: store folder (built under ``out.partial`` and renamed when complete).
        overwrite: replace an existing store at ``out`` (only ever a store of ours).
        resume: continue an interrupted import found at ``out.partial`` with the same settings.
            Re-running an import whose store is complete, with the same settings, returns that
            store and writes nothing.
        progress: show a tqdm progress bar.
        chunk_size: rows per chunk file of the store.

    Returns:
        The finished store, opened for reading (``source="dqn_replay"``, rewards clipped).

    Raises:
        DQNReplayError: a requested file is missing, corrupted or malformed (the message names
            it), or the arrays of a checkpoint disagree.
    """
    many = not isinstance(src, (str, os.PathLike))
    srcs = [Path(s) for s in src] if many else [Path(src)]
    out = Path(out)
    checkpoints = [int(c) for c in checkpoints]
    _check_import_args(srcs, checkpoints, samples, chunk_size)
    game, num_actions = _resolve_game(game)
    params = {
        # One folder as before (stores imported earlier resume and match), several as a list.
        "src": [str(s.resolve()) for s in srcs] if many else str(srcs[0].resolve()),
        "checkpoints": checkpoints,
        "samples": samples,
        "stack_size": STACK_SIZE,
    }
    done = check_store_target(out, game, "dqn_replay", params, overwrite=overwrite)
    if done is not None:
        return done  # complete already, same settings: nothing to do
    inspected = [_inspect_checkpoint(folder, n) for folder in srcs for n in checkpoints]
    for ckpt in inspected:  # every error found by planning comes before anything is written
        _plan_checkpoint(ckpt, num_actions)

    writer = TransitionStoreWriter.resume_matching(out, game, params) if resume else None
    if writer is None:
        writer = TransitionStoreWriter.create(
            out,
            game=game,
            source="dqn_replay",
            params=params,
            num_actions=num_actions,
            rewards_clipped=True,
            chunk_size=chunk_size,
            overwrite=overwrite,
            sticky_action_prob=SOURCE_STICKY_ACTION_PROB["dqn_replay"],
        )
    _append_checkpoints(inspected, writer, samples, num_actions, progress)
    return TransitionStore(writer.close())


def _check_import_args(
    srcs: list[Path], checkpoints: list[int], samples: int | None, chunk_size: int
) -> None:
    if not srcs:
        raise ValueError("src must name at least one DQN Replay folder")
    if len({s.resolve() for s in srcs}) != len(srcs):
        raise ValueError(f"src: the same folder twice in {[str(s) for s in srcs]}")
    if not checkpoints:
        raise ValueError("checkpoints must name at least one checkpoint")
    if len(set(checkpoints)) != len(checkpoints) or min(checkpoints) < 0:
        raise ValueError(f"checkpoints must be distinct non-negative numbers, got {checkpoints}")
    if samples is not None and samples < 1:
        raise ValueError(f"samples: must be positive or None, got {samples}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
    for folder in srcs:
        if not folder.is_dir():
            raise DQNReplayError(f"{folder}: no such DQN Replay folder")


def _append_checkpoints(
    inspected: list[_Checkpoint],
    writer: TransitionStoreWriter,
    samples: int | None,
    num_actions: int | None,
    progress: bool,
) -> None:
    """Append the first ``samples`` kept rows of each checkpoint in turn, after the rows an
    interrupted import already made durable; records the store's action count and sticky-action
    probability in its manifest."""
    game = writer.manifest.game
    skip = writer.num_rows  # rows an interrupted import already made durable
    max_action = -1
    bar = tqdm(total=0, disable=not progress, desc=f"import {game}", unit="row", smoothing=0.05)
    try:
        for ckpt in inspected:
            bar.set_postfix(ckpt=ckpt.number)
            plan = _first_samples(_plan_checkpoint(ckpt, num_actions), samples, ckpt)
            max_action = max(max_action, int(plan["action"].max()))
            bar.total += len(plan["positions"])
            bar.refresh()
            done = min(skip, len(plan["positions"]))
            skip -= done
            bar.update(done)
            _stream_frames(ckpt, plan, done, writer, bar)
            del plan
        if writer.manifest.num_actions is None:
            writer.manifest.num_actions = max_action + 1
        # Recorded with sticky actions, unlike Atari 100k (also when resuming an older partial).
        writer.manifest.sticky_action_prob = SOURCE_STICKY_ACTION_PROB["dqn_replay"]
    finally:
        bar.close()


def _first_samples(
    plan: dict[str, np.ndarray], samples: int | None, ckpt: _Checkpoint
) -> dict[str, np.ndarray]:
    """A checkpoint's plan cut to its first ``samples`` rows, with a warning when it holds fewer."""
    if samples is None:
        return plan
    if len(plan["positions"]) < samples:
        warnings.warn(
            f"{ckpt.files['observation']}: checkpoint {ckpt.number} holds "
            f"{len(plan['positions'])} usable transitions, fewer than "
            f"samples={samples}; taking them all",
            stacklevel=4,  # import_dqn_replay's caller
        )
    return {k: v[:samples] for k, v in plan.items()}
