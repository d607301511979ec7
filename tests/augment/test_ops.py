"""Unit tests for sgi_lab.augment.ops: random shift and intensity jitter."""

import pytest
import torch
import torch.nn.functional as F

from sgi_lab.augment.ops import augment, intensity, random_shift


def images(*shape, dtype=torch.uint8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=g).to(dtype)


def padded_crops(x: torch.Tensor, pad: int = 4) -> dict[tuple[int, int], torch.Tensor]:
    """Every 84x84 crop of the replicate-padded image x (C, H, W), keyed by its shift."""
    h, w = x.shape[-2:]
    padded = F.pad(x[None].float(), (pad,) * 4, mode="replicate")[0]
    return {
        (dy - pad, dx - pad): padded[:, dy : dy + h, dx : dx + w]
        for dy in range(2 * pad + 1)
        for dx in range(2 * pad + 1)
    }


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("shape", [(5, 4, 84, 84), (3, 2, 4, 84, 84)])
def test_shift_preserves_shape_and_dtype(dtype, shape):
    x = images(*shape, dtype=dtype)
    out = random_shift(x, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device


def test_shift_is_a_replicate_padded_crop_within_4_pixels():
    x = images(16, 4, 84, 84)
    out = random_shift(x, pad=4, generator=torch.Generator().manual_seed(3))
    shifts = set()
    for i in range(len(x)):
        matches = [s for s, crop in padded_crops(x[i]).items() if torch.equal(crop, out[i].float())]
        assert len(matches) == 1, f"sample {i} is not a translated copy within 4 px"
        shifts.add(matches[0])
    assert len(shifts) > 4  # per-sample shifts, not one for the batch


def test_shift_time_axis_independent_or_shared():
    frame = images(1, 1, 4, 84, 84)
    x = frame.expand(6, 5, 4, 84, 84)  # every time step identical
    g = torch.Generator().manual_seed(0)
    independent = random_shift(x, generator=g)
    assert not all(torch.equal(independent[:, 0], independent[:, t]) for t in range(1, 5))
    shared = random_shift(x, generator=g, same_across_time=True)
    for t in range(1, 5):
        assert torch.equal(shared[:, 0], shared[:, t])


def test_shift_reproducible_and_zero_pad_identity():
    x = images(4, 4, 84, 84)
    a = random_shift(x, generator=torch.Generator().manual_seed(7))
    b = random_shift(x, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    assert torch.equal(random_shift(x, pad=0), x)


def test_intensity_jitter_reproducible_and_bounded():
    x = images(64, 4, 84, 84, dtype=torch.float32) + 1.0  # strictly positive
    a = intensity(x, generator=torch.Generator().manual_seed(1))
    b = intensity(x, generator=torch.Generator().manual_seed(1))
    c = intensity(x, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)
    ratio = a / x
    per_sample = ratio.flatten(1)
    # One factor per sample, 1 + 0.05 * clamp(N(0, 1), -2, 2) in [0.9, 1.1].
    torch.testing.assert_close(per_sample.amax(1), per_sample.amin(1))
    assert per_sample.min() >= 0.9 - 1e-6 and per_sample.max() <= 1.1 + 1e-6
    assert per_sample[:, 0].std() > 0.01


def test_intensity_uint8_and_time_axis():
    x = images(2, 3, 4, 84, 84)
    out = intensity(x, generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.float32 and out.shape == x.shape
    factors = (out / x.float().clamp_min(1)).flatten(2).median(-1).values
    assert not torch.allclose(factors[:, 0], factors[:, 1])  # per (b, t) by default


def test_augment_combines_both():
    x = images(4, 2, 4, 84, 84)
    out = augment(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and out.dtype == torch.float32
    again = augment(x, torch.Generator().manual_seed(0))
    torch.testing.assert_close(out, again)
    assert torch.equal(augment(x, pad=0, intensity_scale=0.0), x.float())


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_cpu_row_crop_equals_clamped_gather(dtype):
    """The CPU path (pad, then crop whole rows) gives what the GPU path (one clamped gather)
    gives, for every one of the 81 shifts and for non-square frames."""
    from sgi_lab.augment.ops import _crop_rows, _shift_gather

    for h, w in [(84, 84), (10, 13)]:
        x = images(81, 3, h, w, dtype=dtype, seed=h)
        grid = torch.arange(9)
        offsets = torch.stack(torch.meshgrid(grid, grid, indexing="ij"), -1).view(81, 2)
        crops = _crop_rows(F.pad(x, (4,) * 4, mode="replicate"), offsets, h, w)
        assert torch.equal(crops, _shift_gather(x, offsets - 4))
        # and by hand: shift (+2, -3) means out[i, j] = x[clamp(i + 2), clamp(j - 3)]
        k = 6 * 9 + 1  # dy = 6 - 4 = 2, dx = 1 - 4 = -3
        rows = (torch.arange(h) + 2).clamp(0, h - 1)
        cols = (torch.arange(w) - 3).clamp(0, w - 1)
        assert torch.equal(crops[k], x[k][:, rows][:, :, cols])


@pytest.mark.parametrize("same_across_time", [False, True])
def test_shift_time_major_is_the_transpose_of_the_same_draws(same_across_time):
    x = images(3, 5, 4, 84, 84)
    plain = random_shift(
        x, generator=torch.Generator().manual_seed(2), same_across_time=same_across_time
    )
    tm = random_shift(
        x,
        generator=torch.Generator().manual_seed(2),
        same_across_time=same_across_time,
        time_major=True,
    )
    assert tm.shape == (5, 3, 4, 84, 84) and tm.is_contiguous()
    assert torch.equal(tm, plain.transpose(0, 1))
    with pytest.raises(ValueError, match="time_major"):
        random_shift(x[:, 0], time_major=True)


@pytest.mark.parametrize("time_major", [False, True])
def test_gather_path_gives_the_row_crop_result(monkeypatch, time_major):
    """random_shift's non-CPU path (one gather), forced on the CPU, draws and shifts alike."""
    import sgi_lab.augment.ops as aug

    x = images(3, 5, 4, 84, 84)
    rows = random_shift(x, generator=torch.Generator().manual_seed(4), time_major=time_major)
    monkeypatch.setattr(aug, "_crops_rows", lambda device: False)
    gathered = random_shift(x, generator=torch.Generator().manual_seed(4), time_major=time_major)
    assert torch.equal(rows, gathered)
