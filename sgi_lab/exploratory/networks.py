"""The IDF curiosity agent's networks (Burda et al. 2018, ``openai/large-scale-curiosity``): an
actor-critic, and features trained by inverse dynamics with a forward model on them, whose
error is the intrinsic reward. The agent that trains them is `sgi_lab.exploratory.idf_agent`.

Both conv nets size themselves from the observation shape ``(C, H, W)`` (the env's
`sgi_lab.envs.spec.ObservationSpec.stacked_shape`): Burda et al.'s strided kernels on frames at
least `BURDA_MIN_SIZE` pixels wide (Atari's 84x84), three 3x3 stride-1 convs on smaller grids
(MinAtar's 10x10, where one cell is one object and a stride-4 kernel would not fit)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sgi_lab.config import ExploreConfig

__all__ = ["ATARI_SHAPE", "BURDA_MIN_SIZE", "IDFModel", "PolicyNet", "small_convnet"]

ATARI_SHAPE = (4, 84, 84)
"""Atari 100k's stacked observation, the shape Burda et al.'s nets were built for."""
BURDA_MIN_SIZE = 36
"""The smallest frame side Burda et al.'s kernels (8/4/3, strides 4/2/1) leave one cell of."""
_BURDA_LAYERS = ((1, 8, 4), (2, 4, 2), (2, 3, 1))  # (width multiple, kernel, stride)
_GRID_LAYERS = ((1, 3, 1), (2, 3, 1), (2, 3, 1))


def small_convnet(
    width: int, out_dim: int, observation_shape: tuple[int, int, int] = ATARI_SHAPE
) -> nn.Sequential:
    """Burda et al.'s ``small_convnet``: (B, C, H, W) -> (B, out_dim), leaky ReLU, no last nl.

    Channels ``width, 2 width, 2 width`` (32/64/64 in the paper); kernels 8/4/3 with strides
    4/2/1 on frames of at least `BURDA_MIN_SIZE` pixels ((4, 84, 84) -> 64x7x7), else 3x3 with
    stride 1 ((4, 10, 10) -> 64x4x4).

    Raises:
        ValueError: a frame too small for three 3x3 convs, naming its shape.
    """
    channels, height, width_px = (int(v) for v in observation_shape)
    big = min(height, width_px) >= BURDA_MIN_SIZE
    layers: list[nn.Module] = []
    for multiple, kernel, stride in _BURDA_LAYERS if big else _GRID_LAYERS:
        layers += [nn.Conv2d(channels, multiple * width, kernel, stride=stride), nn.LeakyReLU()]
        channels = multiple * width
        height, width_px = (height - kernel) // stride + 1, (width_px - kernel) // stride + 1
    if min(height, width_px) < 1:
        raise ValueError(
            f"observation shape {tuple(observation_shape)}: too small for the curiosity "
            "agent's three 3x3 convs (frames of at least 7x7)"
        )
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(channels * height * width_px, out_dim))


class PolicyNet(nn.Module):
    """Actor-critic: its own conv features -> two ReLU layers -> action logits and a value.

    ``observation_shape``: (C, H, W) of one observation (`small_convnet`)."""

    def __init__(
        self,
        num_actions: int,
        config: ExploreConfig,
        observation_shape: tuple[int, int, int] = ATARI_SHAPE,
    ) -> None:
        super().__init__()
        self.features = small_convnet(config.conv_width, config.feature_dim, observation_shape)
        self.trunk = nn.Sequential(
            nn.Linear(config.feature_dim, config.hidden_size),
            nn.ReLU(),
            nn.Linear(config.hidden_size, config.hidden_size),
            nn.ReLU(),
        )
        self.logits = nn.Linear(config.hidden_size, num_actions)
        self.value = nn.Linear(config.hidden_size, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised observations (B, C, H, W) -> logits (B, A), values (B,)."""
        h = self.trunk(self.features(x))
        return self.logits(h), self.value(h).squeeze(-1)


class IDFModel(nn.Module):
    """IDF curiosity: features trained by an inverse model, and a forward model on them.

    ``observation_shape``: (C, H, W) of one observation (`small_convnet`)."""

    def __init__(
        self,
        num_actions: int,
        config: ExploreConfig,
        observation_shape: tuple[int, int, int] = ATARI_SHAPE,
    ) -> None:
        super().__init__()
        self.num_actions = num_actions
        d, h, a = config.feature_dim, config.hidden_size, num_actions
        self.features = small_convnet(config.conv_width, d, observation_shape)
        self.inverse = nn.Sequential(nn.Linear(2 * d, h), nn.ReLU(), nn.Linear(h, a))
        self.forward_in = nn.Linear(d + a, h)
        self.forward_blocks = nn.ModuleList(
            nn.ModuleList([nn.Linear(h + a, h), nn.Linear(h + a, h)])
            for _ in range(config.forward_blocks)
        )
        self.forward_out = nn.Linear(h + a, d)

    def predict_next(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Forward model: phi(s_t) (B, d), a_t (B,) -> predicted phi(s_{t+1}) (B, d)."""
        onehot = F.one_hot(actions, self.num_actions).to(features.dtype)
        x = F.leaky_relu(self.forward_in(torch.cat([features, onehot], -1)))
        for first, second in self.forward_blocks:
            res = F.leaky_relu(first(torch.cat([x, onehot], -1)))
            x = x + second(torch.cat([res, onehot], -1))
        return self.forward_out(torch.cat([x, onehot], -1))

    def losses(
        self, obs: torch.Tensor, next_obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample inverse-dynamics cross-entropy and forward-model error, both (B,).

        The forward error is the intrinsic reward; its gradient reaches only the forward model
        (inputs and targets are detached features), the inverse loss trains the features.
        """
        phi, phi_next = self.features(torch.cat([obs, next_obs])).chunk(2)
        return self.feature_losses(phi, phi_next, actions)

    def sequence_losses(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`losses` of the T transitions of streams: obs (T + 1, B, C, H, W), actions (T, B).

        Each observation's features are computed once (s_{t+1} is the next state of step t and
        the state of step t+1). Returns two (T * B,) tensors in time-major order.
        """
        steps, batch = actions.shape
        phi = self.features(obs.flatten(0, 1)).view(steps + 1, batch, -1)
        return self.feature_losses(phi[:-1].flatten(0, 1), phi[1:].flatten(0, 1), actions.flatten())

    def feature_losses(
        self, phi: torch.Tensor, phi_next: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse cross-entropy and forward error (B,) from features (B, d) of s_t, s_{t+1}."""
        inverse = F.cross_entropy(
            self.inverse(torch.cat([phi, phi_next], -1)), actions, reduction="none"
        )
        predicted = self.predict_next(phi.detach(), actions)
        forward = (predicted - phi_next.detach()).pow(2).mean(-1)
        return inverse, forward
