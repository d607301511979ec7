"""Many small arrays in few zip entries, for the reference fixtures (numpy only: both venvs).

Each array of an ``.npz`` is a zip entry with a ``.npy`` header, about 300 bytes before any data:
a ResNet-L case's 1,000-2,000 per-tensor entries (gradients, sampled updates and their indices)
cost more than their numbers. :func:`packed` stores every ``<prefix>/<name>`` array of one dtype
in four entries (``packed/<prefix>/<dtype>/{names,ndim,shape,data}``); :func:`unpacked` gives the
original mapping back, key for key and bit for bit. Readers call :func:`unpacked` on whatever they
load: files written before packing have no ``packed/`` entries and come back unchanged.
"""

from __future__ import annotations

import math

import numpy as np


def packed(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` with every key that has a ``/`` grouped by (prefix, dtype) and concatenated."""
    out: dict[str, np.ndarray] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    for key, value in arrays.items():
        prefix, slash, _ = key.partition("/")
        value = np.asarray(value)
        if slash and value.dtype.kind in "biuf":
            groups.setdefault((prefix, value.dtype.name), []).append(key)
        else:
            out[key] = value
    for (prefix, dtype), keys in groups.items():
        group = f"packed/{prefix}/{dtype}"
        values = [np.asarray(arrays[k]) for k in keys]
        out[f"{group}/names"] = np.array([k[len(prefix) + 1 :] for k in keys])
        out[f"{group}/ndim"] = np.array([v.ndim for v in values], np.int64)
        out[f"{group}/shape"] = np.array([d for v in values for d in v.shape], np.int64)
        out[f"{group}/data"] = np.concatenate([v.ravel() for v in values]).astype(dtype)
    return out


def unpacked(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of :func:`packed` (arrays without ``packed/`` entries pass through)."""
    out = {k: v for k, v in arrays.items() if not k.startswith("packed/")}
    for key in [k for k in arrays if k.startswith("packed/") and k.endswith("/names")]:
        group = key[: -len("/names")]
        prefix = group.split("/")[1]
        dims = iter(arrays[f"{group}/shape"].tolist())
        data, offset = arrays[f"{group}/data"], 0
        for name, ndim in zip(arrays[key].tolist(), arrays[f"{group}/ndim"].tolist(), strict=True):
            shape = tuple(next(dims) for _ in range(ndim))
            size = math.prod(shape)
            out[f"{prefix}/{name}"] = data[offset : offset + size].reshape(shape).copy()
            offset += size
        if offset != data.size:
            raise ValueError(f"{group}: {data.size - offset} packed values left over")
    return out
