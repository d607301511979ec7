"""Probe results on disk: a run's ``probes.json`` (one entry per store and settings, written
atomically), and `probe_run`, which probes an encoder unless its file already holds that result
(what ``sgi-lab probe`` and an experiment's probe tasks do).

An entry (format 2) holds each state label's ``kind``, ``metric`` (``f1`` or ``r2``) and
``score``; F1 summaries over the classified labels (``overall``, ``across_categories``,
``categories``) and R^2 over the regressed ones (``r2``), never averaged together, with the
``headline`` naming which leads; the collapse diagnostic (``collapse``); and ``warnings`` with
``split.small_test`` when the test split holds under 1,000 rows. A format-1 entry (every label
classified) is read as it is and probed again by `probe_run`.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from sgi_lab.base.files import FolderLock, atomic_write_text
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import read_manifest
from sgi_lab.probes.encoder_probe import PROBES_FILE, ProbeEncoder, probe_encoder
from sgi_lab.probes.linear import ProbeSettings
from sgi_lab.probes.probe_data import FORMAT, file_stamp, probe_settings_key
from sgi_lab.runs.checkpoints import CHECKPOINT_RE

__all__ = [
    "entry_is_current",
    "find_result",
    "probe_done",
    "probe_run",
    "read_probes",
    "write_probes",
]


# The parts of an entry every reader looks into, and what each must be.
ENTRY_MAPPINGS = ("encoder", "store", "settings")
OPTIONAL_MAPPINGS = (
    "categories",
    "majority",
    "reward",
    "action",
    "split",
    "seconds",
    "random_init",
    "regression",
    "r2",
    "headline",
    "collapse",
)


def read_probes(path: str | os.PathLike, current_only: bool = True) -> list[dict[str, Any]]:
    """The entries of a probes file (a run folder's ``probes.json``, or the file); [] if none.

    The one reader of probe results (``sgi-lab probe`` and ``report``, notebooks, the explorer,
    studies), so that each of them:

    - skips a malformed entry (not a mapping, or a part that is not one), with a warning
      naming the file and the entry;
    - with ``current_only``, keeps only the entries of the run's current model
      (`entry_is_current`): a model trained again, or a run started over, leaves no stale
      result behind;
    - gets each entry's ``unfinished`` flag: probed from a run that had not finished
      (``--allow-unfinished``, a checkpoint's weights in the run's own probes file).
    """
    path = Path(path)
    if path.is_dir():
        path = path / PROBES_FILE
    return [
        {**entry, "unfinished": _unfinished(entry, path)}
        for entry in _valid_entries(path)
        if not current_only or entry_is_current(entry, path)
    ]


def _valid_entries(path: Path) -> list[dict[str, Any]]:
    """A probes file's well-formed entries, as written (a malformed one warned of, skipped)."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    entries = payload.get("entries") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        return []
    kept = []
    for i, entry in enumerate(entries):
        problem = _entry_problem(entry)
        if problem:
            warnings.warn(f"{path}: entry {i}: {problem}; skipped", stacklevel=3)
            continue
        kept.append(entry)
    return kept


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return f"a {type(entry).__name__}, not a mapping"
    for key in ENTRY_MAPPINGS:
        if not isinstance(entry.get(key), dict):
            return f"{key!r} is {_what(entry.get(key))}, not a mapping"
    for key in OPTIONAL_MAPPINGS:
        if entry.get(key) is not None and not isinstance(entry[key], dict):
            return f"{key!r} is {_what(entry[key])}, not a mapping"
    stamp = entry["encoder"].get("stamp")
    if stamp is not None and not isinstance(stamp, dict):
        return f"'encoder.stamp' is {_what(stamp)}, not a mapping"
    return None


def _what(value: Any) -> str:
    return "missing" if value is None else f"a {type(value).__name__}"


def _stamped_file(stamp: dict[str, Any], probes_file: Path) -> Path | None:
    """The model file an entry's stamp names, found beside the probes file or in its run's
    ``checkpoints/``; None when it is in neither."""
    name = stamp.get("name")
    if not isinstance(name, str) or Path(name).name != name:
        return None
    for candidate in (probes_file.parent / name, probes_file.parent / "checkpoints" / name):
        if candidate.is_file():
            return candidate
    return None


def entry_is_current(entry: dict[str, Any], probes_file: str | os.PathLike) -> bool:
    """Whether an entry was made from the run's current model (by its encoder stamp).

    - A random encoder's entry (no stamp), or one stamped only by a step, is current.
    - In a run's ``probes.json``, once the run's ``model.pt`` exists only an entry of that very
      file (name, size, modification time) is current: an entry of a checkpoint probed before
      the run finished, or of a model trained over since, is stale.
    - Otherwise the stamped file must be there unchanged; a checkpoint pruned since (its
      ``probes_ckpt_N.json`` stays, a probe curve's point) is kept, a missing ``model.pt``
      (the run started over) is not.
    """
    probes_file = Path(probes_file)
    stamp = entry.get("encoder", {}).get("stamp")
    if not isinstance(stamp, dict) or "name" not in stamp:
        return True
    model = probes_file.parent / "model.pt"
    if probes_file.name == PROBES_FILE and model.is_file():
        return stamp == file_stamp(model)
    found = _stamped_file(stamp, probes_file)
    if found is None:
        return stamp.get("name") != "model.pt"
    return stamp == file_stamp(found)


def _unfinished(entry: dict[str, Any], probes_file: Path) -> bool:
    """Recorded as unfinished, or (an entry written before the flag) a checkpoint's weights in
    a run's own probes file."""
    encoder = entry.get("encoder", {})
    if encoder.get("unfinished"):
        return True
    stamp = encoder.get("stamp")
    name = stamp.get("name") if isinstance(stamp, dict) else None
    return (
        probes_file.name == PROBES_FILE
        and isinstance(name, str)
        and CHECKPOINT_RE.search(name) is not None
    )


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
            entry["store"].get("fingerprint") == fingerprint
            and entry.get("settings") == settings
            and entry.get("encoder", {}).get("stamp") == stamp
        ):
            return entry
    return None


# Seconds a probe waits for its folder's lock before refusing: another probe's read-modify-write
# takes milliseconds; a training run holding the folder (a live run probed with
# --allow-unfinished) may hold it for hours, and is named in the refusal.
PROBE_LOCK_WAIT_S = 60.0


def _settings_identity(settings: dict[str, Any]) -> str:
    """The settings as the entry they make: a key an older entry lacks (written before the
    readout and features were chosen) reads as its default, so that a new result of the same
    probe replaces the old entry instead of standing beside it."""
    return json.dumps({**ProbeSettings().to_json(), **settings}, sort_keys=True)


def write_probes(path: str | os.PathLike, result: dict[str, Any]) -> Path:
    """Add ``result`` to the probes file at ``path`` (atomically), replacing an entry made on
    the same store with the same settings (an older entry without a readout or features counts
    as least squares on renormalized maps). Returns the path.

    The read-modify-write holds the folder's `FolderLock`, so two probes of one run (two
    experiment tasks under ``--max-parallel 2``) both keep their entries.

    Raises:
        FolderLockedError: another process held the folder for over `PROBE_LOCK_WAIT_S`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(path.parent, f"the probe results {path.name}", wait=PROBE_LOCK_WAIT_S)
    try:
        same = (result["store"]["fingerprint"], _settings_identity(result["settings"]))
        entries = [
            e
            for e in _valid_entries(path)
            if (e["store"].get("fingerprint"), _settings_identity(e["settings"])) != same
        ]
        payload = {"format": FORMAT, "entries": [*entries, result]}
        atomic_write_text(path, json.dumps(payload, indent=2, allow_nan=False) + "\n")
    finally:
        lock.release()
    return path


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
    readout: str = "lstsq",
    features: str = "renormalized",
) -> bool:
    """Whether ``folder/probes.json`` holds the result `probe_run` would compute for this store
    with `ProbeSettings` of ``readout`` and ``features`` (what an experiment's probe task
    checks): ``folder`` is a pretraining run (its ``model.pt``) or a random encoder's folder."""

    manifest = read_manifest(store)
    if manifest is None or not manifest.complete:
        return False
    fingerprint = manifest.fingerprint or manifest.content_fingerprint()
    settings = ProbeSettings(readout=readout, features=features)
    key = probe_settings_key(settings, split_seed, max_frames, random_baseline_seed)
    stamp = file_stamp(Path(folder) / "model.pt")
    return find_result(folder, fingerprint, key, stamp) is not None
