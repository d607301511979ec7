"""Execution settings that make the networks fast without changing what they compute.

* :func:`autocast`: bf16 autocast on CUDA, and on CPUs with native bf16 instructions
  (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slower than fp32, so those CPUs stay in
  fp32.
* :func:`keep_freed_memory`: make glibc's allocator keep freed blocks instead of handing them
  back to the kernel, so a step's large activation tensors are not page-faulted in afresh.

The measurements behind these choices are in benchmarks/README.md ("Why the CPU runtime
settings").
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools

import torch

from sgi_lab.config import ConfigError

# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_INT_MAX = 2**31 - 1


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True on CPUs with bf16 instructions (AVX512-BF16 or AMX), where bf16 autocast pays."""
    try:
        caps = torch.cpu.get_capabilities()
    except Exception:  # older torch or an unknown CPU: stay in fp32
        return False
    return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else CPU; a device named explicitly must exist here.

    Raises:
        ConfigError: ``device: 'cuda' ...`` naming why it is not usable (a torch built without
            CUDA, no GPU visible, an index beyond the GPUs) and what to set instead.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(
            f"device: {name!r} is not a device; use 'auto', 'cpu' or 'cuda[:i]'"
        ) from None
    if device.type == "cuda":
        if not torch.backends.cuda.is_built():
            why = f"this torch ({torch.__version__}) was built without CUDA"
        elif not torch.cuda.is_available():
            why = "no CUDA GPU is visible (driver, CUDA_VISIBLE_DEVICES)"
        elif device.index is not None and device.index >= torch.cuda.device_count():
            why = f"this machine has {torch.cuda.device_count()} GPU(s)"
        else:
            return device
        raise ConfigError(f"device: {name!r} is not usable here: {why}; set device=cpu or auto")
    return device


def use_bf16(device: torch.device, cuda: bool = True, cpu: bool | str = True) -> bool:
    """The one bf16 decision: on CUDA when ``cuda``; on a CPU when ``cpu`` and the CPU has
    native bf16 (:func:`cpu_has_native_bf16`; elsewhere bf16 is emulated and slower than fp32).

    Args:
        device: where the step runs.
        cuda: use bf16 on CUDA (a config's ``amp``).
        cpu: use bf16 on a CPU (a config's ``cpu_amp``); ``"auto"`` not settled by a measurement
            (`sgi_lab.runtime.cpu_settings`, which training runs do first) counts as True.
    """
    if device.type == "cuda":
        return bool(cuda)
    return device.type == "cpu" and bool(cpu) and cpu_has_native_bf16()


def autocast(
    device: torch.device, cuda: bool = True, cpu: bool = True
) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` when `use_bf16` says so, else a null context."""
    if use_bf16(device, cuda, cpu):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@functools.cache
def autocast_reaches_vmap(device_type: str) -> bool:
    """Whether bf16 autocast casts a convolution inside ``torch.func.vmap`` on this device type.

    It does not on a CPU (autocast stops at vmap), and on CUDA it did not either with torch
    2.11 on an H100 (2026-11-26: a population's vmap'd acting and update failed with "Input type
    (BFloat16) and bias type (float) should be the same"), although torch's own tests of 2021
    found matmuls cast there. So it is asked, once per process and device type, of a 1x1
    convolution of two agents: a vmap'd computation runs bf16 only where the answer is yes, and
    fp32 otherwise (never bf16 inputs against fp32 weights).
    """
    x = torch.ones(2, 1, 1, 2, 2, device=device_type)
    w = torch.ones(2, 1, 1, 1, 1, device=device_type)
    b = torch.zeros(2, 1, device=device_type)
    try:
        with torch.autocast(device_type, dtype=torch.bfloat16):
            out = torch.func.vmap(torch.nn.functional.conv2d)(x, w, b)
    except RuntimeError:
        return False
    return out.dtype == torch.bfloat16


@functools.cache
def keep_freed_memory() -> bool:
    """Let glibc malloc reuse freed memory for large blocks (process-wide; idempotent).

    Raises the mmap threshold and the trim threshold to 2 GB, so blocks up to 2 GB come from
    the heap and freed ones stay mapped for the next step instead of being unmapped and
    page-faulted back in. The process keeps its peak heap (which a training loop reaches
    every step anyway). A no-op returning False where glibc is absent (macOS, musl, Windows).
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, _INT_MAX) == 1
    # -1 disables trimming altogether (mallopt(3)).
    return mallopt(_M_TRIM_THRESHOLD, -1) == 1 and ok


def clip_gradients(
    params: list[torch.Tensor],
    max_norm: float,
    host_checks: bool | None = None,
    per_agent: bool = False,
) -> torch.Tensor:
    """Scale the gradients of ``params`` so that their total norm is at most ``max_norm``:
    ``torch.nn.utils.clip_grad_norm_``'s rule (coefficient max_norm / (norm + 1e-6), at most 1),
    the one clipping rule of pretraining and finetuning.

    ``per_agent``: the parameters are a population's, stacked along a leading agent axis
    (`sgi_lab.train.population.Population`); each agent's gradients are clipped by their own norm,
    as if each agent called ``clip_grad_norm_`` on its own parameters.

    Always multiplying is a full pass over the gradients (~1.5 ms of a Nature finetuning update
    on the 2-core CPU) even when nothing is clipped. On a CPU, where reading the norm costs no
    device synchronization, the pass is skipped when no norm exceeds ``max_norm`` (the result is
    the same); other devices always multiply, which a CUDA graph can capture.

    Args:
        params: the parameters whose gradients are clipped (those without one are skipped).
        max_norm: the largest total norm; ``<= 0`` only measures.
        host_checks: read the norms on the host to skip the pass (default: on a CPU).
        per_agent: one norm per index of the leading axis.

    Returns:
        The total gradient norm before clipping: a 0-d tensor, or (N,) per agent.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if host_checks is None:
        host_checks = grads[0].device.type == "cpu"
    if per_agent:
        # One multi-tensor norm over every (tensor, agent) slice instead of a norm per tensor:
        # 3 operators for any number of parameters (31 + 2 for Nature's).
        slices = [s for g in grads for s in g.unbind(0)]
        per_slice = torch.stack(torch._foreach_norm(slices, 2, dtype=torch.float32))
        norms = torch.linalg.vector_norm(per_slice.view(len(grads), -1), dim=0)
    else:
        norms = torch.nn.utils.get_total_norm(grads, foreach=True)
    if max_norm <= 0 or (host_checks and bool((norms <= max_norm).all())):
        return norms  # also NaN and inf are multiplied below, as the library function does
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    if per_agent:
        # One multi-tensor product (one dispatch where a loop made one per tensor), each
        # gradient times the agents' coefficients shaped to broadcast over it (one view per
        # rank and dtype). CUDA's multi-tensor kernel wants equal shapes, so there PyTorch
        # still launches one product per tensor; only flat gradient buffers would change that.
        factors: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        for g in grads:
            if (g.dim(), g.dtype) not in factors:
                factors[g.dim(), g.dtype] = coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype)
        torch._foreach_mul_(grads, [factors[g.dim(), g.dtype] for g in grads])
    else:
        torch._foreach_mul_(grads, coef.to(grads[0].dtype))
    return norms


TF32 = {"matmul": False, "cudnn": True}
"""TF32 on CUDA, set at every training loop's start (PyTorch's own defaults, set explicitly so
that no setting made elsewhere in the process, a notebook's or a library's, changes a run's
numerics unseen): fp32 matmuls in full fp32, cuDNN's fp32 convolutions in TF32. `tf32_settings`
reads what is in force; finetuning records it in each agent's transfer.json."""


def tf32_settings() -> dict[str, bool]:
    """The TF32 switches in force (CUDA matmuls, cuDNN convolutions)."""
    return {
        "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn": bool(torch.backends.cudnn.allow_tf32),
    }


def prepare_device(device: torch.device) -> None:
    """Process-wide settings for a training loop on ``device`` (idempotent).

    CPU: :func:`keep_freed_memory`. CUDA: the `TF32` switches; cuDNN autotuning
    (``cudnn.benchmark``) is left off, as it made Nature pretraining and the finetuning loop
    slower on an H100 (benchmarks/README.md).
    """
    if device.type == "cpu":
        keep_freed_memory()
    elif device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = TF32["matmul"]
        torch.backends.cudnn.allow_tf32 = TF32["cudnn"]


__all__ = [
    "autocast",
    "autocast_reaches_vmap",
    "clip_gradients",
    "cpu_has_native_bf16",
    "keep_freed_memory",
    "prepare_device",
    "tf32_settings",
    "use_bf16",
]
