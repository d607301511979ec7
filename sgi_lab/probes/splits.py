"""A probe's split of a store: episodes into train, validation and test (no episode in two), the
rows of each (frame stacks seen in training left out of the test, AtariARI's
``remove_duplicates``), and the record of what each split holds."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from sgi_lab.data.store import TransitionStore
from sgi_lab.probes.kinds import MIN_TEST_ROWS
from sgi_lab.probes.probe_data import SPLIT_FRACTIONS, ProbeInputError

__all__ = [
    "positions_without_seen_states",
    "split_episodes",
    "split_record",
    "split_rows",
    "stack_key",
    "subsample",
]


def split_episodes(
    store: TransitionStore, seed: int = 0, fractions: tuple[float, float, float] = SPLIT_FRACTIONS
) -> dict[str, np.ndarray]:
    """Episodes shuffled (seeded) and dealt to train/val/test until each holds its fraction of
    the rows; no episode is in two splits.

    Returns:
        ``{"train": rows, "val": rows, "test": rows}``, each sorted.

    Raises:
        ProbeInputError: fewer than 3 episodes (a split would be empty).
    """
    count = store.num_episodes
    if count < 3:
        raise ProbeInputError(
            f"{store.path}: {count} episode(s); the probes split episodes into train, "
            "validation and test, so at least 3 are needed (collect more steps)"
        )
    order = np.random.default_rng(seed).permutation(count)
    lengths = store.episode_lengths()[order]
    ends = np.cumsum(lengths) / lengths.sum()
    # Episode k goes to the first split whose cumulative fraction its midpoint falls under,
    # keeping at least one episode in each.
    bounds = np.cumsum(fractions)
    mid = ends - lengths / lengths.sum() / 2
    which = np.searchsorted(bounds, mid, side="right").clip(0, 2)
    which[0], which[-1] = 0, 2
    if not (which == 1).any():
        which[1] = 1
    splits = {}
    for k, name in enumerate(("train", "val", "test")):
        episodes = order[which == k]
        rows = [np.arange(store.episode_starts[e], store.episode_ends[e] + 1) for e in episodes]
        splits[name] = np.sort(np.concatenate(rows))
    return splits


def _limit(rows: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    if len(rows) <= count:
        return rows
    return np.sort(rng.choice(rows, size=count, replace=False))


def split_rows(
    store: TransitionStore, split_seed: int = 0, max_frames: int | None = None
) -> dict[str, Any]:
    """The rows a probe of ``store`` would split into, its test split after de-duplication, as
    `probe_encoder` records them under ``split``, without an encoder (``sgi-lab probe --data
    STORE --split-rows``: is a probe store big enough?). ``small_test``: under
    `MIN_TEST_ROWS` test rows (0 when every test state also appears in training)."""
    rng = np.random.default_rng(split_seed)
    split = subsample(split_episodes(store, split_seed), max_frames, rng)
    rows = np.concatenate([split["train"], split["val"], split["test"]])
    keys = [
        stack_key(s) for i in range(0, len(rows), 1024) for s in store.stack(rows[i : i + 1024])
    ]
    try:
        positions, duplicates = positions_without_seen_states(split, keys, store)
    except ProbeInputError:  # every test state seen in training: no test row at all
        positions = {"train": split["train"], "val": split["val"], "test": np.zeros(0, int)}
        duplicates = len(split["test"])
    record = split_record(split, positions, duplicates, store)
    return {**record, "small_test": record["rows"]["test"] < MIN_TEST_ROWS}


def stack_key(stack: np.ndarray) -> bytes:
    """A frame stack's identity: two rows with the same key show the encoder the same input."""
    return hashlib.blake2b(stack.tobytes(), digest_size=12).digest()


def subsample(
    split: dict[str, np.ndarray], max_frames: int | None, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Each split's rows subsampled in proportion so that all hold about ``max_frames``."""
    if max_frames is None:
        return split
    total = sum(len(r) for r in split.values())
    return {k: _limit(r, max(1, round(max_frames * len(r) / total)), rng) for k, r in split.items()}


def positions_without_seen_states(
    split: dict[str, np.ndarray], keys: list[bytes], store: TransitionStore
) -> tuple[dict[str, np.ndarray], int]:
    """Where each split's rows sit among the features (train, then val, then test), the test
    rows whose frame stack training or validation also holds left out (AtariARI's
    ``remove_duplicates``); and how many were left out.

    Raises:
        ProbeInputError: every test state also appears in training.
    """
    positions, offset = {}, 0
    for name in ("train", "val", "test"):
        positions[name] = np.arange(offset, offset + len(split[name]))
        offset += len(split[name])
    seen = set(keys[: len(split["train"]) + len(split["val"])])
    unseen = np.array([keys[p] not in seen for p in positions["test"]], dtype=bool)
    positions["test"] = positions["test"][unseen]
    if len(positions["test"]) == 0:
        raise ProbeInputError(f"{store.path}: every test state also appears in training")
    return positions, int((~unseen).sum())


def split_record(
    split: dict[str, np.ndarray],
    positions: dict[str, np.ndarray],
    duplicates: int,
    store: TransitionStore,
) -> dict[str, Any]:
    """What a result records of its split: rows and episodes per split, test rows left out."""
    return {
        "rows": {k: int(len(v)) for k, v in positions.items()},
        "episodes": {k: int(len(np.unique(store.episode_index[r]))) for k, r in split.items()},
        "test_duplicates_removed": duplicates,
    }
