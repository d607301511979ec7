"""Datasets: the on-disk transition store, collectors, the DQN-Replay importer and the sampler."""

from sgi_lab.data.sampler import SequenceBatch, SequenceSampler, n_step_targets, valid_start_mask
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_format import FORMAT_VERSION, StoreError, StoreManifest
from sgi_lab.data.store_writer import TransitionStoreWriter

__all__ = [
    "FORMAT_VERSION",
    "SequenceBatch",
    "SequenceSampler",
    "StoreError",
    "StoreManifest",
    "TransitionStore",
    "TransitionStoreWriter",
    "n_step_targets",
    "valid_start_mask",
]
