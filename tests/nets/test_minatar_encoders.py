"""The MinAtar encoders: shapes, parameter counts by hand, and an SGIModel sized from them."""

from __future__ import annotations

import pytest
import torch

from sgi_lab.nets import ENCODERS, MinAtarCNN, SGIModel, make_encoder
from sgi_lab.nets.encoders import renormalize


def params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("channels", [4, 6, 7, 10])
def test_shapes_and_parameter_counts(channels):
    small = make_encoder("minatar", channels, 10)
    large = make_encoder("minatar_l", channels, 10)
    assert isinstance(small, MinAtarCNN) and {"minatar", "minatar_l"} <= set(ENCODERS)
    x = torch.randint(0, 2, (3, channels, 10, 10), dtype=torch.uint8) * 255
    assert small(x).shape == (3, *small.output_shape) == (3, 16, 8, 8)
    assert large(x).shape == (3, *large.output_shape) == (3, 64, 8, 8)
    # By hand: 3x3 kernels plus biases.
    assert params(small) == 16 * channels * 9 + 16  # 592 for Breakout's 4 channels
    assert params(large) == (32 * channels * 9 + 32) + (64 * 32 * 9 + 64)  # 19,680 for 4


def test_cells_are_scaled_like_pixels():
    encoder = make_encoder("minatar", 4, 10)
    x = torch.randint(0, 2, (2, 4, 10, 10), dtype=torch.uint8)
    torch.testing.assert_close(encoder(x * 255), encoder(x.float(), prepared=True))


def test_an_sgi_model_sizes_every_part_from_the_encoder():
    model = SGIModel(
        "minatar",
        3,
        in_channels=4,
        image_size=10,
        hidden_size=128,
        goal_head=True,
        inverse_model=True,
    )
    assert model.latent_shape == (16, 8, 8) and model.latent_size == 1024
    obs = torch.randint(0, 2, (5, 4, 10, 10), dtype=torch.uint8) * 255
    z = model.encode(obs)
    torch.testing.assert_close(z, renormalize(z))  # per-sample [0, 1], as for Atari
    assert z.shape == (5, 16, 8, 8)
    assert model.q_logits(z).shape == (5, 3, 51)
    assert model.rollout(z, torch.zeros(5, 5, dtype=torch.long)).shape == (5, 5, 16, 8, 8)
    assert model.goal_q_logits(z, z.flatten(1)).shape == (5, 3, 51)
    y = model.project(z)
    assert model.inverse_logits(y, y).shape == (5, 3)
    assert model.film.layers[-1].in_features == 2 * 16 * 8 * 8
    assert (
        params(model.encoder) == 592 and params(model) == 1_896_627
    )  # pinned: the report quotes it


def test_frames_below_atari_encoders_smallest_side_are_grids():
    """`grid_observations`: MinAtar's games, and any frame smaller than Atari's encoders read
    (a grid dataset imported from Minari, whose game is its id); the bound is the Nature CNN's:
    it reads a 36x36 frame and fails on 35x35."""
    from sgi_lab.envs.factory import ATARI_ENCODER_MIN_SIDE, grid_observations

    side = ATARI_ENCODER_MIN_SIDE
    assert make_encoder("nature", 4, side)(torch.zeros(1, 4, side, side)).shape[-2:] == (1, 1)
    with pytest.raises(RuntimeError):
        make_encoder("nature", 4, side - 1)(torch.zeros(1, 4, side - 1, side - 1))
    assert grid_observations("minatar/breakout", (4, 10, 10))
    assert grid_observations("test/grid-v0", (3, 10, 10))
    assert grid_observations("test/small-v0", (1, side - 1, side - 1))
    assert not grid_observations("test/frames-v0", (1, side, side))
    assert not grid_observations("Pong", (84, 84))
