"""A device's anchors, the figures every projection is measured against: copy bandwidth, matmul
rates in fp32, TF32 and bf16, a kernel launch's cost, and whether bf16 autocast reaches inside
``torch.func.vmap`` (`sgi_lab.runtime.device.autocast_reaches_vmap`).

    python benchmarks/gpu/anchors.py --device cuda --json anchors.json
    python benchmarks/gpu/anchors.py --device cpu --size 512 --copy-mb 64   # rehearsal
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from sgi_lab.runtime.device import autocast_reaches_vmap


def seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Fastest wall-clock seconds of ``fn`` over ``repeats`` calls (synchronized), after two."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def anchors(device: torch.device, size: int, copy_mb: int, repeats: int) -> dict:
    out: dict = {"device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        out["name"] = torch.cuda.get_device_name(device)
    src = torch.empty(copy_mb * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    s = seconds(lambda: dst.copy_(src), device, repeats)
    out["copy_gb_per_s"] = 2 * src.numel() / s / 1e9  # read + write
    for name, dtype, tf32 in (
        ("fp32", torch.float32, False),
        ("tf32", torch.float32, True),
        ("bf16", torch.bfloat16, False),
    ):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(size, size, device=device, dtype=dtype)
        b = torch.randn(size, size, device=device, dtype=dtype)
        s = seconds(lambda a=a, b=b: a @ b, device, repeats)
        out[f"matmul_{name}_tflops"] = 2 * size**3 / s / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    tiny = torch.zeros(1, device=device)
    s = seconds(lambda: [tiny.add_(1) for _ in range(100)], device, repeats)
    out["launch_us"] = s / 100 * 1e6  # an elementwise op on one number: the launch floor
    out["autocast_reaches_vmap"] = autocast_reaches_vmap(device.type)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", type=int, default=8192, help="square matmul side")
    parser.add_argument("--copy-mb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    found = anchors(torch.device(args.device), args.size, args.copy_mb, args.repeats)
    for k, v in found.items():
        print(f"{k:26s} {v:.3f}" if isinstance(v, float) else f"{k:26s} {v}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    return found


if __name__ == "__main__":
    main()
