"""Weak and Mixed: selections of one agent's whole replay, as the paper makes them of a DQN run.

The paper's **Weak** set is the first 1M steps of a DQN Replay run (its epsilon-greedy start)
and its **Mixed** set checkpoints spread evenly over the whole of training (Sec. 3). Of a store
exported from an agent's replay (`sgi_lab.data.replay_export`, source ``replay``):

* `select_weak` keeps the first ``fraction`` of the run's rows (the run's own order; the last
  episode is cut where the fraction ends, without a terminal, as the Weak set's last);
* `select_mixed` keeps ``rows`` rows in fixed-length segments drawn uniformly without
  replacement from the run's aligned segments (rows ``[i L, (i+1) L)``), kept in run order; the
  last kept segment is shortened so that exactly ``rows`` remain. Each segment starts an
  episode (its first row's ``first`` flag is set: no frame stack, goal or K-step sequence
  crosses from one segment into another, the sampler's rule at every episode start), and the
  episode starts and terminals inside it are the run's.

The selection's manifest (source ``replay_weak`` or ``replay_mixed``) keeps the making agent's
record from the replay's (its config, final evaluation, checkpoints and learning curve; Weak's
checkpoints and curve cut at its end) and says what was selected: the replay's fingerprint and
rows, the fraction, or the seed, segment length and the segments' source rows.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.data.replay_export import REPLAY_SOURCE
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_writer import TransitionStoreWriter, check_store_target

__all__ = ["DEFAULT_SEGMENT", "mixed_segments", "select_mixed", "select_weak", "weak_rows"]

DEFAULT_SEGMENT = 1000
"""Mixed's rows per segment: a MinAtar episode or a few, far above SPR's K + 1 = 6."""


def weak_rows(num_rows: int, fraction: float) -> int:
    """Rows of the first ``fraction`` of a run of ``num_rows``: ``floor(fraction * num_rows)``.

    Raises:
        ValueError: ``fraction`` outside (0, 1], or selecting no row.
    """
    if isinstance(fraction, bool) or not 0 < fraction <= 1:
        raise ValueError(f"--weak: a fraction in (0, 1], got {fraction!r}")
    rows = math.floor(fraction * num_rows)
    if rows < 1:
        raise ValueError(f"--weak {fraction}: of {num_rows} rows selects none")
    return rows


def mixed_segments(num_rows: int, rows: int, segment: int, seed: int) -> list[list[int]]:
    """Mixed's ``[start, length]`` row ranges of a run of ``num_rows``, in run order: ceil(rows
    / segment) of the run's ``num_rows // segment`` aligned segments, drawn uniformly without
    replacement (NumPy's ``default_rng(seed).choice``), the last shortened to total ``rows``.

    Raises:
        ValueError: a segment under 2 rows, no row asked for, or more than the segments hold.
    """
    if isinstance(segment, bool) or segment < 2:
        raise ValueError(f"--segment: at least 2 rows, got {segment!r}")
    if isinstance(rows, bool) or rows < 1:
        raise ValueError(f"--mixed: at least 1 row, got {rows!r}")
    available = num_rows // segment
    wanted = math.ceil(rows / segment)
    if wanted > available:
        raise ValueError(
            f"--mixed {rows}: the run's {num_rows} rows hold {available} whole segments of "
            f"{segment} ({available * segment} rows); ask for fewer rows or a shorter --segment"
        )
    chosen = np.sort(np.random.default_rng(seed).choice(available, wanted, replace=False))
    ranges = [[int(i) * segment, segment] for i in chosen]
    ranges[-1][1] -= wanted * segment - rows
    return ranges


def _source(store: str | os.PathLike | TransitionStore) -> TransitionStore:
    store = store if isinstance(store, TransitionStore) else TransitionStore(store)
    if store.manifest.source != REPLAY_SOURCE:
        raise ValueError(
            f"{store.path}: a {store.manifest.source!r} store; Weak and Mixed select from an "
            f"agent's replay (source {REPLAY_SOURCE!r}, made by `sgi-lab export replay`)"
        )
    return store


def _provenance(store: TransitionStore, selection: dict[str, Any]) -> dict[str, Any]:
    """A selection's params: what was selected, of which replay, and the agent that made it."""
    agent = dict(store.manifest.params)
    of = {"source": store.manifest.source, "fingerprint": store.fingerprint, "rows": len(store)}
    return {**selection, "of": of, "agent": agent}


def _write(
    store: TransitionStore,
    out: str | os.PathLike,
    source: str,
    params: dict[str, Any],
    ranges: list[list[int]],
    overwrite: bool,
) -> TransitionStore:
    """Copy ``ranges`` (``[start, length]`` of ``store``'s rows) into a store at ``out``, each
    range starting an episode; a complete store made the same way is returned as it is."""
    m = store.manifest
    done = check_store_target(out, m.game, source, params, overwrite, m.env_protocol)
    if done is not None:
        return done
    writer = TransitionStoreWriter.create(
        out, game=m.game, source=source, params=params, num_actions=m.num_actions,
        rewards_clipped=m.rewards_clipped, chunk_size=m.chunk_size, overwrite=overwrite,
        sticky_action_prob=m.sticky_action_prob, ram=store.has_ram,
        env_protocol=m.env_protocol, observation_spec=store.observation_spec,
        label_names=store.label_names or None,
    )  # fmt: skip
    try:
        for start, length in ranges:
            for a in range(start, start + length, m.chunk_size):
                rows = np.arange(a, min(a + m.chunk_size, start + length))
                first = store.firsts[rows].astype(np.uint8)
                if a == start:
                    first[0] = 1
                columns = {
                    "frame": store.gather_frames(rows),
                    "action": store.actions[rows].astype(np.int32),
                    "reward": store.rewards[rows],
                    "terminal": store.terminals[rows].astype(np.uint8),
                    "first": first,
                }
                if store.has_ram:
                    columns["ram"] = store.gather_ram(rows)
                if store.has_labels:
                    columns["labels"] = store.gather_labels(rows)
                writer.append_many(**columns)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return TransitionStore(Path(out))


def select_weak(
    store: str | os.PathLike | TransitionStore,
    out: str | os.PathLike,
    fraction: float,
    overwrite: bool = False,
) -> TransitionStore:
    """The first ``fraction`` of an agent's replay as a store at ``out`` (source
    ``replay_weak``); the agent's checkpoints and learning curve cut at its end.

    Raises:
        ValueError: not a replay store, or a fraction outside (0, 1] (`weak_rows`).
        StoreFolderError: ``out`` holds something else, or another selection without
            ``overwrite``.
    """
    store = _source(store)
    rows = weak_rows(len(store), fraction)
    params = _provenance(store, {"selection": "weak", "fraction": float(fraction), "rows": rows})
    agent = params["agent"]
    if isinstance(agent.get("checkpoints"), list):
        agent["checkpoints"] = [c for c in agent["checkpoints"] if c <= rows]
    if isinstance(agent.get("curve"), list):
        agent["curve"] = [c for c in agent["curve"] if c.get("step", 0) <= rows]
    return _write(store, out, f"{REPLAY_SOURCE}_weak", params, [[0, rows]], overwrite)


def select_mixed(
    store: str | os.PathLike | TransitionStore,
    out: str | os.PathLike,
    rows: int,
    seed: int = 0,
    segment: int = DEFAULT_SEGMENT,
    overwrite: bool = False,
) -> TransitionStore:
    """``rows`` rows drawn uniformly over an agent's whole replay in segments of ``segment``
    (`mixed_segments`) as a store at ``out`` (source ``replay_mixed``).

    Raises:
        ValueError: not a replay store, or rows and segment the run cannot give.
        StoreFolderError: ``out`` holds something else, or another selection without
            ``overwrite``.
    """
    store = _source(store)
    ranges = mixed_segments(len(store), rows, segment, seed)
    selection = {"selection": "mixed", "rows": int(rows), "seed": int(seed)}
    params = _provenance(store, {**selection, "segment": int(segment), "segments": ranges})
    return _write(store, out, f"{REPLAY_SOURCE}_mixed", params, ranges, overwrite)
