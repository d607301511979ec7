"""The Exploratory dataset's writing: whole episodes of parallel environments into a store.

The IDF curiosity agent that acts (`sgi_lab.exploratory.collector`, a training run) steps N
environments at once. Each env keeps its current episode in memory, and `EpisodeBuffers` writes
it as one contiguous block through the store's writer when the episode ends, so a frame stack
rebuilt from the store never crosses envs or episodes (an episode longer than
``max_buffered_steps`` is written in parts; each part restarts the stack). Writing is chunked
and crash-safe like the Random collector (`sgi_lab.data.collect`). Each row carries what the
store records beside the frame: Atari's console RAM (``ram``) or a MinAtar game's own state
(``labels``).
"""

from __future__ import annotations

import numpy as np

from sgi_lab.data.store_writer import TransitionStoreWriter

__all__ = ["EpisodeBuffers"]


class EpisodeBuffers:
    """Each env's rows since its episode (or last written part) began, written as one block.

    Args:
        num_envs: parallel environments, each with its own buffer.
        writer: the store being written.
        limit: rows an env holds before its unfinished episode is written (a part: each part
            restarts the frame stack).
    """

    def __init__(self, num_envs: int, writer: TransitionStoreWriter, limit: int) -> None:
        self.writer = writer
        self.limit = limit
        self.rows: list[list[tuple]] = [[] for _ in range(num_envs)]

    @property
    def pending(self) -> int:
        return sum(len(r) for r in self.rows)

    def add(
        self,
        env: int,
        frame: np.ndarray,
        action: int,
        reward: float,
        terminal: bool,
        ram: np.ndarray | None = None,
        labels: np.ndarray | None = None,
    ) -> None:
        """Buffer one row of env ``env``: the newest frame of ``s_t`` (the store's frame row),
        ``a_t``, the raw ``r_t``, ``terminal_t``, and the RAM or game state behind ``s_t``
        (None when the store has no such field)."""
        self.rows[env].append((frame, action, reward, terminal, ram, labels))
        if len(self.rows[env]) >= self.limit:
            self.write(env)

    def write(self, env: int, limit: int | None = None) -> None:
        rows = self.rows[env][:limit]
        self.rows[env] = []
        if not rows:
            return
        frames, actions, rewards, terminals, rams, labels = zip(*rows, strict=True)
        first = np.zeros(len(rows), np.uint8)
        first[0] = 1
        # An interrupted collection begun by an sgi-lab without RAM goes on without it.
        extra = {"ram": np.stack(rams)} if self.writer.has_ram else {}
        if self.writer.has_labels:
            extra["labels"] = np.stack(labels)
        self.writer.append_many(
            frame=np.stack(frames),
            action=np.asarray(actions, np.int32),
            reward=np.asarray(rewards, np.float32),
            terminal=np.asarray(terminals, np.uint8),
            first=first,
            **extra,
        )
