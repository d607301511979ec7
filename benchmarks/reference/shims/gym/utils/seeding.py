"""Stand-in for gym 0.17.3's ``gym.utils.seeding`` (the version the reference pins), whose
draws it reproduces: ``np_random`` gives a ``RandomState`` seeded from a SHA-512 hash of the
seed, ``hash_seed`` the reference derives the emulator's seed from. The no-op counts the
reference draws at each reset come from this ``RandomState`` (``randint``)."""

import hashlib
import os
import struct

import numpy as np


def np_random(seed=None):
    if seed is not None and not (isinstance(seed, int) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer or None, not {seed!r}")
    seed = create_seed(seed)
    rng = np.random.RandomState()
    rng.seed(_int_list_from_bigint(hash_seed(seed)))
    return rng, seed


def hash_seed(seed=None, max_bytes=8):
    if seed is None:
        seed = create_seed(max_bytes=max_bytes)
    digest = hashlib.sha512(str(seed).encode("utf8")).digest()
    return _bigint_from_bytes(digest[:max_bytes])


def create_seed(a=None, max_bytes=8):
    if a is None:
        a = _bigint_from_bytes(os.urandom(max_bytes))
    elif isinstance(a, str):
        a = a.encode("utf8")
        a += hashlib.sha512(a).digest()
        a = _bigint_from_bytes(a[:max_bytes])
    elif isinstance(a, int):
        a = a % 2 ** (8 * max_bytes)
    else:
        raise ValueError(f"invalid type for seed: {type(a)} ({a!r})")
    return a


def _bigint_from_bytes(data):
    sizeof_int = 4
    padding = sizeof_int - len(data) % sizeof_int
    data += b"\0" * padding
    count = len(data) // sizeof_int
    unpacked = struct.unpack(f"{count}I", data)
    return sum(2 ** (sizeof_int * 8 * i) * val for i, val in enumerate(unpacked))


def _int_list_from_bigint(bigint):
    if bigint < 0:
        raise ValueError(f"seed must be non-negative, not {bigint}")
    if bigint == 0:
        return [0]
    ints = []
    while bigint > 0:
        bigint, mod = divmod(bigint, 2**32)
        ints.append(mod)
    return ints
