"""What a population's update does to its state, one function per step, each taking the
`sgi_lab.train.population.Population` it works on: the update's random draws (`draw`), per-agent
gradient clipping (`clip_gradients`), the Adam step at each agent's own learning rates
(`step_optimizer`), the SPR target's EMA (`update_spr_target`) and the update's count with the
separate Q target's periodic move (`count_update`, `update_q_target`).

`sgi_lab.train.update.update` calls them in SB3's order; `Population` holds only the state they
read and write (parameters, buffers, optimizer state, generators).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from sgi_lab.augment import draws
from sgi_lab.augment.ops import jitter_factor
from sgi_lab.nets.ema import lerp_
from sgi_lab.runtime.device import clip_gradients as clip_gradient_norms

if TYPE_CHECKING:
    from sgi_lab.train.population import Population

__all__ = [
    "clip_gradients",
    "count_update",
    "draw",
    "draw_layouts",
    "step_optimizer",
    "update_q_target",
    "update_spr_target",
]


# -- random draws ------------------------------------------------------------------------------


def draw_layouts(pop: Population, batch_size: int, steps: int) -> tuple[draws.Layout, ...]:
    """Where each random number of an update lies in an agent's draw (`sgi_lab.augment.draws`):
    uniforms (crop corners; goal alpha, swaps and swap offsets), normals (intensity jitter, goal
    noise) and noisy-net noise (signed square roots of normals), for ``batch_size`` samples of
    ``steps`` steps. The noise parts have the layer sizes of the full 18-action set whatever the
    widest game of the population, so an agent's draws never depend on its companions; each
    agent uses the first entries of its part (the rest falls on padded actions). Cached on
    ``pop`` per (batch_size, steps)."""
    cached = pop.__dict__.setdefault("_layouts", {})
    if (batch_size, steps) in cached:
        return cached[batch_size, steps]
    cfg, goals = pop.config, pop.config.uses_goal_rl
    views = [("obs", (batch_size, steps)), ("boot", (batch_size,))]
    views += [("goal", (batch_size,))] if goals else []
    uniform: list[tuple[str, tuple[int, ...]]] = []
    normal: list[tuple[str, tuple[int, ...]]] = []
    if cfg.augment:
        # No shift of a grid (pad 0): no corners drawn; Atari's layout is as it was.
        if pop.pad > 0:
            uniform += [(f"corners_{v}", (*shape, 2)) for v, shape in views]
        normal += [(f"jitter_{v}", shape) for v, shape in views]
    if goals:
        normal.append(("goal_noise", (batch_size, pop.template.latent_size)))
        uniform.append(("goal_alpha", (batch_size, 1)))
        if batch_size > 1:
            uniform += [("goal_swap", (batch_size,)), ("goal_offset", (batch_size,))]
    noise = [
        (f"{draw}/{name}.{part}", (size,))
        for draw in ("target", "online", "goal")[: 3 if goals else 2]
        for name, sizes in pop.canonical_noise.items()
        for part, size in zip(("eps_in", "eps_out"), sizes, strict=True)
    ]
    layouts = cached[batch_size, steps] = tuple(map(draws.Layout, (uniform, normal, noise)))
    return layouts


def draw(pop: Population, batch_size: int, steps: int) -> dict[str, Any]:
    """Every random number of one update for every agent, from one uniform draw per agent (its
    own generator) turned into named (N, ...) draws by whole-population operations:
    ``corners_{obs,boot,goal}`` (int64 crop corners), ``jitter_{obs,boot,goal}`` (intensity
    factors), ``noise_{target,online,goal}`` (name -> noisy-layer noise at this population's
    widths) and ``goal_draws`` (`sgi_lab.objectives.goals_from_draws`'s input)."""
    uniform, normal, noise = draw_layouts(pop, batch_size, steps)
    u = draws.uniforms(pop.generators, uniform.size + normal.size + noise.size, pop.device)
    gauss = draws.normal(u[:, uniform.size :])
    uni = uniform.split(u[:, : uniform.size])
    nor = normal.split(gauss[:, : normal.size])
    eps = noise.split(_signed_sqrt(gauss[:, normal.size :]))
    out: dict[str, Any] = {}
    for k, v in uni.items():
        if k.startswith("corners_"):
            out[k] = draws.integers(v, 0, 2 * pop.pad + 1)
    for k, v in nor.items():
        if k.startswith("jitter_"):
            out[k] = jitter_factor(v)
    for key in eps:
        which, name = key.split("/")
        width = pop.online[name].shape[1]
        out.setdefault(f"noise_{which}", {})[name] = eps[key][:, :width]
    if "goal_noise" in nor:
        out["goal_draws"] = {"noise": nor["goal_noise"], "alpha": uni["goal_alpha"]}
        if "goal_swap" in uni:
            out["goal_draws"]["swap"] = uni["goal_swap"]
            out["goal_draws"]["offset"] = draws.integers(uni["goal_offset"], 1, batch_size)
    return out


def _signed_sqrt(x: torch.Tensor) -> torch.Tensor:
    return x.sign() * x.abs().sqrt()


# -- the step ----------------------------------------------------------------------------------


@torch.no_grad()
def clip_gradients(pop: Population, max_norm: float) -> torch.Tensor:
    """Scale each agent's gradients so that its own total norm is at most ``max_norm``
    (`sgi_lab.runtime.device.clip_gradients`, per agent); returns the (N,) norms before
    clipping. ``max_norm <= 0`` only measures."""
    if not any(p.grad is not None for p in pop.trainable()):
        return torch.zeros(pop.size, device=pop.device)
    return clip_gradient_norms(pop.trainable(), max_norm, pop.host_checks, per_agent=True)


def step_optimizer(pop: Population) -> None:
    """One Adam step of every agent, each at its own learning rates: Adam's moments do not
    depend on the learning rate (no weight decay), so scaling an agent's slice of the step by
    its rate over the group's (`Population.lr_factors`, at most 1) is that agent's own Adam
    step."""
    if not pop.lr_factors:
        pop.optimizer.step()
        return
    with torch.no_grad():
        before = {k: pop.online[k].detach().clone() for k in pop.lr_factors}
    pop.optimizer.step()
    with torch.no_grad():
        for k, factor in pop.lr_factors.items():
            # lerp is exact at factors 0 and 1: such an agent's slice is Adam's own step
            pop.online[k].copy_(torch.lerp(before[k], pop.online[k], factor))


@torch.no_grad()
def update_spr_target(pop: Population) -> None:
    """EMA step of the SPR target (the tensors `Population.ema_names` lists), after every
    update."""
    names = pop.ema_names()
    targets = [pop.spr_target[k] for k in names]
    lerp_(targets, [pop.online[k].detach() for k in names], 1.0 - pop.config.spr_ema_tau)


@torch.no_grad()
def update_q_target(pop: Population) -> None:
    """Move the separate Q target toward the online network by ``target_tau`` (integer buffers
    copied); `count_update` calls it every ``target_update_period`` updates."""
    floats = [k for k, v in pop.online.items() if v.is_floating_point() and ".eps_" not in k]
    lerp_(
        [pop.q_target[k] for k in floats],
        [pop.online[k].detach() for k in floats],
        pop.config.target_tau,
    )
    for k, v in pop.online.items():
        if not v.is_floating_point():
            pop.q_target[k].copy_(v)


def count_update(pop: Population) -> None:
    """After every update: count it, and move a separate Q target every
    ``target_update_period`` updates."""
    pop.updates += 1
    if pop.q_target is not None and pop.updates % pop.config.target_update_period == 0:
        update_q_target(pop)
