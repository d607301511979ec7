"""How a population of finetuning agents acts: epsilon-greedy on noisy Q values while training
(rlpyt's sampling mode), greedy on noise-free ones when evaluated; one forward for all agents.

The functions read a `sgi_lab.train.population.Population`'s state (its stacked online networks,
noise samples and batch-norm statistics); they change nothing but the template's modes, which
they restore.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from sgi_lab.nets.encoders import prepare_pixels
from sgi_lab.runtime.device import autocast_reaches_vmap
from sgi_lab.runtime.graphs import GraphedCall
from sgi_lab.train.population import Population

__all__ = ["act", "acting_actions", "acting_q", "forward_graph", "greedy", "q_values"]


@torch.no_grad()
def act(
    pop: Population, obs: np.ndarray, eps: Sequence[float], rngs: Sequence[np.random.Generator]
) -> np.ndarray:
    """Epsilon-greedy actions of every agent on its current observation, in one forward.

    Noisy Q values with the noise of the last update and batch norm on running statistics
    (rlpyt's sampling mode). Each agent draws its epsilon decision and random action from its
    own ``rng`` (one draw each, as a run alone would), then the greedy forward runs for all
    agents at once unless every action came out random.

    Args:
        pop: the agents.
        obs: (N, *stacked_shape) uint8 ((N, 4, 84, 84) for Atari), one observation per agent.
        eps: per-agent epsilon.
        rngs: per-agent numpy generators.

    Returns:
        (N,) int64 actions, each within its game's action set.
    """
    n = pop.size
    random = np.empty(n, bool)
    actions = np.empty(n, np.int64)
    for i in range(n):
        random[i] = rngs[i].random(1)[0] < eps[i]
        actions[i] = rngs[i].integers(0, pop.model_args[i]["num_actions"], size=1)[0]
    if random.all():
        return actions
    x = torch.as_tensor(obs).to(pop.device, non_blocking=True)
    chosen = forward_graph(pop, "act", lambda x: acting_actions(pop, x), x).cpu().numpy()
    return np.where(random, actions, chosen)


def acting_actions(pop: Population, x: torch.Tensor) -> torch.Tensor:
    """(N,) greedy actions on the noisy Q values of (N, *stacked_shape) uint8 device frames."""
    return acting_q(pop, x).argmax(-1)


def acting_q(pop: Population, x: torch.Tensor) -> torch.Tensor:
    """(N, A) noisy Q values of (N, *stacked_shape) uint8 device frames, as acting sees them."""
    return q_values(pop, x[:, None], noise=True)[:, 0]


@torch.no_grad()
def greedy(pop: Population, obs: np.ndarray) -> np.ndarray:
    """Evaluation policy of every agent (`sgi_lab.train.evaluate.Policy`): greedy actions on
    noise-free Q values, batch norm on running statistics, one forward for all agents.

    Args:
        pop: the agents.
        obs: (N, E, *stacked_shape) uint8, E observations per agent.

    Returns:
        (N, E) int64 actions, each within its game's action set.
    """
    return q_values(pop, obs, noise=False).argmax(-1).cpu().numpy()


@torch.no_grad()
def q_values(pop: Population, obs: np.ndarray | torch.Tensor, noise: bool) -> torch.Tensor:
    """(N, E, A) Q values of (N, E, *stacked_shape) uint8 frames in evaluation mode (batch norm on
    running statistics), with the noisy layers' current noise or without noise."""
    x = torch.as_tensor(obs).to(pop.device, non_blocking=True)
    n, e = x.shape[:2]
    # bf16 only on a GPU: for one observation on a CPU the weight casts cost more than they save;
    # and like the update, fp32 under a vmap that autocast does not reach.
    amp = pop.amp and pop.device.type == "cuda"
    amp = amp and not (pop.vmapped and not autocast_reaches_vmap(pop.device.type))
    pop.template.eval()
    if not noise:
        pop.template.set_noise(False)
    try:
        with torch.autocast(pop.device.type, dtype=torch.bfloat16, enabled=amp):
            # Scaled outside vmap (a layout change cannot be asked for inside it).
            x = prepare_pixels(x.flatten(0, 1), channels_last=pop.template.channels_last)
            x = x.view(n, e, *x.shape[1:])

            def q(state, x, mask):
                return pop.call(state, lambda m, x: m.q_values(m.encode(x, prepared=True), mask), x)

            return pop.batched(q)(pop.online, x, pop.action_mask)
    finally:
        if not noise:
            pop.template.set_noise(pop.config.noisy_std > 0)
        pop.train_mode()


def forward_graph(
    pop: Population, name: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """``fn(x)``, replayed from a CUDA graph captured at the third call with this input shape
    when ``pop.uses_forward_graphs`` (`sgi_lab.runtime.graphs.GraphedCall`): the forward reads the
    networks' stacked tensors, which every update changes in place, so a replay sees the
    current weights, noise and statistics (`sgi_lab.runtime.graphs` checks it on a CPU). Saves the
    forward's few hundred kernel launches per environment step."""
    if not pop.uses_forward_graphs:
        return fn(x)
    graphs = pop.__dict__.setdefault("_graphs", {})
    key = (name, tuple(x.shape), x.dtype)
    if key not in graphs:
        graphs[key] = GraphedCall(fn, warmup=2)
    return graphs[key](x).clone()
