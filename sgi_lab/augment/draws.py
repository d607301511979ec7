"""Every random number of a step for many agents, from one uniform draw per agent.

A population's update needs, per agent, crop offsets, intensity jitter, noisy-net noise and goal
noise. Drawing each from the agent's own ``torch.Generator`` keeps the agents independent, but
costs a few kernels per draw per agent: on a GPU, where every kernel is a launch, that grew the
update by ~130 kernels per agent (~250 with goals), more than the batched networks themselves
for a population of a dozen. Here each agent makes ONE draw of U uniforms from its own
generator, at a fixed `Layout` that depends on the config alone (never on which other agents
share the population), and the population turns the (N, U) block into every named draw with a
handful of whole-block operations: `normal` (inverse CDF) and `integers`.

An agent's numbers are therefore the same alone and in any population, the generators'
checkpoint format is unchanged, and on CUDA the per-agent draws are the only per-agent kernels
of the step (graph-safe: each generator is registered with the captured graph).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

# The float32 grid half-step that keeps 2u - 1 off +-1 (see `normal`).
_HALF_STEP = 2.0**-24


class Layout:
    """Named parts of an agent's uniform draw, laid end to end in the order given.

    >>> layout = Layout([("shift", (2, 3)), ("alpha", (2,))])
    >>> layout.size
    8
    >>> parts = layout.split(torch.arange(16.0).view(2, 8))
    >>> parts["alpha"].tolist()
    [[6.0, 7.0], [14.0, 15.0]]
    """

    def __init__(self, parts: Iterable[tuple[str, Sequence[int]]]) -> None:
        self.parts: dict[str, tuple[int, tuple[int, ...]]] = {}
        offset = 0
        for name, shape in parts:
            if name in self.parts:
                raise ValueError(f"draw {name!r} appears twice in the layout")
            shape = tuple(int(s) for s in shape)
            self.parts[name] = (offset, shape)
            offset += math.prod(shape)
        self.size = offset

    def split(self, u: torch.Tensor) -> dict[str, torch.Tensor]:
        """(..., size) -> name -> (..., *shape) views, no copy."""
        if u.shape[-1] != self.size:
            raise ValueError(f"expected a last axis of {self.size} draws, got {u.shape[-1]}")
        return {
            name: u[..., start]
            if not shape
            else u[..., start : start + math.prod(shape)].unflatten(-1, shape)
            for name, (start, shape) in self.parts.items()
        }


def uniforms(
    generators: Sequence[torch.Generator], size: int, device: torch.device | str
) -> torch.Tensor:
    """(N, size) float32 uniforms in [0, 1): row i from ``generators[i]`` alone, one kernel per
    agent written in place (no stacking copy)."""
    out = torch.empty(len(generators), size, device=device)
    for row, g in zip(out, generators, strict=True):
        row.uniform_(generator=g)
    return out


def normal(u: torch.Tensor) -> torch.Tensor:
    """Standard normals from float32 uniforms in [0, 1), by the inverse CDF, one value each.

    ``2u - 1`` is exact for float32 u on the 2**-24 grid (and rounds toward it below), and
    adding 2**-24 keeps it strictly inside (-1, 1): the result is finite, at most ~5.4 in
    magnitude, and symmetric about 0.
    """
    return torch.erfinv(u * 2.0 - (1.0 - _HALF_STEP)) * math.sqrt(2.0)


def integers(u: torch.Tensor, low: int, high: int) -> torch.Tensor:
    """Uniform int64 in ``low..high-1`` from uniforms in [0, 1) (floor of a scaled uniform;
    clamped, since float32 rounding can carry ``u * n`` up to ``n``)."""
    if high <= low:
        raise ValueError(f"empty integer range {low}..{high - 1}")
    n = high - low
    return (u * n).floor_().clamp_(max=n - 1).long() + low
