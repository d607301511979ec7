"""Run folders: their lifecycle, status, checkpoints (CRC-checked), stopping and locks."""
