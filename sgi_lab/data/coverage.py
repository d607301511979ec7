"""State coverage of a TransitionStore: how many distinct coarse screens its data visits.

The measure (used to compare Random and Exploratory data of a game): every stored 84x84 frame
is reduced to a **cell**, as Go-Explore does (Ecoffet et al. 2019: a downscaled, few-intensity
screen): the mean of each ``pool`` x ``pool`` block (12 x 12 blocks for pool 7) quantised to
``levels`` gray levels (8: 32 gray values each). Two frames share a cell when they differ only in
detail finer than that: small sprite moves and flicker merge, a new room, a new brick pattern
or a far-off player position do not. The coverage of the first ``t`` rows is the number of
distinct cells among them; ``cells_per_1k`` is the coverage at ``budget`` rows per 1,000 rows,
so stores of different sizes compare at the same data budget.

A MinAtar frame (C, 10, 10) is already a coarse, symbolic screen: its cell is the grid itself
(which channels are on where), without pooling.
"""

from __future__ import annotations

import numpy as np

from sgi_lab.data.store import TransitionStore

# Fixed odd 64-bit multipliers: a cell's hash is sum(level_j * w_j) mod 2^64 (no Python loop).
_WEIGHTS = np.random.default_rng(20190101).integers(1, 2**63, size=4096, dtype=np.uint64) | 1


def frame_cells(frames: np.ndarray, pool: int = 7, levels: int = 8) -> np.ndarray:
    """Cell ids of frames: (n, 84, 84) uint8 (or MinAtar's (n, C, 10, 10)) -> (n,) uint64.

    Args:
        frames: grayscale frames, or multi-channel grids (their cell is the grid of on-cells;
            ``pool`` and ``levels`` do not apply).
        pool: block size of the mean-pool (a divisor of 84).
        levels: gray levels after pooling (256 / levels values each).

    Returns:
        A 64-bit hash of each frame's quantised ``(84 / pool)^2`` block means; equal cells give
        equal ids (distinct cells collide with probability ~2^-64).
    """
    n = len(frames)
    if frames.ndim == 4:
        flat = (frames.reshape(n, -1) > 0).astype(np.uint64)
        return (flat * _WEIGHTS[: flat.shape[1]]).sum(axis=1, dtype=np.uint64)
    h, w = frames.shape[1:]
    if h % pool or w % pool:
        raise ValueError(f"pool must divide {h}, got {pool}")
    if not 1 <= levels <= 256:
        raise ValueError(f"levels must lie in 1..256, got {levels}")
    blocks = frames.reshape(n, h // pool, pool, w // pool, pool).mean(axis=(2, 4))
    quantised = np.minimum(blocks * (levels / 256.0), levels - 1).astype(np.uint64)
    flat = quantised.reshape(n, -1)
    return (flat * _WEIGHTS[: flat.shape[1]]).sum(axis=1, dtype=np.uint64)


def state_coverage(
    store: TransitionStore,
    *,
    budget: int | None = None,
    pool: int = 7,
    levels: int = 8,
    points: int = 100,
    batch: int = 50_000,
) -> dict[str, np.ndarray | float | int]:
    """Distinct cells (see the module doc) among the store's first rows, as a curve.

    Args:
        store: the store.
        budget: rows to measure (the first ``budget``; None: all). Give two stores the same
            budget to compare them.
        pool: block size of the cell's mean-pool.
        levels: gray levels of the cell.
        points: points of the returned curve.
        batch: rows read at a time.

    Returns:
        ``rows`` (points,) row counts and ``distinct_cells`` (points,) the coverage of the first
        that many rows; ``cells`` the coverage of all ``budget`` rows; ``cells_per_1k`` that per
        1,000 rows; ``budget``.
    """
    total = len(store) if budget is None else min(int(budget), len(store))
    if total < 1:
        raise ValueError("state_coverage needs at least one row")
    ids = np.concatenate(
        [
            frame_cells(store.gather_frames(np.arange(s, min(s + batch, total))), pool, levels)
            for s in range(0, total, batch)
        ]
    )
    _, first_seen = np.unique(ids, return_index=True)
    first_seen.sort()
    rows = np.unique(np.linspace(1, total, min(points, total)).round().astype(np.int64))
    distinct = np.searchsorted(first_seen, rows, side="left")  # first sightings before `rows`
    return {
        "rows": rows,
        "distinct_cells": distinct,
        "cells": int(len(first_seen)),
        "cells_per_1k": 1000.0 * len(first_seen) / total,
        "budget": total,
    }
