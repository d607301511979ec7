"""Transition stores to and from Minari datasets (Farama's offline-RL format), lossless.

`export_minari` writes a store as a Minari dataset folder (``OUT/data/metadata.json`` and
``OUT/data/main_data.hdf5``, what ``minari.load_dataset`` finds under
``$MINARI_DATASETS_PATH/<dataset id>``): one Minari episode per store episode (the rows from one
``first`` flag to the next), frames as raw uint8 arrays (never JPEG: Minari JPEG-encodes image
spaces unless told not to), actions, rewards as stored (float32), ``terminations`` = the
store's ``terminal`` and ``truncations`` true on the last step of an episode that ends without
one; the optional ``ram`` and ``labels`` fields go to ``infos``. The store's whole manifest
(env protocol, sticky actions, observation spec, label names, fingerprint...) is carried in the
dataset's metadata under ``sgi_lab_manifest``.

A store keeps no observation after an episode's last step (as Dopamine's replay); Minari's
episodes hold one more observation than actions, so that place holds a copy of the last stored
frame (the metadata's ``sgi_lab_final_observation`` says so).

`import_minari` reads any Minari dataset with image or grid observations (a ``Box`` of uint8
or bool, two or three dimensions, ``Discrete`` actions) into a store. A dataset this module
wrote comes back bit for bit: the same chunk files and the same manifest. Another dataset
(written by Minari's own ``DataCollector``, say) becomes a store of source ``minari``: each
episode's observations but the last, bool grids scaled to 0/255 (the encoders read uint8 /
255), channels moved first, ``terminal`` = ``terminations``.

Minari is an optional extra (``pip install 'minari[hdf5]'``, sgi-lab's ``minari`` extra).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.files import atomic_folder
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import (
    EXTERNAL_PROTOCOL,
    StoreFolderError,
    StoreManifest,
)
from sgi_lab.data.store_writer import TransitionStoreWriter
from sgi_lab.envs.minatar import is_minatar
from sgi_lab.envs.spec import ObservationSpec

__all__ = [
    "MANIFEST_KEY",
    "MinariMissingError",
    "default_dataset_id",
    "export_minari",
    "import_minari",
]

MANIFEST_KEY = "sgi_lab_manifest"
FINAL_OBSERVATION_KEY = "sgi_lab_final_observation"
FINAL_OBSERVATION = (
    "a copy of the episode's last observation: the store does not keep the observation after "
    "an episode's last step"
)
# Frames written per update of the dataset file: bounds memory on stores larger than RAM.
BATCH_BYTES = 64 << 20


class MinariMissingError(SgiLabError, ImportError):
    """Minari (an optional extra) is not installed."""


def _minari() -> Any:
    """The ``minari`` package, or a one-line error saying how to install it."""
    try:
        import minari  # noqa: F401  (optional extra)
        from minari.dataset._storages import hdf5_storage  # noqa: F401  (needs h5py)
    except ImportError as exc:
        raise MinariMissingError(
            f"Minari is not installed ({exc}): pip install 'minari[hdf5]' "
            "(sgi-lab's extra: pip install -e '.[minari]')"
        ) from None
    return minari


def default_dataset_id(manifest: StoreManifest) -> str:
    """``sgi-lab/<game>/<source>-v0``, e.g. ``sgi-lab/minatar-breakout/random-v0``."""
    game = "".join(c if c.isalnum() or c in "-_" else "-" for c in manifest.game.lower())
    return f"sgi-lab/{game.strip('-')}/{manifest.source}-v0"


def _target(out: Path, what: str) -> None:
    """``out`` may be written: missing or an empty folder; else nothing is touched."""
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise StoreFolderError(f"{out} exists and is not empty; {what} into a new folder")


def _episode_rows(store: TransitionStore) -> Iterator[np.ndarray]:
    for start, end in zip(store.episode_starts, store.episode_ends):
        yield np.arange(int(start), int(end) + 1)


def _episode_buffer(store: TransitionStore, rows: np.ndarray) -> Any:
    from minari.data_collector import EpisodeBuffer  # optional extra, checked by _minari

    def with_last(array: np.ndarray) -> np.ndarray:  # one more row than actions
        return np.concatenate([array, array[-1:]])

    terminal = store.terminals[rows]
    truncated = np.zeros(len(rows), dtype=bool)
    truncated[-1] = not terminal[-1]
    infos = {}
    if store.has_ram:
        infos["ram"] = with_last(store.gather_ram(rows))
    if store.has_labels:
        infos["labels"] = with_last(store.gather_labels(rows))
    return EpisodeBuffer(
        observations=with_last(store.gather_frames(rows)),
        actions=store.actions[rows],
        rewards=store.rewards[rows],
        terminations=terminal,
        truncations=truncated,
        infos=infos or None,
    )


def export_minari(
    store: str | os.PathLike | TransitionStore,
    out: str | os.PathLike,
    dataset_id: str | None = None,
    description: str | None = None,
) -> Path:
    """Write ``store`` as a Minari dataset folder ``out`` (lossless; the module says how).

    Args:
        store: a store folder (or an open store).
        out: a new (or empty) folder: the dataset folder, holding ``data/``; written under a
            temporary name beside it and renamed when complete.
        dataset_id: Minari's id (default `default_dataset_id`).
        description: the dataset's description (default: what the store is).

    Returns:
        ``out``.

    Raises:
        StoreFolderError: ``out`` exists and is not empty.
        MinariMissingError: Minari is not installed.
    """
    minari = _minari()
    import gymnasium as gym
    from minari.dataset.minari_storage import MinariStorage

    store = store if isinstance(store, TransitionStore) else TransitionStore(store)
    out = Path(out)
    _target(out, "export")
    m = store.manifest
    dataset_id = dataset_id or default_dataset_id(m)
    # (the temp folder is absolute: Minari sizes a dataset by joining the paths it globs to its
    # own, a bug with relative ones)
    with atomic_folder(out) as temp:
        storage = MinariStorage.new(
            temp / "data",
            observation_space=gym.spaces.Box(0, 255, store.frame_shape, np.uint8),
            action_space=gym.spaces.Discrete(store.num_actions),
            data_format="hdf5",
            jpeg_encoding=False,
        )
        storage.update_metadata(
            {
                "dataset_id": dataset_id,
                "minari_version": minari.__version__,
                "algorithm_name": f"sgi-lab {m.source}",
                "description": description
                or f"sgi-lab's {m.source} data of {m.game}: {len(store)} transitions, "
                f"{store.num_episodes} episodes, env protocol {m.env_protocol}, store "
                f"fingerprint {store.fingerprint}",
                MANIFEST_KEY: m.to_json(),
                FINAL_OBSERVATION_KEY: FINAL_OBSERVATION,
            }
        )
        batch, size = [], 0
        row_bytes = int(np.prod(store.frame_shape))
        for rows in _episode_rows(store):
            batch.append(_episode_buffer(store, rows))
            size += len(rows) * row_bytes
            if size >= BATCH_BYTES:
                storage.update_episodes(batch)
                batch, size = [], 0
        if batch:
            storage.update_episodes(batch)
    return out


def _data_path(path: Path) -> Path:
    """The folder holding ``metadata.json``: ``path`` itself or its ``data/``."""
    for candidate in (path, path / "data"):
        if (candidate / "metadata.json").is_file():
            return candidate
    raise FileNotFoundError(f"{path}: no Minari dataset (no metadata.json there or in data/)")


def _foreign_frames(space: Any, where: Path) -> tuple[ObservationSpec, Any]:
    """A foreign dataset's observation spec and the function turning its observations
    ``(T, *space.shape)`` into store frames."""
    import gymnasium as gym

    shape = getattr(space, "shape", None) or ()
    dtype = np.dtype(getattr(space, "dtype", None) or "float64")
    if not isinstance(space, gym.spaces.Box) or len(shape) not in (2, 3) or dtype.kind not in "ub":
        raise ValueError(
            f"{where}: observation space {space} is not an image or grid (a Box of uint8 or "
            "bool with 2 or 3 dimensions); only those import into a store"
        )
    if dtype.kind == "u" and dtype != np.uint8:
        raise ValueError(f"{where}: observations of dtype {dtype}; a store holds uint8 frames")
    channels_last = len(shape) == 3 and shape[-1] < shape[0]
    chw = (shape[-1], *shape[:2]) if channels_last else shape
    spec = ObservationSpec(*((1, *chw) if len(chw) == 2 else chw))

    def frames(obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs)
        if channels_last:
            obs = np.moveaxis(obs, -1, 1)
        if obs.dtype == bool:
            return obs.astype(np.uint8) * np.uint8(255)
        return obs.astype(np.uint8, copy=False)

    return spec, frames


def _writer_of(dataset: Any, data: Path, out: Path, game: str | None, overwrite: bool):
    """A store writer for ``dataset`` (our own manifest, or a foreign dataset's settings) and
    the function turning its observations into frames."""
    meta = dataset.storage.metadata
    own = meta.get(MANIFEST_KEY)
    if isinstance(own, dict):
        m = StoreManifest.from_json(own, data / "metadata.json")
        writer = TransitionStoreWriter.create(
            out, game=m.game, source=m.source, params=m.params, num_actions=m.num_actions,
            rewards_clipped=m.rewards_clipped, chunk_size=m.chunk_size,
            sticky_action_prob=m.sticky_action_prob, ram="ram" in m.fields,
            env_protocol=m.env_protocol, observation_spec=m.observation_spec,
            label_names=m.label_names, overwrite=overwrite,
        )  # fmt: skip
        # the same data: when it was made, and what its writer would resume from
        writer.manifest.created, writer.manifest.resume_state = m.created, m.resume_state
        return writer, lambda obs: np.asarray(obs)
    import gymnasium as gym

    if not isinstance(dataset.action_space, gym.spaces.Discrete):
        raise ValueError(f"{data}: action space {dataset.action_space} is not Discrete")
    spec, frames = _foreign_frames(dataset.observation_space, data)
    env = dataset.spec.env_spec
    game = game or (env.id if env is not None else dataset.spec.dataset_id)
    params = {
        "dataset_id": dataset.spec.dataset_id,
        "minari_version": str(meta.get("minari_version")),
        "jpeg_encoding": bool(meta.get("jpeg_encoding", False)),
        "observation_space": str(dataset.observation_space),
    }
    writer = TransitionStoreWriter.create(
        out, game=game, source="minari", params=params,
        num_actions=int(dataset.action_space.n), chunk_size=100_000, overwrite=overwrite,
        env_protocol="minatar" if is_minatar(game) else EXTERNAL_PROTOCOL,
        observation_spec=spec,
    )  # fmt: skip
    return writer, frames


def import_minari(
    dataset_path: str | os.PathLike,
    out: str | os.PathLike,
    game: str | None = None,
    overwrite: bool = False,
) -> TransitionStore:
    """Read a Minari dataset folder into a store at ``out`` (the module says how).

    Args:
        dataset_path: the dataset's folder (holding ``data/``) or its ``data/`` folder.
        out: the store to write (crash-safe: built in ``out.partial``).
        game: the store's game for a foreign dataset (default: its env's id, else its
            dataset id); a dataset sgi-lab exported keeps its own.
        overwrite: replace a store of ours at ``out``.

    Raises:
        MinariMissingError: Minari is not installed.
        ValueError: observations that are not images or grids, or actions that are not
            ``Discrete``.
    """
    minari = _minari()
    data = _data_path(Path(dataset_path))
    dataset = minari.MinariDataset(data)
    out = Path(out)
    # a store of ours at `out` is replaced with `overwrite` only; anything else never
    writer, frames = _writer_of(dataset, data, out, game, overwrite)
    try:
        for episode in dataset.iterate_episodes():
            steps = len(episode.actions)
            first = np.zeros(steps, dtype=np.uint8)
            first[0] = 1
            columns = {
                "frame": frames(episode.observations[:steps]),
                "action": np.asarray(episode.actions),
                "reward": np.asarray(episode.rewards),
                "terminal": np.asarray(episode.terminations),
                "first": first,
            }
            infos = episode.infos or {}
            for name in ("ram", "labels"):
                if name in writer.manifest.fields:
                    columns[name] = np.asarray(infos[name])[:steps]
            writer.append_many(**columns)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return TransitionStore(out)


def minari_metadata(dataset_path: str | os.PathLike) -> dict[str, Any]:
    """A dataset's ``metadata.json`` as JSON (no Minari needed)."""
    return json.loads((_data_path(Path(dataset_path)) / "metadata.json").read_text())
