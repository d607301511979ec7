"""Datasets: the on-disk transition store, collectors, the DQN-Replay importer and the sampler.

- `store_format`: a store's fields, chunk files, manifest and checksums;
- `store`: a finished store opened for reading (`TransitionStore`), frames through memmaps;
- `store_writer`: writing a store, crash-safe and resumable (`TransitionStoreWriter`);
- `collect`: running a policy in an environment into a store; the paper's Random data;
- `dqn_replay_importer`: the DQN Replay dataset (the paper's Weak and Mixed data) as a store;
- `minari_exchange`: stores to and from Minari datasets, lossless;
- `dataset_card`: the ``README.md`` of a store exported as a Minari dataset;
- `replay_export`: a finetuning agent's whole replay as a store;
- `replay_select`: Weak and Mixed selections of such a replay, as the paper makes them of DQN's;
- `sampler`: batches of K+1 consecutive stacked observations and n-step targets
  (`SequenceSampler`);
- `replay`: finetuning's append-only replay with prioritized sampling (a sum tree);
- `population_replay`: that replay for a whole population, one tensor per field with an agent
  axis (`PopulationReplay`);
- `batched_sum_tree`: N agents' priority sum trees as one tensor, walked or searched by prefix
  sums;
- `coverage`: how many distinct coarse screens a store's data visits.
"""

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
