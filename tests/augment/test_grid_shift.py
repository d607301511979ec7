"""The shift's pad follows the observation spec: 4 pixels for Atari, none for MinAtar's grids;
a pad of 1 (the alternative measured) crops exactly one cell."""

from __future__ import annotations

import torch

from sgi_lab.augment.frames import augmented_frames, draw_augmentation, prepared_frames
from sgi_lab.augment.ops import GRID_PAD, PAD, shift, shift_pad
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec, minatar_spec


def test_the_pad_is_a_function_of_the_spec():
    assert shift_pad(ATARI_SPEC) == PAD == 4
    assert shift_pad() == 4
    for game in ("asterix", "breakout", "freeway", "seaquest", "space_invaders"):
        assert shift_pad(minatar_spec(game)) == GRID_PAD == 0
    assert shift_pad(ObservationSpec(3, 64, 64)) == 4


def test_no_pad_means_no_shift_only_scaling():
    obs = torch.randint(0, 2, (6, 4, 10, 10), dtype=torch.uint8) * 255
    g = torch.Generator().manual_seed(0)
    out = prepared_frames(obs, g, augment=True, channels_last=False, pad=0)
    draws = draw_augmentation((6,), torch.Generator().manual_seed(0), obs.device, pad=0)
    assert draws.corners is None
    # Only the intensity jitter: every cell is 0 or its stack's factor.
    factors = draws.jitter.view(6, 1, 1, 1)
    torch.testing.assert_close(out, obs.float() / 255 * factors)


def test_a_pad_of_one_moves_a_grid_by_one_cell_with_edge_replication():
    grid = torch.zeros(1, 1, 10, 10, dtype=torch.uint8)
    grid[0, 0, 4, 4] = 255
    # Corner (0, 2) of the 12x12 padded grid: content moves down one row and left one column.
    moved = shift(grid, torch.tensor([[0, 2]]), pad=1)
    assert moved[0, 0].nonzero().tolist() == [[5, 3]]
    corners = torch.tensor([[0, 2]])
    out = augmented_frames(grid, corners, None, channels_last=False, pad=1)
    assert out[0, 0].nonzero().tolist() == [[5, 3]] and out.max() == 1.0
    # An object on the bottom row is duplicated by a shift up and lost by a shift down: what
    # the benchmark counts.
    edge = torch.zeros(1, 1, 10, 10, dtype=torch.uint8)
    edge[0, 0, 9, 4] = 255
    assert int((shift(edge, torch.tensor([[2, 1]]), pad=1) > 0).sum()) == 2  # duplicated
    assert int((shift(edge, torch.tensor([[0, 1]]), pad=1) > 0).sum()) == 0  # lost
