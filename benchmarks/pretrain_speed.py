"""Pretraining speed: one SGI step (SPR + goal RL + inverse dynamics) per encoder on this CPU
(or GPU: ``--device cuda`` times the CUDA-graph replay pretraining uses there).

For each encoder at batch 256: seconds per step (median after warm-up), samples/s, the FLOPs of
one step counted by ``torch.utils.flop_counter`` (forward, backward and the gradient-free
target/goal passes), the achieved GFLOP/s, and, measured by this same script, the CPU's dense
fp32 convolution throughput (a 3x3 conv 64->64 over 256x64x28x28, channels-last), so the step
can be read as a fraction of what the CPU does on the kind of op it is built from.

    python benchmarks/pretrain_speed.py                        # nature, resnet, resnet_l
    python benchmarks/pretrain_speed.py --encoders resnet --steps 9
    python benchmarks/pretrain_speed.py --batch 64             # per-step figures also given at 256
    python benchmarks/pretrain_speed.py --fp32 --default-malloc --threads 1   # ablations
    python benchmarks/pretrain_speed.py --encoders resnet --target-bn running  # option, not paper

Timing: wall-clock seconds per step, median of ``--steps`` after ``--warmup`` untimed steps
(the first steps also grow the heap to its steady size), plus the best step and the process
CPU seconds per step (all threads). On a shared machine the median moves with the other jobs;
the load average before and after is recorded.

The batch is synthetic (uniform uint8 frames, 18 actions, every step valid), so the figures
measure the step itself, not the sampler (``benchmarks/foundation.py sampling`` does that).

FLOPs: ``FlopCounterMode`` counts convolutions and matrix products only (not batch norm or
elementwise work), at 2 FLOPs per multiply-add. Its stock ``convolution_backward`` formula
counts the weight gradient of a grouped conv as if the conv were dense, which overstates the
ResNet's depthwise convs ~64-128x; ``gflop`` uses the corrected formula (weight gradient = the
forward's multiply-adds), ``gflop_flop_counter_raw`` is the stock count, kept for comparison.

The reference figures (the public SGI implementation on this 2-core CPU, fp32): ResNet 24.5
samples/s (10.5 s per step), Nature CNN 176 samples/s, both at batch 256 with all three
objectives.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count

import sgi_lab
from sgi_lab.config import PretrainConfig, build_config
from sgi_lab.runtime.device import cpu_has_native_bf16
from sgi_lab.train import pretrain as pretrain_module
from sgi_lab.train.pretrain_step import GraphedStep, PretrainBatch, build_state, train_step

REFERENCE_SAMPLES_PER_S = {"nature": 176.0, "resnet": 24.5}


NUM_ACTIONS = 18
K = 5


def grouped_conv_backward_flop(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    _groups,
    output_mask,
    out_shape,
    **kwargs,
) -> int:
    """``convolution_backward`` FLOPs, right for grouped (depthwise) convs too.

    Input gradient: a transposed conv with the same multiply-adds as the forward. Weight
    gradient: every weight accumulates over the same (output position, input channel in its
    group) products as the forward, so it too costs what the forward costs. (The stock formula
    treats the weight gradient as a dense conv over all input channels.)
    """
    flops = 0
    if output_mask[0]:
        flops += conv_flop_count(grad_out_shape, w_shape, out_shape[0], not transposed)
    if output_mask[1]:
        flops += conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return flops


def synthetic_batch(batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    frames = (batch_size, K + 1, 4, 84, 84)
    return {
        "obs": torch.randint(0, 256, frames, dtype=torch.uint8, generator=g),
        "actions": torch.randint(0, NUM_ACTIONS, (batch_size, K + 1), generator=g),
        "valid": torch.ones(batch_size, K + 1, dtype=torch.bool),
        "goal_obs": torch.randint(0, 256, (batch_size, 4, 84, 84), dtype=torch.uint8, generator=g),
    }


def make_config(encoder: str, batch_size: int, args: argparse.Namespace) -> PretrainConfig:
    values: dict[str, Any] = {
        "encoder": encoder,
        "batch_size": batch_size,
        "spr_steps": K,
        "device": args.device,
        "channels_last": not args.no_channels_last,
        "cuda_graphs": not args.no_cuda_graphs,
    }
    fields = PretrainConfig.__dataclass_fields__
    if "cpu_amp" in fields:  # absent before bf16 autocast on CPU existed
        values["cpu_amp"] = not args.fp32
    if args.target_bn != "batch":
        values["target_batch_norm"] = args.target_bn
    return build_config(PretrainConfig, values)


def conv_throughput(reps: int, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Dense 3x3 conv 64->64 over 256x64x28x28 (channels-last), forward only: GFLOP/s."""
    x = torch.randn(256, 64, 28, 28).contiguous(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3).contiguous(memory_format=torch.channels_last)
    x, w = x.to(dtype), w.to(dtype)
    flops = 2 * 256 * 28 * 28 * 64 * 64 * 9
    times = []
    with torch.no_grad():
        F.conv2d(x, w, padding=1)
        for _ in range(reps):
            t0 = time.perf_counter()
            F.conv2d(x, w, padding=1)
            times.append(time.perf_counter() - t0)
    rates = [flops / t / 1e9 for t in times]
    return {"gflop_per_s": statistics.median(rates), "best_gflop_per_s": max(rates)}


def on_device(batch: dict[str, torch.Tensor], device: torch.device) -> PretrainBatch:
    return PretrainBatch(**{k: v.to(device) for k, v in batch.items()})


def count_flops(config: PretrainConfig, batch: PretrainBatch) -> dict[str, float]:
    state = build_state(config, NUM_ACTIONS, torch.device(config.device))
    state.model.train()
    state.target.train()
    raw = FlopCounterMode(display=False)
    with raw:
        train_step(config, state, batch)
    fixed = FlopCounterMode(
        display=False,
        custom_mapping={torch.ops.aten.convolution_backward: grouped_conv_backward_flop},
    )
    with fixed:
        train_step(config, state, batch)
    by_op = {str(k): v / 1e9 for k, v in fixed.get_flop_counts()["Global"].items()}
    return {
        "gflop": fixed.get_total_flops() / 1e9,
        "gflop_flop_counter_raw": raw.get_total_flops() / 1e9,
        "gflop_by_op": {k: round(v, 1) for k, v in sorted(by_op.items())},
    }


def time_steps(
    config: PretrainConfig, batch: dict[str, torch.Tensor], warmup: int, steps: int
) -> dict[str, Any]:
    device = torch.device(config.device)
    state = build_state(config, NUM_ACTIONS, device)
    state.model.train()
    state.target.train()  # as the reference: target batch norms use batch statistics
    # On a GPU the step pretraining runs: captured once as a CUDA graph, then replayed.
    graphed = GraphedStep.usable(config, device)
    step = GraphedStep(config, state) if graphed else functools.partial(train_step, config, state)
    for _ in range(max(warmup, GraphedStep.WARMUP + 2 if graphed else 0)):
        step(batch)  # the first steps also grow the heap to its steady size (and capture)
    wall, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        logs = step(batch)
        logs["losses/total"].item()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall_s": wall, "cpu_s": cpu, "state": state, "cuda_graph": graphed}


def profile_step(
    config: PretrainConfig, batch: dict[str, torch.Tensor], top: int
) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile

    state = build_state(config, NUM_ACTIONS, torch.device(config.device))
    state.model.train()
    state.target.train()
    for _ in range(2):
        train_step(config, state, batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_step(config, state, batch)
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    return [
        {
            "op": e.key,
            "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 1),
            "share": round(e.self_cpu_time_total / total, 3),
            "calls": e.count,
        }
        for e in events[:top]
    ]


def bench_encoder(encoder: str, args: argparse.Namespace, conv_fp32: float) -> dict[str, Any]:
    config = make_config(encoder, args.batch, args)
    batch = on_device(synthetic_batch(args.batch), torch.device(args.device))
    flops = count_flops(config, batch)
    timing = time_steps(config, batch, args.warmup, args.steps)
    step_s = statistics.median(timing["wall_s"])
    row: dict[str, Any] = {
        "encoder": encoder,
        "batch": args.batch,
        "s_per_step": round(step_s, 3),
        "best_s_per_step": round(min(timing["wall_s"]), 3),
        "cpu_s_per_step": round(statistics.median(timing["cpu_s"]), 3),
        "samples_per_s": round(args.batch / step_s, 1),
        "gflop_per_step": round(flops["gflop"], 1),
        "gflop_flop_counter_raw": round(flops["gflop_flop_counter_raw"], 1),
        "gflop_per_s": round(flops["gflop"] / step_s, 1),
        "fraction_of_conv_fp32": round(flops["gflop"] / step_s / conv_fp32, 3),
        "gflop_by_op": flops["gflop_by_op"],
        "steps_timed": args.steps,
        "cuda_graph": timing["cuda_graph"],
        "wall_s_each": [round(t, 3) for t in timing["wall_s"]],
    }
    if args.batch != 256:
        row["s_per_step_at_256_extrapolated"] = round(step_s * 256 / args.batch, 3)
    ref = REFERENCE_SAMPLES_PER_S.get(encoder)
    if ref is not None:
        row["reference_samples_per_s"] = ref
        row["speedup_vs_reference"] = round(args.batch / step_s / ref, 2)
    del timing
    return row


def print_table(rows: list[dict[str, Any]], conv: dict[str, Any]) -> None:
    print(
        f"\nCPU dense fp32 conv throughput: {conv['fp32_gflop_per_s']:.1f} GFLOP/s "
        f"(bf16: {conv['bf16_gflop_per_s']:.1f}); threads {conv['threads']}"
    )
    header = (
        f"{'encoder':9} {'batch':>5} {'s/step':>7} {'best':>6} {'cpu s':>6} {'samples/s':>9} "
        f"{'GFLOP/step':>10} {'GFLOP/s':>8} {'of conv':>7} {'vs ref':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        vs_ref = f"{r['speedup_vs_reference']:.2f}x" if "speedup_vs_reference" in r else "-"
        print(
            f"{r['encoder']:9} {r['batch']:>5} {r['s_per_step']:>7.2f} {r['best_s_per_step']:>6.2f} "
            f"{r['cpu_s_per_step']:>6.2f} {r['samples_per_s']:>9.1f} {r['gflop_per_step']:>10.1f} {r['gflop_per_s']:>8.1f} "
            f"{r['fraction_of_conv_fp32']:>7.0%} {vs_ref:>7}"
        )
        if "s_per_step_at_256_extrapolated" in r:
            print(
                f"{'':9} (extrapolated linearly to batch 256: "
                f"{r['s_per_step_at_256_extrapolated']:.2f} s/step)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--encoders", nargs="+", default=["nature", "resnet", "resnet_l"])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per encoder")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--conv-reps", type=int, default=10)
    parser.add_argument("--profile", default="resnet", help="encoder to profile ('' skips)")
    parser.add_argument("--top", type=int, default=10, help="ops listed in the profile")
    parser.add_argument("--fp32", action="store_true", help="ablation: no bf16 autocast")
    parser.add_argument(
        "--default-malloc", action="store_true", help="ablation: glibc's default allocator"
    )
    parser.add_argument("--no-channels-last", action="store_true", help="ablation: NCHW")
    parser.add_argument(
        "--target-bn",
        choices=["batch", "running"],
        default="batch",
        help="target passes' batch norm statistics (config target_batch_norm)",
    )
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (conv throughput: CPU)")
    parser.add_argument(
        "--no-cuda-graphs", action="store_true", help="ablation: eager steps on a GPU"
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    if args.default_malloc:  # older sgi_lab versions called keep_freed_memory directly
        for name in ("prepare_device", "keep_freed_memory"):
            if hasattr(pretrain_module, name):
                setattr(pretrain_module, name, lambda *_: None)
    load_before = os.getloadavg()
    conv_before = conv_throughput(args.conv_reps)
    conv_bf16 = conv_throughput(args.conv_reps, torch.bfloat16)
    rows = []
    for encoder in args.encoders:
        rows.append(bench_encoder(encoder, args, conv_before["gflop_per_s"]))
        print(json.dumps(rows[-1]), flush=True)
    conv_after = conv_throughput(args.conv_reps)
    conv_fp32 = statistics.median([conv_before["gflop_per_s"], conv_after["gflop_per_s"]])
    for r in rows:  # against the median of the measurements taken before and after
        r["fraction_of_conv_fp32"] = round(r["gflop_per_s"] / conv_fp32, 3)
    conv = {
        "fp32_gflop_per_s": round(conv_fp32, 1),
        "fp32_gflop_per_s_before_after": [
            round(conv_before["gflop_per_s"], 1),
            round(conv_after["gflop_per_s"], 1),
        ],
        "fp32_best_gflop_per_s": round(
            max(conv_before["best_gflop_per_s"], conv_after["best_gflop_per_s"]), 1
        ),
        "bf16_gflop_per_s": round(conv_bf16["gflop_per_s"], 1),
        "threads": args.threads,
    }
    profile = []
    if args.profile:
        config = make_config(args.profile, args.batch, args)
        batch = on_device(synthetic_batch(args.batch), torch.device(args.device))
        profile = profile_step(config, batch, args.top)
    # What the code under test actually did (older sgi_lab versions lack these levers).
    bf16 = not args.fp32 and hasattr(pretrain_module, "autocast") and cpu_has_native_bf16()
    levers = ("prepare_device", "keep_freed_memory")
    tuned_malloc = any(hasattr(pretrain_module, n) for n in levers) and not args.default_malloc
    result = {
        "bench": "pretrain_speed",
        "sgi_lab": os.path.dirname(sgi_lab.__file__),
        "torch": torch.__version__,
        "device": args.device,
        "threads": args.threads,
        "cpu_bf16_autocast": bf16,
        "malloc": "keep freed memory" if tuned_malloc else "glibc default",
        "channels_last": not args.no_channels_last,
        "target_batch_norm": args.target_bn,
        "loadavg_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "conv": conv,
        "encoders": rows,
        "profile_encoder": args.profile,
        "profile_top_ops": profile,
    }
    print_table(rows, conv)
    if profile:
        print(f"\nTop {len(profile)} ops by self CPU time, one {args.profile} step:")
        for p in profile:
            print(
                f"  {p['op']:42} {p['self_cpu_ms']:9.1f} ms {p['share']:6.1%} {p['calls']:5d} calls"
            )
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
