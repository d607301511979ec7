"""What checking checksums costs: a checkpoint's CRC-32s before it is loaded, a store's blake2b
checksums before a pretraining run trains on it (`sgi_lab.runs.checkpoints.verify_checksums`,
`sgi_lab.train.pretrain.check_store`).

    python benchmarks/checksums.py [--store-rows 100000] [--checkpoint-mb 300]

Prints seconds and GB/s for each, beside ``torch.load`` of the same checkpoint, with the CPU
model. Files go to a temporary folder (page cache warm: a second read, as a resumed run sees).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sgi_lab.base.files import atomic_torch_save, cpu_model
from sgi_lab.data import TransitionStore, TransitionStoreWriter
from sgi_lab.runs.checkpoints import verify_checksums
from sgi_lab.train.pretrain import check_store


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store-rows", type=int, default=100_000)
    parser.add_argument("--checkpoint-mb", type=int, default=300)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt.pt"
        n = args.checkpoint_mb * (1 << 20) // 4
        atomic_torch_save({"format": "sgi-lab", "w": torch.randn(n), "b": torch.zeros(10)}, ckpt)
        size = ckpt.stat().st_size / 1e9
        crc = best_of(lambda: verify_checksums(ckpt))
        load = best_of(lambda: torch.load(ckpt, weights_only=True))
        print(
            f"checkpoint {size:.2f} GB: CRC-32 check {crc:.3f} s ({size / crc:.2f} GB/s), "
            f"torch.load {load:.3f} s: the check adds {crc / load:.0%} to a load"
        )

        writer = TransitionStoreWriter.create(
            Path(tmp) / "store", game="Pong", source="bench", num_actions=6
        )
        rng = np.random.default_rng(0)
        rows = args.store_rows
        block = 10_000
        for start in range(0, rows, block):
            k = min(block, rows - start)
            first = np.zeros(k, bool)
            first[0] = start == 0
            writer.append_many(
                frame=rng.integers(0, 255, (k, 84, 84), np.uint8),
                action=rng.integers(0, 6, k),
                reward=np.zeros(k, np.float32),
                terminal=np.zeros(k, bool),
                first=first,
            )
        store = TransitionStore(writer.close())
        gb = sum(p.stat().st_size for p in store.path.rglob("*.npy")) / 1e9
        seconds = best_of(lambda: check_store(store), repeat=2)
        print(
            f"store of {rows:,} rows, {gb:.2f} GB: checksum check {seconds:.2f} s "
            f"({gb / seconds:.2f} GB/s), once per pretraining run start"
        )


if __name__ == "__main__":
    main()
