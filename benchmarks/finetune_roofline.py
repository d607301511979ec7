"""How close one finetuning update is to what this machine can do: a roofline lower bound.

For each encoder, one update (batch 32, RL + SPR with K = 5, bf16 autocast where the CPU has
native bf16) is split into

* arithmetic: the FLOPs of its convolutions and matrix products (``FlopCounterMode``, forward,
  backward and the gradient-free target passes; grouped-conv weight gradients corrected as in
  ``pretrain_speed.py``), and
* obligatory memory traffic: the bytes that any implementation of the same update in the same
  precision must move, counted from the parameters alone (activations are left out, so this
  is a lower bound): fused Adam reads parameter, gradient and both moments and writes three of
  them (28 B per trainable parameter), the gradient is written and read once more by the norm
  for clipping (8 B), every matrix/conv weight is cast to bf16 for the forward (6 B) and its
  bf16 gradient cast back (6 B), and the EMA target is read with the online copy and written
  (12 B per element) and its weights cast for the target passes (6 B).

The machine's ceilings are measured by the same script at the same thread count: the best of
a large bf16 (or fp32) matrix product and of a dense channels-last 3x3 convolution, and the
memory bandwidth of a 256 MB tensor, the better of a copy and an in-place multiply (which, like
Adam, reads and writes the same lines). The bound is arithmetic / best FLOP rate + bytes /
bandwidth: no implementation on this machine, however fused, runs the update faster.

A profile of one update then splits the measured time into the arithmetic ops (at the rate
they reach at these shapes) and everything else, and the report puts the fastest measured
update, the bound and the 3x target (the reference's seconds per update / 3) side by side.

    python benchmarks/finetune_roofline.py                      # nature and resnet, 2 threads
    python benchmarks/finetune_roofline.py --encoders nature --repeats 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from finetune_speed import REFERENCE_S_PER_UPDATE, filled_agent
from pretrain_speed import conv_throughput, grouped_conv_backward_flop
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from sgi_lab.config import FinetuneConfig

ARITHMETIC_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::mkldnn_convolution",
    "aten::convolution_backward",
)


def best_rate(fn, work: float, reps: int) -> float:
    """Best work/second of ``reps`` timed calls after one untimed call."""
    fn()
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = max(best, work / (time.perf_counter() - t0))
    return best


def machine_ceilings(dtype: torch.dtype, reps: int) -> dict[str, float]:
    """Best matmul and conv GFLOP/s in ``dtype`` and copy bandwidth (GB/s), this process."""
    n = 2048
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    src, dst = torch.randn(64 * 2**20), torch.empty(64 * 2**20)  # 256 MB each
    with torch.no_grad():
        matmul = best_rate(lambda: torch.mm(a, b), 2 * n**3 / 1e9, reps)
        copy = best_rate(lambda: dst.copy_(src), 2 * src.numel() * 4 / 1e9, reps)
        # In place (read and write the same lines, as Adam and the EMA do): no write-allocate
        # reads, so a higher rate; the bound takes the better of the two.
        in_place = best_rate(lambda: dst.mul_(1.0), 2 * dst.numel() * 4 / 1e9, reps)
    return {
        "matmul_gflop_per_s": matmul,
        "conv_gflop_per_s": conv_throughput(reps, dtype)["best_gflop_per_s"],
        "copy_gb_per_s": copy,
        "in_place_gb_per_s": in_place,
        "bandwidth_gb_per_s": max(copy, in_place),
    }


def obligatory_bytes(agent) -> dict[str, float]:
    """Parameter-side memory traffic of one update (see the module docstring), in MB."""
    pop = agent.population
    trainable = pop.trainable()
    n_train = sum(p.numel() for p in trainable)
    n_matrix = sum(p.numel() for p in trainable if p.dim() >= 3)  # (agents, out, in...)
    ema = [pop.spr_target[k] for k in pop.ema_names()]
    n_ema = sum(t.numel() for t in ema)
    n_ema_matrix = sum(t.numel() for t in ema if t.dim() >= 3)
    cast = 6 if agent.amp else 0
    parts = {
        "adam": 28 * n_train,
        "gradient_write_and_norm": 8 * n_train,
        "weight_casts_forward_and_gradient": 2 * cast * n_matrix,
        "ema_lerp": 12 * n_ema,
        "target_weight_casts": cast * n_ema_matrix,
    }
    out = {f"{k}_mb": v / 1e6 for k, v in parts.items()}
    out["total_mb"] = sum(parts.values()) / 1e6
    out["trainable_parameters"] = n_train
    return out


def count_flops(agent) -> dict[str, float]:
    counter = FlopCounterMode(
        display=False,
        custom_mapping={torch.ops.aten.convolution_backward: grouped_conv_backward_flop},
    )
    with counter:
        agent.step()
    by_op = counter.get_flop_counts()["Global"]
    conv = sum(v for k, v in by_op.items() if "convolution" in str(k))
    return {"gflop": counter.get_total_flops() / 1e9, "conv_gflop": conv / 1e9}


def profile_split(agent) -> dict[str, float]:
    """Self CPU seconds of one profiled update: arithmetic ops, Adam, everything else."""
    sampled = agent.sample()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        agent.step(sampled)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    arithmetic = sum(e.self_cpu_time_total for e in events if e.key in ARITHMETIC_OPS) / 1e6
    adam = sum(e.self_cpu_time_total for e in events if "adam" in e.key.lower()) / 1e6
    return {
        "profiled_s": total,
        "arithmetic_s": arithmetic,
        "adam_s": adam,
        "other_s": total - arithmetic - adam,
        "ops": sum(e.count for e in events),
    }


def bench(encoder: str, repeats: int, reps: int) -> dict[str, Any]:
    config = FinetuneConfig(encoder=encoder, steps=4_000, device="cpu")
    agent = filled_agent(config)
    for _ in range(3):
        agent.step()
    wall = []
    for _ in range(repeats):
        sampled = agent.sample()
        t0 = time.perf_counter()
        agent.step(sampled)
        wall.append(time.perf_counter() - t0)
    flops = count_flops(agent)
    traffic = obligatory_bytes(agent)
    split = profile_split(agent)
    ceilings = machine_ceilings(torch.bfloat16 if agent.amp else torch.float32, reps)
    conv_s = flops["conv_gflop"] / ceilings["conv_gflop_per_s"]
    matmul_s = (flops["gflop"] - flops["conv_gflop"]) / ceilings["matmul_gflop_per_s"]
    memory_s = traffic["total_mb"] / 1e3 / ceilings["bandwidth_gb_per_s"]
    bound = conv_s + matmul_s + memory_s
    target = REFERENCE_S_PER_UPDATE[encoder] / 3
    fastest = min(wall)
    return {
        "encoder": encoder,
        "bf16": agent.amp,
        "threads": torch.get_num_threads(),
        "fastest_s_per_update": fastest,
        "median_s_per_update": statistics.median(wall),
        "target_s_per_update": target,
        "bound_s_per_update": bound,
        "bound_arithmetic_s": conv_s + matmul_s,
        "bound_memory_s": memory_s,
        "achieved_gflop_per_s": flops["gflop"] / fastest,
        "arithmetic_ops_gflop_per_s": flops["gflop"] / split["arithmetic_s"],
        "target_needs_gflop_per_s": flops["gflop"] / target,
        **flops,
        **{f"traffic_{k}": v for k, v in traffic.items()},
        **{f"profile_{k}": v for k, v in split.items()},
        **ceilings,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoders", nargs="+", default=["nature", "resnet"])
    parser.add_argument("--repeats", type=int, default=20, help="timed updates")
    parser.add_argument("--reps", type=int, default=10, help="timed calls per ceiling")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [bench(encoder, args.repeats, args.reps) for encoder in args.encoders]
    for row in rows:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
    print(
        f"\n{'encoder':8} {'fastest':>8} {'bound':>7} {'target':>7} {'GFLOP':>6} "
        f"{'achieved':>9} {'arith ops':>9} {'target needs':>12} {'matmul peak':>11}"
    )
    for r in rows:
        print(
            f"{r['encoder']:8} {r['fastest_s_per_update']:8.3f} {r['bound_s_per_update']:7.3f} "
            f"{r['target_s_per_update']:7.3f} {r['gflop']:6.1f} "
            f"{r['achieved_gflop_per_s']:9.0f} {r['arithmetic_ops_gflop_per_s']:9.0f} "
            f"{r['target_needs_gflop_per_s']:12.0f} {r['matmul_gflop_per_s']:11.0f}"
        )


if __name__ == "__main__":
    main()
