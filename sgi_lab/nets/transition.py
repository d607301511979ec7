"""SPR's latent transition model h(z, a) -> z'."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sgi_lab.nets.agent_axis import (
    agent_axis_here,
    agents_first,
    agents_in_channels,
    batch_norm,
    conv2d,
    fresh_view,
)
from sgi_lab.nets.encoders import renormalize


class TransitionModel(nn.Module):
    """Conv net over the latent concatenated with one-hot action planes.

    Layout as the reference ``TransitionModel`` with SGI's defaults (``dynamics_blocks=0``,
    ``residual_tm=0``, ``hidden_size = channels``): conv3x3(C + A -> C) -> ReLU -> BN ->
    conv3x3(C -> C) -> ReLU -> per-sample min-max renormalization.

    The first conv is stored as one ``Conv2d(C + A, C)`` (so checkpoints match the textbook
    layout), but the action planes are never materialised: a one-hot plane convolved with the
    action slice of the kernel is a fixed (C, H, W) map per action, so we convolve the A
    one-hot planes once per call and add the map of each sample's action. Same numbers, ~A/(C+A)
    fewer FLOPs in that conv. In a population's update within `lean_kernels` the convs and the
    norm run with the agent axis explicit (`sgi_lab.nets.agent_axis`): one grouped operator each
    for all agents, without vmap's re-layouts.

    Args:
        channels: latent channels C.
        num_actions: A.
    """

    def __init__(self, channels: int, num_actions: int) -> None:
        super().__init__()
        self.channels = channels
        self.num_actions = num_actions
        self.first = nn.Conv2d(channels + num_actions, channels, 3, padding=1)
        self.first_bn = nn.BatchNorm2d(channels)
        self.final = nn.Conv2d(channels, channels, 3, padding=1)

    def split_weight(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The first conv's kernel as its latent (C, C, 3, 3) and action (C, A, 3, 3) parts, in
        one split: a rollout's K uses of the latent part and the maps' use of the action part
        then reach the kernel's gradient through one concatenation, where a slice per use wrote
        a zero-filled kernel-sized gradient each."""
        return self.first.weight.split([self.channels, self.num_actions], dim=1)

    def action_maps(
        self, height: int, width: int, action_weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(A, C, H, W) contribution of each action's one-hot planes to the first conv
        (``action_weight``: `split_weight`'s second part, when the caller has it)."""
        w = self.split_weight()[1] if action_weight is None else action_weight
        planes = torch.eye(self.num_actions, device=w.device, dtype=w.dtype)
        planes = planes[:, :, None, None].expand(-1, -1, height, width)
        return conv2d(planes, w, padding=1)

    def forward(
        self,
        z: torch.Tensor,
        action: torch.Tensor,
        action_map: torch.Tensor | None = None,
        latent_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Predict the next latent.

        Args:
            z: (B, C, H, W) renormalized latent.
            action: (B,) int64 actions.
            action_map: (B, C, H, W) ``action_maps(H, W)[action]``, when the caller has it
                (a rollout computes the maps of all its steps at once).
            latent_weight: `split_weight`'s first part, when the caller has it (a rollout
                splits once for its K steps).

        Returns:
            (B, C, H, W) renormalized predicted next latent.
        """
        if latent_weight is None or action_map is None:
            latent_weight, action_weight = self.split_weight()
        if action_map is None:
            action_map = self.action_maps(z.shape[-2], z.shape[-1], action_weight)[action]
        h = conv2d(z, latent_weight, self.first.bias, padding=1)
        h = batch_norm(self.first_bn, F.relu(h + action_map))
        h = F.relu(conv2d(h, self.final.weight, self.final.bias, padding=1))
        return renormalize(h)

    def rollout(self, z: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """K recursive predictions from z with actions (B, K): (B, K, C, H, W).

        The action maps of all K steps are one small conv and one one-hot product (not K of
        each).
        """
        # Each step's map picked by a one-hot product: the same numbers as indexing (one term of
        # each sum is the map, the others exact zeros), and its backward is a small matmul, where
        # advanced indexing's sorts the B x K indices (and under vmap gathers through a
        # materialised index); unbind, not maps[:, k]: each select's backward would write a
        # zero-filled (B, K, C, H, W) gradient. The one-hot by comparison, not F.one_hot, whose
        # range check reads the actions on the host (a sync a CUDA graph cannot capture).
        bn = self.first_bn
        if agent_axis_here(z, self.first.weight) and bn.training and bn.momentum is not None:
            bn.num_batches_tracked.add_(actions.shape[1])  # K steps' counts at once
            return _AgentRollout.apply(
                z,
                actions,
                *(self.first.weight, self.first.bias, bn.weight, bn.bias),
                *(bn.running_mean, bn.running_var, self.final.weight, self.final.bias),
                (self.channels, self.num_actions, bn.momentum, bn.eps),
            )
        latent_weight, action_weight = self.split_weight()
        maps = self.action_maps(z.shape[-2], z.shape[-1], action_weight)
        codes = torch.arange(self.num_actions, device=actions.device)
        one_hot = (actions[..., None] == codes).to(maps.dtype)
        maps = (one_hot @ maps.flatten(1)).view(*actions.shape, *maps.shape[1:])
        preds = []
        for action, action_map in zip(actions.unbind(1), maps.unbind(1), strict=True):
            z = self(z, action, action_map, latent_weight)
            preds.append(z)
        return torch.stack(preds, dim=1)

    def reference_forward(self, z: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The same map computed the textbook way (concatenate one-hot planes); for tests."""
        planes = F.one_hot(action, self.num_actions).to(z.dtype)[:, :, None, None]
        planes = planes.expand(-1, -1, *z.shape[-2:])
        h = self.first_bn(F.relu(self.first(torch.cat([z, planes], 1))))
        return renormalize(F.relu(self.final(h)))


def _agents_rollout(
    z: torch.Tensor, actions: torch.Tensor, params: list[torch.Tensor], config: tuple
) -> torch.Tensor:
    """`TransitionModel.rollout` of N agents at once on plain tensors: z (B, N, C, H, W),
    actions (N, B, K), ``params`` each agent-first (the first conv's kernel and bias, the norm's
    weight, bias and running statistics, the final conv's kernel and bias), ``config``
    (C, A, momentum, eps). Each conv is one grouped conv over the agents, the norm one norm over
    the (agent, channel) pairs (its running statistics moved in place through their views).

    Returns:
        (B, K, N, C, H, W) renormalized predicted latents.
    """
    channels, num_actions, momentum, eps = config
    first_w, first_b, bn_w, bn_b, mean, var, final_w, final_b = params
    b, n, _, height, width = z.shape
    latent_w, action_w = first_w.split([channels, num_actions], dim=2)
    latent_w = latent_w.reshape(n * channels, *latent_w.shape[2:])
    action_w = action_w.reshape(n * channels, *action_w.shape[2:])
    final_w = final_w.reshape(n * channels, *final_w.shape[2:])
    first_b, bn_w, bn_b, final_b = (t.reshape(-1) for t in (first_b, bn_w, bn_b, final_b))
    mean, var = mean.view(-1), var.view(-1)  # in place: the agents' own statistics
    planes = torch.eye(num_actions, device=z.device, dtype=action_w.dtype)
    planes = planes[:, :, None, None].expand(-1, -1, height, width)
    maps = F.conv2d(planes, action_w, padding=1)  # (A, N * C, H, W)
    codes = torch.arange(num_actions, device=actions.device)
    one_hot = (actions[..., None] == codes).to(maps.dtype)  # (N, B, K, A)
    maps = torch.bmm(one_hot.flatten(1, 2), maps.reshape(num_actions, n, -1).transpose(0, 1))
    # every step's maps laid out as the steps' activations, (B, N * C, H, W), in one copy
    maps = maps.view(n, b, -1, channels * height * width).permute(2, 1, 0, 3)
    maps = maps.reshape(-1, b, n * channels, height, width).unbind(0)
    x, preds = z.reshape(b, n * channels, height, width), []
    for action_map in maps:
        h = F.relu(F.conv2d(x, latent_w, first_b, padding=1, groups=n) + action_map)
        h = torch.native_batch_norm(h, bn_w, bn_b, mean, var, True, momentum, eps)[0]
        h = F.relu(F.conv2d(h, final_w, final_b, padding=1, groups=n))
        y = renormalize(h.reshape(b, n, -1), start_dim=2)  # per sample and agent
        preds.append(y)
        x = y.view(x.shape)
    return fresh_view(torch.stack(preds, 1), (b, len(maps), *z.shape[1:]))


class _AgentRollout(torch.autograd.Function):
    """One agent's rollout, whose ``vmap`` rule is `_agents_rollout` over every agent: a GPU
    population's update (`sgi_lab.nets.agent_axis`), where vmap's rules re-lay out the tensors
    around each operator of each step. Outside vmap (not used there: `TransitionModel.rollout`
    runs its own steps) the same function, its gradient by recomputation."""

    @staticmethod
    def forward(z, actions, *args):  # noqa: ANN001, ANN205, D102
        *params, config = args
        one = [p.unsqueeze(0) for p in params]
        return _agents_rollout(z.unsqueeze(1), actions.unsqueeze(0), one, config).squeeze(2)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        *tensors, ctx.config = inputs
        ctx.save_for_backward(*tensors)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        z, actions, *params = ctx.saved_tensors
        params[4:6] = [t.clone() for t in params[4:6]]  # the statistics move once, in forward
        inputs = [z, *params]
        wanted = [ctx.needs_input_grad[0], *ctx.needs_input_grad[2:-1]]
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_(w) for t, w in zip(inputs, wanted, strict=True)]
            out = _AgentRollout.forward(inputs[0], actions, *inputs[1:], ctx.config)
            diff = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(out, diff, grad, allow_unused=True))
        grads = [next(grads) if w else None for w in wanted]
        return grads[0], None, *grads[1:], None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, z, actions, *args):  # noqa: ANN001, ANN205
        n = info.batch_size
        *params, config = args
        z = agents_in_channels(z, in_dims[0], n)
        z = z.view(z.shape[0], n, -1, *z.shape[2:])
        params = [agents_first(p, d, n) for p, d in zip(params, in_dims[2:], strict=False)]
        if not (params[4].is_contiguous() and params[5].is_contiguous()):
            raise ValueError("the agents' running statistics must be contiguous (N, C) tensors")
        out = _agents_rollout(z, agents_first(actions, in_dims[1], n), params, config)
        return out, 2
