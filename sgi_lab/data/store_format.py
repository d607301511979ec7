"""The on-disk format of a transition store: its fields, chunk files, manifest and checksums.

A store is one folder: ``manifest.json`` and ``chunks/<field>_<index>.npy`` for every field of
`FIELDS` (its files: docs/datasets.md). Row ``t`` holds the newest frame of state
``s_t``, the action ``a_t`` taken there, the reward ``r_t`` it earned and ``terminal_t`` = the
transition ended the episode for learning (game over, or a life loss when the data was recorded
that way). As in Dopamine, the observation after a terminal transition is not stored.
``first_t`` marks frame discontinuities (a reset): a 4-frame stack for row ``t`` is rebuilt from
rows ``t-3..t`` and is zero-padded before the episode's first row, so no stack ever crosses an
episode boundary. A life-loss terminal does *not* reset the game, so the frames after it
continue the same episode (``first`` stays 0), exactly as the environment's own frame stack
does.

The manifest (`StoreManifest`) holds a checksum of every chunk and a content ``fingerprint`` of
the store, which a run records (it survives moving the folder). `sgi_lab.data.store` reads a
store, `sgi_lab.data.store_writer` writes one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.files import atomic_write, file_digest
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec, spec_from_json

FORMAT_VERSION = 1
# An Atari store's frame row; a store's own is its manifest's `StoreManifest.observation_spec`.
FRAME_SHAPE = ATARI_SPEC.frame_shape
DEFAULT_CHUNK_SIZE = 100_000
MANIFEST = "manifest.json"
PARTIAL_SUFFIX = ".partial"
# Sticky-action probability of a data source recorded elsewhere with a fixed protocol, for
# stores whose manifest predates the field: DQN Replay ran ALE with repeat probability 0.25
# (Agarwal et al., 2020, Dopamine's default), unlike Atari 100k (0).
SOURCE_STICKY_ACTION_PROB = {"dqn_replay": 0.25}
# The env protocols a store's frames can come from, `sgi_lab.envs.ENV_PROTOCOLS`: Atari's
# `sgi_lab.envs.atari.PREPROCESSING` and MinAtar's (not imported: reading a store needs no
# emulator). Stores whose manifest predates the field read as "dopamine", the only protocol
# sgi-lab's collectors and the DQN Replay data had.
ENV_PROTOCOLS = ("dopamine", "rlpyt", "minatar")
DEFAULT_ENV_PROTOCOL = "dopamine"
# Frames from no env of sgi-lab's (a Minari dataset of another environment, imported by
# `sgi_lab.data.minari_exchange`): a store may hold them, no env plays them.
EXTERNAL_PROTOCOL = "external"
STORE_ENV_PROTOCOLS = (*ENV_PROTOCOLS, EXTERNAL_PROTOCOL)

# name -> (dtype, per-row shape)
FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "frame": ("uint8", FRAME_SHAPE),
    "action": ("int32", ()),
    "reward": ("float32", ()),
    "terminal": ("uint8", ()),
    "first": ("uint8", ()),
}
SMALL_FIELDS = ("action", "reward", "terminal", "first")
RAM_SIZE = 128
# Fields a store may hold beside FIELDS (its manifest's ``fields`` says which): ``ram``, the
# console's 128-byte RAM in state ``s_t`` (what ALE's getRAM() returns there), the labels of
# `sgi_lab.probes`. Stores without them open as before.
# ``labels``: a game's own state in ``s_t`` as integers (MinAtar's, `sgi_lab.envs.minatar.
# LABEL_NAMES`), one column per name of the manifest's ``label_names``; its width is the
# manifest's, not this table's.
OPTIONAL_FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "ram": ("uint8", (RAM_SIZE,)),
    "labels": ("int16", (0,)),
}
ALL_FIELDS = {**FIELDS, **OPTIONAL_FIELDS}


class StoreError(SgiLabError, RuntimeError):
    """A store on disk is missing, incomplete or inconsistent with its manifest."""


class StoreFolderError(SgiLabError, FileExistsError):
    """A folder a store would be written to holds something else: nothing in it is touched."""


def new_hash() -> Any:
    """The hash of every chunk checksum and store fingerprint (blake2b-128)."""
    return hashlib.blake2b(digest_size=16)


def file_checksum(path: Path, block: int = 16 << 20) -> str:
    """The checksum the manifest records for a chunk file (blake2b-128 of its bytes)."""
    return file_digest(path, new_hash(), block)


def chunk_path(root: Path, field_name: str, index: int) -> Path:
    return root / "chunks" / f"{field_name}_{index:05d}.npy"


def write_manifest(path: Path, payload: dict) -> None:
    """Write a manifest's JSON atomically (`sgi_lab.base.files.atomic_write`)."""
    atomic_write(path, lambda fh: json.dump(payload, fh, indent=2, sort_keys=True))


@dataclass
class StoreManifest:
    """The JSON manifest of a store (what ``manifest.json`` holds)."""

    game: str
    source: str
    params: dict[str, Any] = field(default_factory=dict)
    num_transitions: int = 0
    num_episodes: int = 0
    num_terminals: int = 0
    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunks: list[int] = field(default_factory=list)  # rows per chunk, in order
    rewards_clipped: bool = False
    num_actions: int | None = None
    # Probability the emulator repeated the previous action (ALE sticky actions) when the data
    # was recorded: 0 for Atari 100k-style collection, 0.25 for DQN Replay; None: not recorded
    # (stores written before this field existed).
    sticky_action_prob: float | None = None
    # The Atari env that made the frames (make_env's ``preprocessing``): "dopamine"
    # (gymnasium's AtariPreprocessing, also DQN Replay's) or "rlpyt" (the authors' env,
    # docs/paper_vs_code.md rows 16-21). Not in the fingerprint: the frames already differ.
    env_protocol: str = DEFAULT_ENV_PROTOCOL
    # What one observation is (`sgi_lab.envs.spec.ObservationSpec.to_json`); None: a store
    # older than the field, all Atari (`ATARI_SPEC`). Its frame row is ``fields["frame"]``.
    observation: dict[str, Any] | None = None
    # The names of the ``labels`` field's columns, when the store has it.
    label_names: list[str] | None = None
    format_version: int = FORMAT_VERSION
    created: str = ""
    complete: bool = False
    checksums: list[dict[str, str]] = field(default_factory=list)  # per chunk: field -> hash
    fingerprint: str | None = None  # content identity, set when the store is complete
    resume_state: dict[str, Any] | None = None  # a writer's state after its last chunk
    fields: dict[str, dict] = field(
        default_factory=lambda: {k: {"dtype": d, "shape": list(s)} for k, (d, s) in FIELDS.items()}
    )

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @property
    def observation_spec(self) -> ObservationSpec:
        """What one observation of this store is (Atari's for stores older than the field)."""
        return ATARI_SPEC if self.observation is None else spec_from_json(self.observation)

    def field_specs(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """``{name: (dtype, row shape)}`` of the fields this store holds, FIELDS first; the
        frame row is the observation spec's, the labels row as wide as ``label_names``."""
        specs = {k: v for k, v in ALL_FIELDS.items() if k in self.fields}
        specs["frame"] = (ALL_FIELDS["frame"][0], self.observation_spec.frame_shape)
        if "labels" in specs:
            specs["labels"] = (specs["labels"][0], (len(self.label_names or ()),))
        return specs

    def content_fingerprint(self) -> str:
        """A hash of what the store holds; the same data gives the same value wherever it is."""
        identity = {
            "game": self.game,
            "source": self.source,
            "params": self.params,
            "chunks": self.chunks,
            "checksums": self.checksums,
        }
        digest = new_hash()
        digest.update(json.dumps(identity, sort_keys=True, default=str).encode())
        return digest.hexdigest()

    @classmethod
    def from_json(cls, payload: Any, path: Path) -> StoreManifest:
        if not isinstance(payload, dict):
            raise StoreError(
                f"{path}: manifest must be a JSON object, got {type(payload).__name__}"
            )
        version = payload.get("format_version")
        if version != FORMAT_VERSION:
            raise StoreError(
                f"{path}: unknown store format version {version!r} "
                f"(this sgi-lab reads version {FORMAT_VERSION})"
            )
        known = set(cls.__dataclass_fields__)
        unknown = set(payload) - known
        if unknown:
            raise StoreError(f"{path}: unexpected manifest keys {sorted(unknown)}")
        fields = payload.get("fields")
        if fields is not None and (
            not isinstance(fields, dict) or not set(FIELDS) <= set(fields) <= set(ALL_FIELDS)
        ):
            raise StoreError(
                f"{path}: 'fields' must name {sorted(FIELDS)} and optionally "
                f"{sorted(OPTIONAL_FIELDS)}, got {fields!r}"
            )
        missing = {"game", "source", "chunks", "num_transitions"} - set(payload)
        if missing:
            raise StoreError(f"{path}: manifest lacks keys {sorted(missing)}")
        chunks = payload["chunks"]
        if not isinstance(chunks, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in chunks
        ):
            raise StoreError(f"{path}: 'chunks' must be a list of row counts")
        for key in ("num_transitions", "num_episodes", "num_terminals", "chunk_size"):
            value = payload.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise StoreError(f"{path}: {key!r} must be a non-negative integer, got {value!r}")
        sticky = payload.get("sticky_action_prob")  # absent in older stores: None, unknown
        if sticky is not None and (
            isinstance(sticky, bool) or not isinstance(sticky, (int, float)) or not 0 <= sticky <= 1
        ):
            raise StoreError(f"{path}: 'sticky_action_prob' must be in [0, 1], got {sticky!r}")
        protocol = payload.get("env_protocol", DEFAULT_ENV_PROTOCOL)  # absent in older stores
        if protocol not in STORE_ENV_PROTOCOLS:
            raise StoreError(
                f"{path}: 'env_protocol' must be one of {', '.join(STORE_ENV_PROTOCOLS)}, "
                f"got {protocol!r}"
            )
        _check_observation(payload, path)
        return cls(**payload)


def _check_observation(payload: dict, path: Path) -> None:
    """The observation spec, the frame row it implies and the label columns agree."""
    observation = payload.get("observation")
    spec = ATARI_SPEC
    if observation is not None:
        try:
            spec = spec_from_json(observation, "'observation'")
        except ValueError as exc:
            raise StoreError(f"{path}: {exc}") from None
    frame = (payload.get("fields") or {}).get("frame")
    if isinstance(frame, dict) and frame.get("shape") not in (None, list(spec.frame_shape)):
        raise StoreError(
            f"{path}: fields['frame'] has shape {frame.get('shape')} but the observation spec "
            f"{spec} stores frames of shape {list(spec.frame_shape)}"
        )
    names = payload.get("label_names")
    has_labels = "labels" in (payload.get("fields") or {})
    if names is not None and not (
        isinstance(names, list) and all(isinstance(n, str) for n in names)
    ):
        raise StoreError(f"{path}: 'label_names' must be a list of strings, got {names!r}")
    if has_labels and not names:
        raise StoreError(f"{path}: a 'labels' field needs 'label_names'")


def read_manifest(path: str | os.PathLike) -> StoreManifest | None:
    """The manifest of a store folder when it is one of ours (complete or not), else None."""
    manifest_path = Path(path) / MANIFEST
    try:
        return StoreManifest.from_json(json.loads(manifest_path.read_text()), manifest_path)
    except (OSError, ValueError, StoreError, TypeError):
        return None
