"""How networks run, never what they compute: device, precision, CPU settings, CUDA graphs.

- `device`: the device, the one bf16 autocast decision, the allocator and TF32 settings;
- `cpu_settings`: bf16 and channels-last on a CPU chosen by timing real steps, cached per
  machine;
- `graphs`: a step captured as a CUDA graph and replayed (`GraphedCall`), and the check, on any
  device, that replaying it is right (`check_replayable`).
"""
