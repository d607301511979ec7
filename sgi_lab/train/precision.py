"""The precision a population's update runs in: fp32, bf16 by autocast, or bf16 by casting.

Autocast casts each operator's inputs as it dispatches them, but it does not reach inside
``torch.func.vmap`` (on a CPU, and on CUDA with torch 2.11: `sgi_lab.runtime.device.
autocast_reaches_vmap`), and a vmap'd population is how the GPU path runs. There the update
casts instead (``bf16-cast``): the stacked weights of the online, SPR-target and Q-target
networks and the noise samples are cast to bf16 once per update, outside vmap (one copy per
tensor for all agents; the gradient flows back through the cast to the fp32 weights, which Adam
updates in fp32), and the frames are prepared in bf16 as under autocast. What needs the range or
the precision stays fp32, as autocast would keep it: the normalisation layers' weights and
running statistics (`fp32_norms`: the layer runs on its input cast to fp32, its output cast
back, since a CPU's batch norm refuses bf16 inputs with fp32 statistics), every softmax and
log-softmax, the C51 target and its projection, the SPR, inverse and goal losses (the
objectives cast their inputs to fp32), the priorities and the logged values.

``auto`` (`Population.bf16_cast` None): cast on CUDA with ``amp``; fp32 on a CPU, where vmap
runs MinAtar's small networks and the CPU track's results were measured in fp32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

import torch
from torch import nn

from sgi_lab.runtime.device import autocast_reaches_vmap


class Population(Protocol):
    """What the precision reads of a `sgi_lab.train.population.Population` (which imports this
    module, so it is described here rather than imported)."""

    amp: bool
    bf16_cast: bool | None
    device: torch.device
    template: nn.Module
    vmapped: bool


__all__ = ["PRECISIONS", "cast_noise", "cast_weights", "fp32_norms", "update_precision"]

PRECISIONS = ("fp32", "bf16-autocast", "bf16-cast")
"""What `update_precision` answers; a finetuning run records it in its status."""

_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


def update_precision(pop: Population) -> str:
    """``fp32``, ``bf16-autocast`` (autocast reaches every operator: no vmap, or a vmap it
    reaches) or ``bf16-cast`` (a vmap autocast does not reach; see the module docstring)."""
    if pop.vmapped and not autocast_reaches_vmap(pop.device.type):
        forced = pop.bf16_cast
        cast = pop.amp and pop.device.type == "cuda" if forced is None else forced
        return "bf16-cast" if cast else "fp32"
    return "bf16-autocast" if pop.amp else "fp32"


def _cast_names(pop: Population) -> frozenset[str]:
    """The stacked tensors cast to bf16: every floating parameter but the normalisation
    layers' (buffers, batch-norm statistics among them, stay as they are: updated in place)."""
    names = pop.__dict__.get("_bf16_names")
    if names is None:
        kept = {
            f"{module_name}.{p}" if module_name else p
            for module_name, module in pop.template.named_modules()
            if isinstance(module, _NORMS)
            for p, _ in module.named_parameters(recurse=False)
        }
        names = frozenset(
            name
            for name, p in pop.template.named_parameters()
            if p.is_floating_point() and name not in kept
        )
        pop.__dict__["_bf16_names"] = names
    return names


def cast_weights(pop: Population, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` (a population's stacked online or target networks) with the parameters
    `_cast_names` names as bf16 copies (differentiable: gradients reach the fp32 originals)."""
    names = _cast_names(pop)
    return {k: v.to(torch.bfloat16) if k in names else v for k, v in tensors.items()}


def cast_noise(noise: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
    """Noise samples in bf16, so that a noisy weight built from bf16 parameters stays bf16."""
    if noise is None:
        return None
    return {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in noise.items()}


def _to_fp32(_module: nn.Module, args: tuple) -> tuple:
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


def _to_bf16(_module: nn.Module, _args: tuple, out: torch.Tensor) -> torch.Tensor:
    return out.to(torch.bfloat16)


@contextlib.contextmanager
def fp32_norms(pop: Population) -> Iterator[None]:
    """While active, each normalisation layer of the population's template runs in fp32 on its
    input cast from bf16 and hands bf16 on (autocast's fp32 policy, by forward hooks)."""
    handles = []
    try:
        for module in pop.template.modules():
            if isinstance(module, _NORMS):
                handles.append(module.register_forward_pre_hook(_to_fp32))
                handles.append(module.register_forward_hook(_to_bf16))
        yield
    finally:
        for handle in handles:
            handle.remove()
