"""What a probe reads and whether it may: the store checked for probing (frames, episodes, labels
for its game), the key of a probe's settings and data (a result made otherwise is probed again),
the provenance stamp of a file, and the one error for input a probe cannot use."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from sgi_lab.base.errors import SgiLabError
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import StoreError
from sgi_lab.probes.atariari import annotations
from sgi_lab.probes.linear import (
    ProbeSettings,
)

__all__ = [
    "FORMAT",
    "NON_RANDOM_SOURCES",
    "SPLIT_FRACTIONS",
    "ProbeInputError",
    "check_probe_data",
    "check_probe_store",
    "check_store",
    "file_stamp",
    "probe_data_key",
    "probe_settings_key",
    "store_claim_problem",
    "store_record",
]

FORMAT = 3
"""2 (2026-11-29): labels probed by their kind (`sgi_lab.probes.kinds`), the collapse
diagnostic, the small-test flags; 3 (2026-11-29): a feature constant in training reads 0 on
every row (`sgi_lab.probes.linear.standardization`), not its value over 1e-6. A result of an
older format is probed again."""


SPLIT_FRACTIONS = (0.7, 0.1, 0.2)


NON_RANDOM_SOURCES = ("exploratory", "dqn_replay")
"""Store sources (``manifest.source``) recorded from a policy worth imitating: the action probe
runs on these only. The Random collector's actions are not independent of the frames: each is
held for Geometric(1/3) steps, so the previous action, visible as motion in the frame stack,
repeats with probability 2/3 + 1/3 * 1/A (0.72 for Pong's 6 actions; 0.721 measured on a
50k-step Random Pong store). A probe of them would measure how well the encoder shows that
motion, not a policy's choice, which is the question the action probe asks. (Uniform random
actions are also inverse dynamics' best case: every action equally often, each visible in its
effect on the next frames: not a case with nothing to learn.)"""


class ProbeInputError(SgiLabError, ValueError):
    """A run, file or store that cannot be probed; the message names it."""


def file_stamp(path: str | os.PathLike) -> dict[str, Any] | None:
    """``{"name", "size", "mtime_ns"}`` of a model file (None if it does not exist)."""
    try:
        info = Path(path).stat()
    except OSError:
        return None
    return {"name": Path(path).name, "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def check_store(store: TransitionStore) -> None:
    """Refuse, naming it, a store the state probes cannot read: one without game-state labels
    (MinAtar's) whose game AtariARI does not annotate (`UnannotatedGameError`) or that holds no
    RAM (`ProbeInputError`)."""
    if store.has_labels:  # the game's own state per step (MinAtar): the labels themselves
        return
    annotations(store.game)  # UnannotatedGameError names the game
    if not store.has_ram:
        raise ProbeInputError(
            f"{store.path}: this store holds no RAM (source {store.manifest.source!r}, made "
            "before RAM was recorded or imported without it), so there are no state labels; "
            "collect it again with `sgi-lab collect ... --overwrite`, or probe reward and action "
            "only (--no-state-probes)"
        )


def store_record(store: TransitionStore) -> dict[str, Any]:
    """What a result records of the store it was probed on (its fingerprint finds it again)."""
    return {
        "path": str(store.path),
        "game": store.game,
        "source": store.manifest.source,
        "fingerprint": store.fingerprint,
        "transitions": len(store),
    }


def probe_settings_key(
    settings: ProbeSettings,
    split_seed: int,
    max_frames: int | None,
    baseline: int | None,
    state_probes: bool = True,
) -> dict[str, Any]:
    key = {
        **settings.to_json(),
        "split_seed": split_seed,
        "split_fractions": list(SPLIT_FRACTIONS),
        "max_frames": max_frames,
        "random_baseline_seed": baseline,
        "format": FORMAT,
    }
    if not state_probes:
        key["state_probes"] = False
    return key


def check_probe_store(
    store_path: str | os.PathLike,
    state_probes: bool = True,
    option: str = "--data",
    verify: bool = True,
) -> TransitionStore:
    """Open a store for probing, refusing (naming ``option``, the setting that named it: ``--data``,
    ``probe_data``, an experiment's ``data.NAME``) a store that is missing, damaged (its
    checksums and counts, `TransitionStore.verify`), whose manifest's claims its data belie
    (`store_claim_problem`), or (for the state probes) one without RAM or of an unannotated
    game."""
    try:
        store = TransitionStore(store_path)
    except StoreError as exc:
        raise ProbeInputError(f"{option}: {exc}") from exc
    problems = store.verify() if verify else []
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ProbeInputError(
            f"{option}: {store.path}: damaged store, refusing to probe it: {problems[0]}{more}; "
            f"sgi-lab info {store.path} --verify lists them"
        )
    claim = store_claim_problem(store)
    if claim:
        raise ProbeInputError(f"{option}: {store.path}: {claim}")
    if state_probes:
        check_store(store)
    return store


def check_probe_data(
    probe_data: str | os.PathLike, training: TransitionStore, option: str = "probe_data"
) -> tuple[TransitionStore, dict[str, str]]:
    """The probe store of a pretraining run (``probe_every``), checked before the run starts:
    `check_probe_store` (named ``option``), of the game the run trains on, and a warning when
    it is the training data itself (the probes would read states the encoder trained on).

    Returns:
        (the store, ``{"probe_data": its fingerprint}``): the identity to record with the run's
        inputs (`sgi_lab.runs.folder.RunDir.open`), so that a resume on another store at the
        same path (one curve from two stores) is refused naming it.

    Raises:
        ProbeInputError: naming ``option``: a store that cannot be probed, or of another game.
    """
    store = check_probe_store(probe_data, option=option)
    if store.game != training.game:
        raise ProbeInputError(
            f"{option}: {store.path} holds {store.game} frames, but the run trains on "
            f"{training.game} ({training.path}); probe a store of the same game"
        )
    if store.fingerprint == training.fingerprint:
        warnings.warn(
            f"{option}: {store.path} is the training data itself: the probes read states the "
            "encoder trained on (a held-out store of the same game says more)",
            stacklevel=2,
        )
    return store, {probe_data_key(option): store.fingerprint}


def probe_data_key(option: str = "probe_data") -> str:
    """The name a probe store's fingerprint goes under in a run's inputs."""
    return option.lstrip("-").replace("-", "_")


def store_claim_problem(store: TransitionStore) -> str | None:
    """What a store's manifest claims that its data or its game belie, or None: the recorded
    actions must fit the manifest's action count, and that count must be the game's (its
    minimal action set, or 18 when recorded with the full one). A game edited into the manifest
    of another game's frames usually fails one of these. Games the ALE does not know (MinAtar
    stores) get the first check only."""
    manifest = store.manifest
    claimed = store.num_actions
    largest = int(store.actions.max()) if len(store) else -1
    if largest >= claimed:
        return (
            f"the data hold action {largest}, but the manifest says {claimed} action(s): the "
            "manifest does not describe these frames"
        )
    expected = _game_action_counts(manifest.game, bool(manifest.params.get("full_action_space")))
    if expected is not None and manifest.num_actions is not None and claimed not in expected:
        return (
            f"the manifest says {claimed} actions, but {manifest.game} has "
            f"{' or '.join(map(str, expected))}: the manifest's game or action count is wrong"
        )
    return None


def _game_action_counts(game: str, full_action_space: bool) -> tuple[int, ...] | None:
    """The action counts a store of ``game`` may hold; None when the ALE does not know it."""
    # lazy: gymnasium and ale-py load only when a store is checked (an Atari game's count)
    from sgi_lab.envs.atari import num_actions

    try:
        minimal = num_actions(game)
    except Exception:  # an unknown or MinAtar game, or no ALE here: nothing to compare with
        return None
    return (18,) if full_action_space else (minimal,)
