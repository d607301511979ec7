"""One augmentation path (sgi_lab.augment.frames): pretraining's draws are the ones
`sgi_lab.augment.ops.augment` makes, and pretraining and a finetuning population turn the same draws
into the same encoder input."""

from __future__ import annotations

import pytest
import torch

from sgi_lab.augment.frames import (
    AugmentationDraws,
    augmented_frames,
    draw_augmentation,
    prepared_frames,
)
from sgi_lab.augment.ops import augment
from sgi_lab.nets.encoders import PIXEL_SCALE


def frames(*lead: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*lead, 4, 84, 84), dtype=torch.uint8, generator=g)


@pytest.mark.parametrize("lead", [(5,), (3, 4)], ids=["stacks", "sequences"])
def test_pretraining_input_is_augment_scaled(lead):
    """The same generator state gives the same shifts and jitter as `augment`, scaled by 1/255
    in one multiply (so equal up to one rounding)."""
    x = frames(*lead)
    ours = prepared_frames(x, torch.Generator().manual_seed(7), True, channels_last=False)
    theirs = augment(x, torch.Generator().manual_seed(7)) * PIXEL_SCALE
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    assert not torch.equal(ours, x.float() * PIXEL_SCALE)  # really augmented
    # augment off: only scaled, and no random number drawn
    g = torch.Generator().manual_seed(7)
    plain = prepared_frames(x, g, False, channels_last=True)
    torch.testing.assert_close(plain, x.float() * PIXEL_SCALE)
    assert plain.flatten(0, -4).is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(g.get_state(), torch.Generator().manual_seed(7).get_state())


def test_one_model_and_a_population_turn_the_same_draws_into_the_same_input():
    """Pretraining (one model, draws from its generator) and finetuning (agents on a leading
    axis, draws given) apply the same draws identically."""
    x = frames(3, 6)  # (B, T) sequences
    draws = draw_augmentation((3, 6), torch.Generator().manual_seed(1), x.device)
    single = prepared_frames(x, torch.Generator().manual_seed(1), True, channels_last=False)
    population = augmented_frames(
        torch.stack([x, x]),
        torch.stack([draws.corners, draws.corners]),
        torch.stack([draws.jitter, draws.jitter]),
        channels_last=False,
        dtype=torch.float32,
    )
    torch.testing.assert_close(population[0], single, rtol=0, atol=0)
    torch.testing.assert_close(population[1], single, rtol=0, atol=0)


def test_draws_can_be_switched_off_one_by_one():
    g = torch.Generator().manual_seed(0)
    assert draw_augmentation((4,), g, torch.device("cpu"), pad=0).corners is None
    assert draw_augmentation((4,), g, torch.device("cpu"), intensity_scale=0).jitter is None
    d = draw_augmentation((4, 2), g, torch.device("cpu"))
    assert d.corners.shape == (4, 2, 2) and int(d.corners.min()) >= 0 and int(d.corners.max()) <= 8
    assert d.jitter.shape == (4, 2) and float((d.jitter - 1).abs().max()) <= 0.1 + 1e-6
    x = frames(4)
    torch.testing.assert_close(
        augmented_frames(x, *AugmentationDraws(), channels_last=False), x.float() * PIXEL_SCALE
    )
