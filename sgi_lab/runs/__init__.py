"""Run folders: their lifecycle, status, checkpoints (CRC-checked), stopping and locks.

- `folder`: the lifecycle every stage shares (`RunDir`), the folder's layout, the metrics
  logger;
- `checkpoints`: checkpoint names, the one safe loader (ours, undamaged, weights only), a run's
  checkpoint listing;
- `status`: what a run folder holds, read without writing; only finished runs count as results;
- `stopping`: time limits, stop requests and signals, and the words a stopped run's status gives;
- `progress`: how far a run has got, from its ``metrics.jsonl``: the one poller behind
  ``sgi-lab status``, ``sgi-lab run``'s bar and the demo's;
- `tracking`: TensorBoard and, as an option, Weights & Biases, fed by the metrics logger;
- `hub`: a Hugging Face Hub model folder (safetensors) written, and read back to finetune from;
- `prune`: ``sgi-lab prune``, freeing the checkpoints of finished runs.
"""
