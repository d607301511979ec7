"""SPR's latent transition model h(z, a) -> z'."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sgi_lab.nets.agent_axis import batch_norm, conv2d
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
