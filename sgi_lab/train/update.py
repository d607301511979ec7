"""The Rainbow + SPR update of a population of finetuning agents, one function per stage.

`update` reads like SB3's ``DQN.train``: the batch (every random number of the step, every
observation augmented) -> targets under ``no_grad`` -> losses -> Adam step -> priorities and logs.
`sgi_lab.train.population.Population` only holds the state it works on (stacked parameters, targets,
optimizer, generators, noise), and `sgi_lab.train.population_steps` steps it (draws, clipping, Adam,
the targets' EMA); `learn` is the training loop's entry point (a prioritized batch,
the update, the new priorities written back; replayed from one CUDA graph on a GPU).

Per agent, the losses are (paper Sec. 4, App. C; SPR's settings)::

    total = mean_b w_b (C51_b + spr_coefficient * SPR_b [+ goal_weight * G_b + inverse_weight * I_b])

with w the importance-sampling weights; SPR, goal RL and inverse dynamics come from the SGI loss
composition shared with pretraining (`sgi_lab.train.sgi_loss`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from sgi_lab.augment.frames import augmented_frames
from sgi_lab.config import FinetuneConfig
from sgi_lab.data.population_replay import PopulationBatch, PopulationReplay
from sgi_lab.data.sampler import SequenceBatch
from sgi_lab.nets import SGIModel
from sgi_lab.nets.encoders import closed_form_gradients
from sgi_lab.objectives import c51_kl, c51_loss, c51_target, goals_from_draws
from sgi_lab.runtime.cpu_settings import time_step
from sgi_lab.runtime.graphs import GraphedCall
from sgi_lab.train import population_steps as steps
from sgi_lab.train.population import Population, masked_mean
from sgi_lab.train.precision import cast_noise, cast_weights, fp32_norms, update_precision
from sgi_lab.train.sgi_loss import SGITargets, finetuning_settings, sgi_loss_terms, weighted_sum

__all__ = [
    "StagedBatch",
    "UpdateInputs",
    "UpdateTargets",
    "learn",
    "learn_step",
    "measure_update",
    "stage",
    "staged_batch",
    "update",
]

Tensors = dict[str, torch.Tensor]


class StagedBatch(NamedTuple):
    """Every agent's sampled sequences on the device, stacked along the agent axis, as the
    samplers gave them (uint8 frames: augmentation happens in the update).

    Attributes:
        obs: (N, B, K+1, *stacked_shape) frame stacks ((4, 84, 84) for Atari) of s_t..s_{t+K}.
        boot_obs: (N, B, *stacked_shape) the n-step bootstrap states.
        actions: (N, B, K+1) int64 actions a_t..a_{t+K}.
        valid: (N, B, K+1) bool, False past an episode's end.
        returns: (N, B) n-step returns of clipped rewards.
        discounts: (N, B) gamma^n, or 0 after a terminal.
        weights: (N, B) importance-sampling weights.
        goal_obs: (N, B, *stacked_shape) future states for goal RL (``ssl: all``), else None.
    """

    obs: torch.Tensor
    boot_obs: torch.Tensor
    actions: torch.Tensor
    valid: torch.Tensor
    returns: torch.Tensor
    discounts: torch.Tensor
    weights: torch.Tensor
    goal_obs: torch.Tensor | None = None


class UpdateInputs(NamedTuple):
    """What the losses read, per agent under vmap: the staged batch with every observation
    augmented by the update's draws (prepared for the encoders), the noisy-net noise samples,
    the action mask, and goal RL's draws for ``ssl: all``."""

    obs: torch.Tensor  # (K+1, B, *stacked_shape) per agent: time-major
    boot_obs: torch.Tensor
    actions: torch.Tensor
    valid: torch.Tensor
    returns: torch.Tensor
    discounts: torch.Tensor
    weights: torch.Tensor
    mask: torch.Tensor
    noise_target: Tensors
    noise_online: Tensors
    goal_obs: torch.Tensor | None = None
    noise_goal: Tensors | None = None
    goal_draws: Tensors | None = None


class UpdateTargets(NamedTuple):
    """One agent's targets: the C51 n-step target distribution (B, atoms), the mean bootstrap
    Q value (for logs) and the SSL losses' targets."""

    rl: torch.Tensor
    q_next: torch.Tensor
    ssl: SGITargets


def update(
    pop: Population, staged: StagedBatch, count: bool = True
) -> tuple[Tensors, torch.Tensor]:
    """One gradient update of every agent of ``pop`` from staged device tensors (`stage`).

    Eager on every device; `learn` adds the replay's sampling and priorities around it (and on
    CUDA captures the three as one graph, which is why it counts the update itself: ``count``
    False, as a Python counter in a captured function would move only at the capture).

    Returns:
        Per-agent stats, each an (N,) tensor left on the device (losses/rl, losses/spr,
        losses/total [, losses/goal_rl, losses/inverse], charts/q_mean, charts/q_next_mean,
        and charts/grad_norm, the norm before clipping, where ``grad_clip`` > 0: without
        clipping no norm is taken), and the (N, B) new priorities (C51 KL), on the device.

    Raises:
        FloatingPointError: an agent's loss is NaN or infinite (checked on a CPU every update,
            before anything changes; on other devices when the stats are read).
    """
    cfg = pop.config
    # 1. The batch: every random number of the update (one draw per agent from its own
    #    generator), every observation augmented, all agents at once.
    x = update_inputs(pop, staged)

    # 2-3. Targets under no_grad, then the losses; per agent, all agents at once.
    def agent_losses(online: Tensors, spr_target: Tensors, q_target: Tensors, fields: dict):
        x = UpdateInputs(**fields)  # vmap maps tensors only: the absent fields travel as absent
        if shared_online_pass(pop):
            z0, logits, boot = online_pass(pop, online, x)
        else:
            # s_t's online latent first: with batch norm, the running statistics then move in
            # the reference's order (s_t, then the bootstrap state).
            z0 = pop.call(online, lambda m, o: m.encode(o, prepared=True), x.obs[0])
            logits, boot = None, None
        targets = compute_targets(pop, online, spr_target, q_target, x, boot)
        return compute_losses(pop, online, x, targets, z0, logits)

    q_target = pop.q_target if pop.q_target is not None else {}
    networks = (pop.online, pop.spr_target, q_target)
    present = {k: v for k, v in x._asdict().items() if v is not None}
    precision = update_precision(pop)
    if precision == "bf16-cast":  # once for all agents, outside vmap (`sgi_lab.train.precision`)
        networks = tuple(cast_weights(pop, n) for n in networks)
        present.update({k: cast_noise(present[k]) for k in present if k.startswith("noise_")})
    casting = fp32_norms(pop) if precision == "bf16-cast" else contextlib.nullcontext()
    autocast = torch.autocast(pop.device.type, torch.bfloat16, precision == "bf16-autocast")
    with casting, autocast, closed_form_gradients(lean_kernels(pop)):
        total, stats, priorities = pop.batched(agent_losses)(*networks, present)
    if pop.host_checks:
        check_finite(pop, total)

    # 4. The step: the gradient of the sum is each agent's own; clipped per agent. Without
    #    clipping no norm is taken (a pass over every gradient, 3 operators): the grad-norm
    #    chart is then absent, not estimated.
    pop.optimizer.zero_grad(set_to_none=True)
    total.sum().backward()
    grad_norm = steps.clip_gradients(pop, cfg.grad_clip) if cfg.grad_clip > 0 else None
    if cfg.spr_target_update == "before_step":  # toward the weights the losses used
        steps.update_spr_target(pop)
    steps.step_optimizer(pop)
    with torch.no_grad():  # acting uses the update's noise (one multi-tensor copy)
        noise = list(x.noise_online)
        torch._foreach_copy_([pop.online[k] for k in noise], [x.noise_online[k] for k in noise])
    if cfg.spr_target_update == "after_step":
        steps.update_spr_target(pop)
    if count:
        steps.count_update(pop)

    # 5. Logs (priorities go back to the replay in `learn`).
    stats["losses/total"] = total.detach()
    if grad_norm is not None:
        stats["charts/grad_norm"] = grad_norm
    return stats, priorities.detach()


def update_inputs(pop: Population, staged: StagedBatch) -> UpdateInputs:
    """The update's inputs: the staged tensors with every observation augmented by the
    update's draws (`sgi_lab.train.population_steps.draw`; `sgi_lab.augment.frames`), the noise samples and
    goal draws."""
    cfg = pop.config
    drawn = steps.draw(pop, cfg.batch_size, staged.obs.shape[2])
    dtype = torch.bfloat16 if pop.update_amp else torch.float32

    def frames(frames: torch.Tensor, view: str, **kw: Any) -> torch.Tensor:
        return augmented_frames(
            frames,
            drawn.get(f"corners_{view}"),
            drawn.get(f"jitter_{view}"),
            channels_last=pop.template.channels_last,
            dtype=dtype,
            pad=pop.pad,
            **kw,
        )

    goals = cfg.uses_goal_rl
    return UpdateInputs(
        obs=frames(staged.obs, "obs", time_major=True),  # (N, K+1, B, *stacked_shape)
        boot_obs=frames(staged.boot_obs, "boot"),
        actions=staged.actions,
        valid=staged.valid,
        returns=staged.returns,
        discounts=staged.discounts,
        weights=staged.weights,
        mask=pop.action_mask,
        noise_target=drawn["noise_target"],
        noise_online=drawn["noise_online"],
        goal_obs=frames(staged.goal_obs, "goal") if goals else None,
        noise_goal=drawn["noise_goal"] if goals else None,
        goal_draws=drawn["goal_draws"] if goals else None,
    )


def lean_kernels(pop: Population) -> bool:
    """Whether the update trades FLOPs or host work for fewer operators (`online_pass`,
    `sgi_lab.nets.encoders.closed_form_gradients`, the agent-axis layers of
    `sgi_lab.nets.agent_axis`): config ``lean_kernels`` (on by default: fewer kernel launches
    on a GPU, and on a CPU a MinAtar population's learn step took 0.88x the time at 16 agents
    and 0.90x at 33, interleaved, one thread, loaded 2-core Zen 4, 2026-11-29). They act only
    under vmap, so a population of one, or one run in a loop, is unchanged by it.
    ``pop.lean_kernels``, where set, decides (`benchmarks/learn_ops.py` counts a GPU's path
    with it)."""
    explicit = vars(pop).get("lean_kernels")
    if explicit is not None:
        return bool(explicit)
    return pop.config.lean_kernels


def shared_online_pass(pop: Population) -> bool:
    """Whether the online network reads s_t and the bootstrap state in one pass
    (`online_pass`): with `lean_kernels`, under vmap (where each pass is a kernel per operator
    for all agents) and with an encoder without batch norm, whose latents are per-sample
    functions (a batch norm's statistics would mix the two batches)."""
    return lean_kernels(pop) and pop.vmapped and not pop.template.encoder_has_batch_norm


def online_pass(
    pop: Population, online: Tensors, x: UpdateInputs
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One agent's online encoder and Q head (the update's noise) over s_t and the bootstrap
    state together, one pass of each where there were two: s_t's latent (B, C, H, W) and logits
    (B, A, Z) with their gradient, and the bootstrap state's latent and logits, detached (the
    targets read them under no_grad, so no gradient reaches the parameters through them)."""
    batch = x.boot_obs.shape[0]
    mask = x.mask

    def encode_and_score(m: SGIModel, o: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = m.encode(o, prepared=True)
        return z, m.q_logits(z, mask)

    both = torch.cat([x.obs[0], x.boot_obs])
    z, logits = pop.call({**online, **x.noise_online}, encode_and_score, both)
    return z[:batch], logits[:batch], (z[batch:].detach(), logits[batch:].detach())


@torch.no_grad()
def compute_targets(
    pop: Population,
    online: Tensors,
    spr_target: Tensors,
    q_target: Tensors,
    x: UpdateInputs,
    boot: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> UpdateTargets:
    """One agent's targets (runs under vmap): the C51 n-step target distribution and the SSL
    losses' `SGITargets`.

    The C51 target bootstraps from the target network (the online parameters with their own
    noise sample unless there is a separate copy); with double Q the action is picked by the
    online network with the update's noise. SPR's targets are the EMA target's projections of
    s_{t+1..t+K}, encoded in one time-major pass (with s_t and the goal observations for
    ``ssl: all``, `goal_rl_targets`). ``boot``: the online latent and logits of the bootstrap
    state where `online_pass` computed them with s_t's.
    """
    cfg, call, mask = pop.config, pop.call, x.mask
    support = pop.template.support
    if boot is None:
        z_boot = call(online, lambda m, o: m.encode(o, prepared=True), x.boot_obs)
    else:
        z_boot = boot[0]
    if q_target:
        target_logits = call(
            {**q_target, **x.noise_target},
            lambda m, o: m.q_logits(m.encode(o, prepared=True), mask),
            x.boot_obs,
        )
    else:
        target_logits = call({**online, **x.noise_target}, lambda m, z: m.q_logits(z, mask), z_boot)
    if boot is None:
        online_logits = call({**online, **x.noise_online}, lambda m, z: m.q_logits(z, mask), z_boot)
    else:
        online_logits = boot[1]
    online_probs = F.softmax(online_logits.float(), -1)  # fp32 (as autocast) when bf16 is cast
    selection = online_probs if cfg.double_q else None
    rl = c51_target(
        F.softmax(target_logits.float(), -1), x.returns, x.discounts, support, selection
    )
    q_next = masked_mean((online_probs * support).sum(-1), mask)
    if cfg.uses_goal_rl:
        ssl = goal_rl_targets(pop, online, spr_target, q_target, x)
    elif cfg.rollout_steps > 0:
        ssl = SGITargets(y=spr_projections(pop, spr_target, x.obs))
    else:
        ssl = SGITargets()
    return UpdateTargets(rl, q_next, ssl)


def spr_projections(pop: Population, spr_target: Tensors, obs: torch.Tensor) -> torch.Tensor:
    """(B, K, P) SPR's targets p_m(z~_{t+1..t+K}) from the time-major (K+1, B, ...) sequence.
    With batch norm, each target pass normalises with its own batch: as in the reference, the
    sequence s_t..s_{t+K} is one pass, s_t included."""
    call, separate = pop.call, pop.template.encoder_has_batch_norm
    z = call(spr_target, lambda m, o: m.encode(o, prepared=True), obs if separate else obs[1:])
    z = z[1:] if separate else z
    return call(spr_target, lambda m, z: m.project(z), z).transpose(0, 1)


def goal_rl_targets(
    pop: Population, online: Tensors, spr_target: Tensors, q_target: Tensors, x: UpdateInputs
) -> SGITargets:
    """``ssl: all``'s targets: SPR's projections, the goals (`goals_from_draws`) and goal RL's
    bootstrap at s_{t+1} from ``goal_target`` (SPR's EMA target, or the RL target as the
    reference), the action picked by the online network with ``goal_double_q``. The goal
    observations are encoded with the sequence, or (batch norm) in a pass of their own."""
    cfg, call, mask, obs = pop.config, pop.call, x.mask, x.obs
    goal_target = {**spr_target, **x.noise_goal}

    def encode(o: torch.Tensor) -> torch.Tensor:
        return call(goal_target, lambda m, o: m.encode(o, prepared=True), o)

    if pop.template.encoder_has_batch_norm:
        z, z_goal = encode(obs), encode(x.goal_obs)
    else:
        z = encode(torch.cat([obs, x.goal_obs[None]], 0))
        z, z_goal = z[:-1], z[-1]
    goals, _ = goals_from_draws(z_goal, x.goal_draws)
    if update_precision(pop) == "bf16-cast":  # the networks' dtype (autocast casts it itself)
        goals = goals.to(torch.bfloat16)

    def goal_probs(params: Tensors, z1: torch.Tensor) -> torch.Tensor:
        logits = call(params, lambda m, z, g: m.goal_q_logits(z, g, mask), z1, goals)
        return F.softmax(logits.float(), -1)

    # The goal bootstrap at s_{t+1}: SPR's EMA target, or (the reference's agent target
    # model) the RL target with its noise sample, which is the online network when
    # target_tau is 1; double Q: the online network, with the update's noise, picks.
    rl_target = cfg.goal_target == "rl_target"
    z1_online = (
        call(online, lambda m, o: m.encode(o, prepared=True), obs[1])
        if cfg.goal_double_q or (rl_target and not q_target)
        else None
    )
    if rl_target and q_target:
        z1_target = call(q_target, lambda m, o: m.encode(o, prepared=True), obs[1])
        goal_next = goal_probs({**q_target, **x.noise_target}, z1_target)
    elif rl_target:
        goal_next = goal_probs({**online, **x.noise_target}, z1_online)
    else:
        goal_next = goal_probs(goal_target, z[1])
    goal_selection = (
        goal_probs({**online, **x.noise_online}, z1_online) if cfg.goal_double_q else None
    )
    y = call(spr_target, lambda m, z: m.project(z), z).transpose(0, 1)
    return SGITargets(
        y=y[:, -cfg.rollout_steps :],
        z=z[:2].transpose(0, 1).flatten(2),
        goals=goals,
        goal_next=goal_next,
        goal_selection=goal_selection,
    )


def compute_losses(
    pop: Population,
    online: Tensors,
    x: UpdateInputs,
    targets: UpdateTargets,
    z0: torch.Tensor,
    q_logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Tensors, torch.Tensor]:
    """One agent's weighted loss (scalar), stats and new priorities (B,) from the online latent
    ``z0`` of s_t (with gradient) and its logits where `online_pass` has them; runs under vmap."""
    cfg, mask, actions = pop.config, x.mask, x.actions
    settings = finetuning_settings(cfg)

    def forward(m: SGIModel) -> tuple[torch.Tensor, torch.Tensor, Tensors]:
        logits = m.q_logits(z0, mask) if q_logits is None else q_logits
        ssl, _ = sgi_loss_terms(m, z0, actions, x.valid, targets.ssl, settings, mask)
        return logits, c51_loss(logits, actions[:, 0], targets.rl), ssl

    logits, rl, ssl = pop.call({**online, **x.noise_online}, forward)
    logits = logits.detach()
    total = (x.weights * (rl + weighted_sum(ssl, settings))).mean()
    losses = {"rl": rl, **ssl}
    priorities = c51_kl(logits, actions[:, 0], targets.rl)
    probs = F.softmax(logits.float(), -1)
    stats = {f"losses/{k}": v.detach().mean() for k, v in losses.items()}
    stats["charts/q_mean"] = masked_mean((probs * pop.template.support).sum(-1), mask).mean()
    stats["charts/q_next_mean"] = targets.q_next.mean()
    return total, stats, priorities


def check_finite(pop: Population, total: torch.Tensor) -> None:
    """Raise FloatingPointError naming the agents whose loss is NaN or infinite."""
    if not bool(torch.isfinite(total).all()):
        bad = [i for i, t in enumerate(total.tolist()) if not math.isfinite(t)]
        raise FloatingPointError(
            f"non-finite loss at update {pop.updates} for agent(s) "
            + ", ".join(f"{pop.configs[i].game} seed {pop.configs[i].seed}" for i in bad)
        )


# -- the training loop's entry point -----------------------------------------------------------


def learn(pop: Population, replay: PopulationReplay, beta: float) -> Tensors:
    """One learning step of every agent from its replay: a prioritized batch, `update`, the new
    priorities written back. On CUDA with ``cuda_graphs`` the three are captured as ONE graph
    after three eager steps and replayed from then on (the replay's draws, beta and priorities
    are device state, so nothing is launched from Python and nothing crosses to the host;
    `sgi_lab.runtime.graphs` checks it on a CPU).

    Args:
        pop: the agents.
        replay: every agent's replay (`PopulationReplay.ready` already true).
        beta: importance-sampling exponent.

    Returns:
        Per-agent stats, (N,) tensors left on the device (see `update`).
    """
    replay.set_beta(beta)
    if not pop.uses_cuda_graph:
        stats = learn_step(pop, replay)
    else:
        graphs = pop.__dict__.setdefault("_graphs", {})
        key = ("learn", id(replay))
        if key not in graphs:
            graphs[key] = GraphedCall(
                lambda: learn_step(pop, replay),
                warmup=3,
                generators=[*pop.generators, *replay.generators],
                before_capture=lambda: pop.optimizer.zero_grad(set_to_none=True),
            )
        stats = graphs[key]()
    steps.count_update(pop)
    # A graph overwrites its outputs at the next replay: hand out copies.
    return {k: v.clone() for k, v in stats.items()}


def learn_step(pop: Population, replay: PopulationReplay) -> Tensors:
    """Sample ``batch_size`` sequences per agent (at the replay's beta), update, write the
    priorities: what a graph captures."""
    batch = replay.sample_at_beta(pop.config.batch_size)
    stats, priorities = update(pop, staged_batch(batch, pop.config.uses_goal_rl), count=False)
    replay.update_priorities(batch.indices, priorities)
    return stats


# -- batches -----------------------------------------------------------------------------------


def stage(
    pop: Population, batches: Sequence[SequenceBatch], weights: Sequence[np.ndarray]
) -> StagedBatch:
    """The agents' sampler batches stacked along the agent axis and copied to the device, as
    they are (uint8 frames; augmentation happens in the update)."""

    def stacked(arrays: Sequence[np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(np.stack(arrays)).to(pop.device, non_blocking=True)

    goals = pop.config.uses_goal_rl
    return StagedBatch(
        obs=stacked([b.obs for b in batches]),  # (N, B, K+1, *stacked_shape)
        boot_obs=stacked([b.bootstrap_obs for b in batches]),
        actions=stacked([b.actions for b in batches]),
        valid=stacked([b.valid for b in batches]),
        returns=stacked([b.returns for b in batches]),
        discounts=stacked([b.bootstrap_discount for b in batches]),
        weights=stacked([np.asarray(w, np.float32) for w in weights]),
        goal_obs=stacked([b.goal_obs for b in batches]) if goals else None,
    )


def staged_batch(batch: PopulationBatch, goals: bool) -> StagedBatch:
    """A replay batch as the update's staged inputs (no copy)."""
    return StagedBatch(
        obs=batch.obs,
        boot_obs=batch.bootstrap_obs,
        actions=batch.actions,
        valid=batch.valid,
        returns=batch.returns,
        discounts=batch.bootstrap_discount,
        weights=batch.weights,
        goal_obs=batch.goal_obs if goals else None,
    )


def measure_update(
    configs: Sequence[FinetuneConfig],
    model_args: Sequence[dict[str, Any]],
    bf16: bool,
    channels_last: bool,
    warmup: int = 2,
    repeats: int = 3,
) -> float:
    """Seconds per update of a throwaway population shaped like the real one (same configs and
    architectures, fresh weights, random frames) under the given CPU settings: what
    `sgi_lab.runtime.cpu_settings.choose_cpu_settings` times to settle ``"auto"``."""
    configs = [
        dataclasses.replace(c, cpu_amp=bf16, channels_last=channels_last, device="cpu")
        for c in configs
    ]
    with torch.random.fork_rng():  # the real run's random streams are left as they were
        models = [SGIModel(**args) for args in model_args]
        pop = Population.build(configs, models, loaded=(), device="cpu")
        cfg = pop.config
        rng = np.random.default_rng(0)
        # (agents, batch_size, steps) of every staged tensor
        shape = (pop.size, cfg.batch_size, cfg.rollout_steps + 1)

        def frames(*shape: int) -> torch.Tensor:
            stacked = cfg.observation_spec.stacked_shape
            return torch.from_numpy(rng.integers(0, 255, (*shape, *stacked), dtype=np.uint8))

        staged = StagedBatch(
            obs=frames(*shape),
            boot_obs=frames(*shape[:2]),
            actions=torch.zeros(shape, dtype=torch.int64),
            valid=torch.ones(shape, dtype=torch.bool),
            returns=torch.zeros(shape[:2]),
            discounts=torch.full(shape[:2], 0.9),
            weights=torch.ones(shape[:2]),
            goal_obs=frames(*shape[:2]) if cfg.uses_goal_rl else None,
        )
        return time_step(lambda: update(pop, staged), warmup=warmup, repeats=repeats, budget_s=1.0)
