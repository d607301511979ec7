"""The rows an `sgi_lab.envs.pool.EnvPool`'s workers write instead of pickling them through
pipes: every environment's observation, rewards, episode flags, action and activity in one
`multiprocessing.shared_memory` segment. The pool creates it once (sized from its workers'
observation space) and alone unlinks it; each worker attaches it and writes the rows of its own
slice, so only a short command and an acknowledgement cross a pipe per step.

A segment lives in ``/dev/shm`` on Linux, a memory file system that a container may keep small
(Docker's default is 64 MiB, below the 73 MiB of 2,600 Atari observations): `free_bytes` lets
the pool check the room before it allocates, since writing past a full ``/dev/shm`` kills a
process with SIGBUS instead of raising.
"""

from __future__ import annotations

import os
import secrets
from multiprocessing import shared_memory
from typing import Any

import numpy as np

SEGMENT_PREFIX = "sgi-envpool-"
"""The name of every segment starts so (then the creating pid): ``ls /dev/shm/sgi-envpool-*``."""

# The per-environment arrays beside the observations, in `PoolStep` order after them, then the
# parent's inputs. Widest first, so that every array starts aligned.
_STEP_FIELDS = (
    ("rewards", np.float32),
    ("terminated", np.bool_),
    ("truncated", np.bool_),
    ("raw_rewards", np.float64),
    ("terminals", np.bool_),
)
_INPUT_FIELDS = (("actions", np.int64), ("active", np.bool_))
_ALIGN = 64


def _layout(
    num_envs: int, obs_shape: tuple[int, ...], obs_dtype: np.dtype
) -> tuple[list[tuple[str, np.dtype, tuple[int, ...], int]], int]:
    """``(name, dtype, shape, byte offset)`` of every array in the segment, and its size."""
    fields = [("obs", np.dtype(obs_dtype), (num_envs, *obs_shape))]
    fields += [(name, np.dtype(t), (num_envs,)) for name, t in (*_STEP_FIELDS, *_INPUT_FIELDS)]
    placed, offset = [], 0
    for name, dtype, shape in fields:
        placed.append((name, dtype, shape, offset))
        size = int(np.prod(shape)) * dtype.itemsize
        offset += -(-size // _ALIGN) * _ALIGN
    return placed, max(offset, 1)


def segment_bytes(num_envs: int, obs_shape: tuple[int, ...], obs_dtype: Any) -> int:
    """Bytes of the segment of ``num_envs`` environments with these observations."""
    return _layout(num_envs, tuple(obs_shape), np.dtype(obs_dtype))[1]


def free_bytes(path: str = "/dev/shm") -> int | None:
    """Room left where segments live (None where there is no such folder, e.g. macOS)."""
    try:
        stats = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    return stats.f_bavail * stats.f_frsize


class SharedRows:
    """The segment and numpy views of its arrays: ``obs`` (N, *obs_shape), ``rewards``,
    ``terminated``, ``truncated``, ``raw_rewards``, ``terminals`` (as `PoolStep`), ``actions``
    and ``active`` (the parent's inputs). Build with `create` (the pool) or `attach` (a worker).
    """

    def __init__(
        self,
        shm: shared_memory.SharedMemory | None,
        num_envs: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any,
        owner: bool,
    ) -> None:
        self._shm = shm
        self._owner = owner
        self.num_envs = num_envs
        self.obs_shape = tuple(obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        placed, size = _layout(num_envs, self.obs_shape, self.obs_dtype)
        buffer = shm.buf if shm is not None else bytearray(size)
        self._names = []
        for name, dtype, shape, offset in placed:
            setattr(self, name, np.ndarray(shape, dtype, buffer=buffer, offset=offset))
            self._names.append(name)

    @classmethod
    def create(cls, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: Any) -> SharedRows:
        """A new, zeroed segment owned by the caller (who unlinks it in `close`)."""
        size = segment_bytes(num_envs, obs_shape, obs_dtype)
        name = f"{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        return cls(shm, num_envs, obs_shape, obs_dtype, owner=True)

    @classmethod
    def local(cls, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: Any) -> SharedRows:
        """The same rows in this process's own memory (a pool without workers steps its
        environments into them, so both paths hand out rows the same way)."""
        return cls(None, num_envs, obs_shape, obs_dtype, owner=False)

    @classmethod
    def attach(cls, spec: tuple[str, int, tuple[int, ...], str]) -> SharedRows:
        """The segment a `spec` names, seen from another process (which never unlinks it)."""
        name, num_envs, obs_shape, obs_dtype = spec
        shm = shared_memory.SharedMemory(name=name)
        return cls(shm, num_envs, obs_shape, obs_dtype, owner=False)

    @property
    def name(self) -> str:
        if self._shm is None:
            raise ValueError("SharedRows.local rows have no segment to name")
        return self._shm.name

    @property
    def spec(self) -> tuple[str, int, tuple[int, ...], str]:
        """What `attach` needs, small and picklable."""
        return self.name, self.num_envs, self.obs_shape, self.obs_dtype.str

    def step_rows(
        self, mask: np.ndarray | None = None, observations: bool = True
    ) -> tuple[np.ndarray | None, ...]:
        """Copies of ``(obs, rewards, terminated, truncated, raw_rewards, terminals)``, of the
        ``mask`` rows only where given: nothing handed out is overwritten by the next step.
        ``observations=False``: None in place of ``obs`` (a caller reading ``obs`` in place
        copies no frame)."""
        arrays = [getattr(self, name) for name, _ in _STEP_FIELDS]
        if observations:
            arrays.insert(0, self.obs)
        if mask is None:
            rows = [a.copy() for a in arrays]
        else:
            rows = [a[mask] for a in arrays]  # boolean indexing copies
        return tuple(rows) if observations else (None, *rows)

    def close(self) -> None:
        """Drop the views and the mapping; the owner also unlinks the segment. Twice is fine."""
        for name in self._names:
            setattr(self, name, None)
        self._names = []
        if self._shm is None:
            return
        try:
            self._shm.close()
        except BufferError:  # a view someone else kept: the mapping goes with it
            pass
        if self._owner:
            self._owner = False
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass
