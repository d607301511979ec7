"""sgi_lab.augment.draws: one uniform draw per agent, split and transformed into every named draw."""

from __future__ import annotations

import math

import pytest
import torch

from sgi_lab.augment import draws

GRID = 2**24  # float32 uniforms lie on k / 2**24


def test_layout_places_parts_end_to_end_and_splits_views():
    layout = draws.Layout([("a", (2, 3)), ("b", ()), ("c", (4,))])
    assert layout.size == 11
    assert layout.parts == {"a": (0, (2, 3)), "b": (6, ()), "c": (7, (4,))}
    u = torch.arange(22.0).view(2, 11)
    parts = layout.split(u)
    assert parts["a"].tolist() == [[[0, 1, 2], [3, 4, 5]], [[11, 12, 13], [14, 15, 16]]]
    assert parts["b"].tolist() == [6, 17]
    assert parts["c"].tolist() == [[7, 8, 9, 10], [18, 19, 20, 21]]
    assert parts["a"].untyped_storage().data_ptr() == u.untyped_storage().data_ptr()  # views
    with pytest.raises(ValueError, match="last axis of 11"):
        layout.split(torch.zeros(2, 12))
    with pytest.raises(ValueError, match="'a' appears twice"):
        draws.Layout([("a", (1,)), ("a", (2,))])


def test_uniforms_row_is_its_generators_own_draw_whatever_the_other_rows():
    seeds = [3, 11, 5]
    u = draws.uniforms([torch.Generator().manual_seed(s) for s in seeds], 50, "cpu")
    for i, s in enumerate(seeds):
        alone = torch.rand(50, generator=torch.Generator().manual_seed(s))
        assert torch.equal(u[i], alone)
    again = draws.uniforms([torch.Generator().manual_seed(11)], 50, "cpu")
    assert torch.equal(again[0], u[1])


def test_normal_is_finite_and_odd_on_the_whole_float32_grid():
    k = torch.tensor([0, 1, 2, GRID // 2 - 1, GRID // 2, GRID - 2, GRID - 1], dtype=torch.float64)
    u = (k / GRID).float()
    z = draws.normal(u)
    assert torch.isfinite(z).all()
    mirror = draws.normal(((GRID - 1 - k) / GRID).float())
    torch.testing.assert_close(z, -mirror, rtol=0, atol=0)
    assert 5.0 < z[-1] < 5.6  # the largest value: 2u - 1 + 2**-24 = 1 - 2**-24
    # Below 0.5 u is finer than 2**-24 (a GPU's uniforms); still finite.
    assert torch.isfinite(draws.normal(torch.tensor([2.0**-40, 1e-30, 0.0]))).all()


def test_normal_has_the_standard_normal_distribution():
    u = torch.rand(400_000, generator=torch.Generator().manual_seed(0))
    z = draws.normal(u).double()
    assert abs(z.mean()) < 0.006 and abs(z.std() - 1) < 0.006
    # Kolmogorov-Smirnov against the normal CDF (critical value at 1%: 1.63 / sqrt(n)).
    zs = z.sort().values
    cdf = 0.5 * (1 + torch.erf(zs / math.sqrt(2)))
    n = zs.numel()
    ks = torch.maximum(torch.arange(1, n + 1) / n - cdf, cdf - torch.arange(n) / n).max()
    assert ks < 1.63 / math.sqrt(n)


def test_integers_cover_the_range_evenly_and_never_reach_high():
    u = torch.rand(90_000, generator=torch.Generator().manual_seed(1))
    x = draws.integers(u, 0, 9)
    assert x.dtype == torch.int64 and x.min() == 0 and x.max() == 8
    counts = torch.bincount(x, minlength=9).double()
    chi2 = ((counts - 10_000) ** 2 / 10_000).sum()
    assert chi2 < 26.1  # chi-square, 8 degrees of freedom, 0.1%
    top = torch.tensor([1 - 2.0**-24, 0.0])  # u * n rounds up to n for some n: clamped
    for n in (9, 31, 1000, 12345):
        assert draws.integers(top, 1, n + 1).tolist() == [n, 1]
    with pytest.raises(ValueError, match="empty integer range"):
        draws.integers(u, 3, 3)
