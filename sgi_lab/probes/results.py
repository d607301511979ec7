"""Probe results on disk: a run's ``probes.json`` (one entry per store and settings, written
atomically), and `probe_run`, which probes an encoder unless its file already holds that result
(what ``sgi-lab probe`` and an experiment's probe tasks do).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sgi_lab.base.files import FolderLock, atomic_write_text
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import read_manifest
from sgi_lab.probes.linear import ProbeSettings
from sgi_lab.probes.probe import (
    FORMAT,
    PROBES_FILE,
    ProbeEncoder,
    file_stamp,
    probe_encoder,
    probe_settings_key,
)

__all__ = ["find_result", "probe_done", "probe_run", "read_probes", "write_probes"]


def read_probes(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The entries of a probes file (a run folder's ``probes.json``, or the file); [] if none."""
    path = Path(path)
    if path.is_dir():
        path = path / PROBES_FILE
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    entries = payload.get("entries") if isinstance(payload, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def find_result(
    path: str | os.PathLike,
    fingerprint: str,
    settings: dict[str, Any],
    stamp: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The entry of a probes file made on the store ``fingerprint`` with ``settings`` from the
    encoder file ``stamp`` (None: a random encoder), or None."""
    for entry in read_probes(path):
        if (
            entry.get("store", {}).get("fingerprint") == fingerprint
            and entry.get("settings") == settings
            and entry.get("encoder", {}).get("stamp") == stamp
        ):
            return entry
    return None


# Seconds a probe waits for its folder's lock before refusing: another probe's read-modify-write
# takes milliseconds; a training run holding the folder (a live run probed with
# --allow-unfinished) may hold it for hours, and is named in the refusal.
PROBE_LOCK_WAIT_S = 60.0


def write_probes(path: str | os.PathLike, result: dict[str, Any]) -> Path:
    """Add ``result`` to the probes file at ``path`` (atomically), replacing an entry made on
    the same store with the same settings. Returns the path.

    The read-modify-write holds the folder's `FolderLock`, so two probes of one run (two
    experiment tasks under ``--max-parallel 2``) both keep their entries.

    Raises:
        FolderLockedError: another process held the folder for over `PROBE_LOCK_WAIT_S`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(path.parent, f"the probe results {path.name}", wait=PROBE_LOCK_WAIT_S)
    try:
        same = (result["store"]["fingerprint"], json.dumps(result["settings"], sort_keys=True))
        entries = [
            e
            for e in read_probes(path)
            if (_fingerprint(e), json.dumps(e.get("settings"), sort_keys=True)) != same
        ]
        payload = {"format": FORMAT, "entries": [*entries, result]}
        atomic_write_text(path, json.dumps(payload, indent=2, allow_nan=False) + "\n")
    finally:
        lock.release()
    return path


def _fingerprint(entry: dict[str, Any]) -> Any:
    store = entry.get("store")
    return store.get("fingerprint") if isinstance(store, dict) else None


def probe_run(
    encoder: ProbeEncoder,
    store: TransitionStore,
    settings: ProbeSettings | None = None,
    *,
    split_seed: int = 0,
    max_frames: int | None = None,
    random_baseline_seed: int | None = 0,
    state_probes: bool = True,
    overwrite: bool = False,
    **kwargs: Any,
) -> tuple[dict[str, Any], bool]:
    """`probe_encoder` + `write_probes` into ``encoder.out``, skipped when that file already
    holds this store's result with these settings (unless ``overwrite``).

    Returns:
        (the result, whether it was computed now).
    """
    settings = settings or ProbeSettings()
    key = probe_settings_key(settings, split_seed, max_frames, random_baseline_seed, state_probes)
    if not overwrite:
        done = find_result(encoder.out, store.fingerprint, key, encoder.stamp)
        if done is not None:
            return done, False
    result = probe_encoder(
        encoder,
        store,
        settings,
        split_seed=split_seed,
        max_frames=max_frames,
        random_baseline_seed=random_baseline_seed,
        state_probes=state_probes,
        **kwargs,
    )
    write_probes(encoder.out, result)
    return result, True


def probe_done(
    folder: str | os.PathLike,
    store: str | os.PathLike,
    split_seed: int = 0,
    max_frames: int | None = None,
    random_baseline_seed: int | None = 0,
) -> bool:
    """Whether ``folder/probes.json`` holds the result `probe_run` would compute for this store
    with the default `ProbeSettings` (what an experiment's probe task checks): ``folder`` is a
    pretraining run (its ``model.pt``) or a random encoder's folder."""

    manifest = read_manifest(store)
    if manifest is None or not manifest.complete:
        return False
    fingerprint = manifest.fingerprint or manifest.content_fingerprint()
    key = probe_settings_key(ProbeSettings(), split_seed, max_frames, random_baseline_seed)
    stamp = file_stamp(Path(folder) / "model.pt")
    return find_result(folder, fingerprint, key, stamp) is not None
