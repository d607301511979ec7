"""Where the paper's text and the authors' code differ, both are available: each option pinned
against hand-computed values (docs/paper_vs_code.md lists every difference)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sgi_lab.config import ConfigError, PretrainConfig, build_config, load_config
from sgi_lab.objectives import spr_loss
from sgi_lab.objectives.goal_rl import goals_from_draws

ROOT = Path(__file__).resolve().parents[1]


# -- SPR's weight ---------------------------------------------------------------------------


def test_spr_coefficient_is_the_weight_on_the_text_loss():
    text = build_config(PretrainConfig, {"spr_coefficient": 2.0})
    assert text.spr_coefficient == 2.0 and PretrainConfig().spr_coefficient == 2.0
    # the authors' spr_weight 1 on mean_k(2 - 2 cos) is written as what it weighs -sum_k cos by
    paper = load_config(PretrainConfig, ROOT / "params/pretrain/sgi_m.yaml")
    assert paper.spr_coefficient == 2.0 * 1.0 / paper.spr_steps == 0.4
    with pytest.raises(ConfigError, match="spr_coefficient: must be >= 0"):
        build_config(PretrainConfig, {"spr_coefficient": -0.4})


def test_reference_weight_matches_the_reference_loss_and_gradient():
    # K = 2 steps: cos = 1 and 1/sqrt(2). Text loss -sum_k cos = -1.7071; the reference's
    # w * mean_k(2 - 2 cos) = (0 + 2 - sqrt(2)) / 2 = 0.2929 for w = 1, = 2w + (2w/K) * text:
    # its w = 1 at K = 2 is spr_coefficient 1.
    pred = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]], requires_grad=True)
    targ = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    text = spr_loss(pred, targ)
    assert text.item() == pytest.approx(-(1 + 1 / math.sqrt(2)), abs=1e-6)
    config = build_config(PretrainConfig, {"spr_coefficient": 2.0 * 1.0 / 2, "spr_steps": 2})
    ours = config.spr_coefficient * text.sum()
    (g_ours,) = torch.autograd.grad(ours, pred)
    a, b = F.normalize(pred, dim=-1), F.normalize(targ, dim=-1)
    reference = 1.0 * (a - b).pow(2).sum(-1).mean(-1).sum()  # the authors' spr_loss
    assert reference.item() == pytest.approx((2 - math.sqrt(2)) / 2, abs=1e-6)
    assert (ours + 2.0).item() == pytest.approx(reference.item(), abs=1e-6)
    (g_ref,) = torch.autograd.grad(reference, pred)
    torch.testing.assert_close(g_ours, g_ref)


# -- goal noise -------------------------------------------------------------------------------


def _draws(noise, alpha):
    return {"noise": torch.tensor([noise]), "alpha": torch.tensor([[alpha]])}


def test_goal_noise_unit_reference_hand_computed():
    # g = (0, 3, 0, 4) (norm 5), n = e1, alpha = 1 * alpha_max = 0.5:
    # 0.5 n + 0.5 g = (0.5, 1.5, 0, 2) -> min-max -> (0.25, 0.75, 0, 1)
    g = torch.tensor([[0.0, 3.0, 0.0, 4.0]])
    goals, swapped = goals_from_draws(g, _draws([2.0, 0, 0, 0], 1.0), 0.5, 0.0, "unit")
    torch.testing.assert_close(goals, torch.tensor([[0.25, 0.75, 0.0, 1.0]]))
    assert not swapped.any()


def test_goal_noise_latent_norm_text_hand_computed():
    # the noise scaled to ||g|| = 5: 0.5 * 5 e1 + 0.5 g = (2.5, 1.5, 0, 2) -> (1, 0.6, 0, 0.8)
    g = torch.tensor([[0.0, 3.0, 0.0, 4.0]])
    goals, _ = goals_from_draws(g, _draws([2.0, 0, 0, 0], 1.0), 0.5, 0.0, "latent_norm")
    torch.testing.assert_close(goals, torch.tensor([[1.0, 0.6, 0.0, 0.8]]))
    # ... which is unit noise mixed into the L2-normalized goal (min-max is scale-free)
    unit, _ = goals_from_draws(g / 5.0, _draws([2.0, 0, 0, 0], 1.0), 0.5, 0.0, "unit")
    torch.testing.assert_close(goals, unit)
    with pytest.raises(ValueError, match="noise_scale"):
        goals_from_draws(g, _draws([1.0, 0, 0, 0], 1.0), 0.5, 0.0, "huge")


def test_goal_noise_moves_text_goals_off_the_manifold():
    # A 3,136-d [0, 1] latent (norm ~32): unit noise barely moves it, scaled noise does.
    gen = torch.Generator().manual_seed(0)
    z = torch.rand(8, 3136, generator=gen)
    draws = {"noise": torch.randn(8, 3136, generator=gen), "alpha": torch.ones(8, 1)}
    for scale, low, high in [("unit", 0.998, 1.0), ("latent_norm", 0.8, 0.95)]:
        goals, _ = goals_from_draws(z, draws, 0.5, 0.0, scale)
        cos = F.cosine_similarity(goals, z, dim=-1)
        assert low <= cos.min() and cos.max() <= high, (scale, cos)


# -- params files: the reference code's choices ------------------------------------------------


PAPER_PARAMS = sorted(p for p in (ROOT / "params/pretrain").glob("*.yaml") if p.stem != "smoke")


@pytest.mark.parametrize("path", PAPER_PARAMS, ids=lambda p: p.stem)
def test_paper_params_follow_the_reference_code(path):
    config = load_config(PretrainConfig, path)
    if config.spr_coefficient > 0:
        assert config.spr_coefficient == 0.4  # the authors' spr_weight 1 on mean_k(2 - 2 cos)
    if config.goal_weight > 0:
        assert (config.goal_noise, config.goal_offsets) == ("reference", "reference")
        assert config.goal_distance_scale == 5.0


def test_dataclass_defaults_are_the_text():
    c = PretrainConfig()
    assert c.spr_coefficient == 2.0
    assert (c.goal_noise, c.goal_offsets, c.goal_distance_scale) == ("text", "text", 1.0)
    with pytest.raises(ConfigError, match="goal_distance_scale: must be positive"):
        build_config(PretrainConfig, {"goal_distance_scale": 0.0})


# -- sticky actions recorded in a store's manifest ---------------------------------------------


def _tiny_store(path, source="synthetic", **kw):
    from sgi_lab.data import TransitionStore, TransitionStoreWriter

    writer = TransitionStoreWriter.create(path, game="Pong", source=source, num_actions=6, **kw)
    for i in range(5):
        writer.append(np.full((84, 84), i, np.uint8), i % 6, 0.0, i == 4, i == 0)
    return TransitionStore(writer.close())


def _drop_manifest_key(store_path, key):
    import json

    manifest = Path(store_path) / "manifest.json"
    payload = json.loads(manifest.read_text())
    del payload[key]
    manifest.write_text(json.dumps(payload))


def test_sticky_action_prob_recorded_shown_and_old_stores_open(tmp_path, capsys):
    from sgi_lab.data import TransitionStore
    from sgi_lab.data.store_format import StoreError
    from sgi_lab.launch.cli import main
    from sgi_lab.viz.datasets import store_summary_figure

    store = _tiny_store(tmp_path / "dqn", source="dqn_replay", sticky_action_prob=0.25)
    assert store.manifest.sticky_action_prob == 0.25 and store.sticky_action_prob == 0.25
    assert store.summary()["sticky_action_prob"] == 0.25
    assert "sticky actions p=0.25" in store_summary_figure(store).layout.title.text
    assert main(["info", str(store.path)]) == 0
    assert "sticky actions (repeat probability 0.25)" in capsys.readouterr().out

    ours = _tiny_store(tmp_path / "random", sticky_action_prob=0.0)
    assert "no sticky actions" in store_summary_figure(ours).layout.title.text

    # Stores written before the field existed still open: unknown, except DQN Replay's (0.25).
    fingerprint = store.fingerprint
    _drop_manifest_key(store.path, "sticky_action_prob")
    old = TransitionStore(store.path)
    assert old.manifest.sticky_action_prob is None and old.sticky_action_prob == 0.25
    assert old.fingerprint == fingerprint
    _drop_manifest_key(ours.path, "sticky_action_prob")
    old_ours = TransitionStore(ours.path)
    assert old_ours.sticky_action_prob is None and old_ours.summary()["sticky_action_prob"] is None
    assert "sticky" not in store_summary_figure(old_ours).layout.title.text

    bad = _tiny_store(tmp_path / "bad", sticky_action_prob=0.25)
    manifest = bad.path / "manifest.json"
    manifest.write_text(
        manifest.read_text().replace('"sticky_action_prob": 0.25', '"sticky_action_prob": 2')
    )
    with pytest.raises(StoreError, match="sticky_action_prob"):
        TransitionStore(bad.path)


# -- goal offsets near an episode's end --------------------------------------------------------


def test_goal_offsets_clip_reference_hand_computed():
    from sgi_lab.data.sampler import draw_goal_offsets

    # starts 7, 8, 9 in an episode ending at row 9 (terminal), window 50: Uniform{1..50} clipped
    # to the room left, 2, 1 and 0 steps; the draws are exactly rng.integers(1, 51).
    starts, ends = np.array([7, 8, 9, 0]), np.array([9, 9, 9, 99])
    draws = np.random.default_rng(5).integers(1, 51, size=4)
    got = draw_goal_offsets(np.random.default_rng(5), starts, ends, 50, "clip")
    np.testing.assert_array_equal(got, np.minimum(draws, [2, 1, 0, 99]))
    # P(offset = 1 | two steps left) = 1/50: nearly every goal is the last state
    many = draw_goal_offsets(np.random.default_rng(0), np.full(20_000, 7), np.full(20_000, 9), 50)
    assert set(np.unique(many)) == {1, 2} and abs((many == 1).mean() - 1 / 50) < 0.005


def test_goal_offsets_uniform_text_hand_computed():
    from sgi_lab.data.sampler import draw_goal_offsets

    # two steps left: offsets 1 and 2 equally likely; one step left: 1; none left: 0 (s_t)
    n = 20_000
    many = draw_goal_offsets(np.random.default_rng(0), np.full(n, 7), np.full(n, 9), 50, "uniform")
    assert set(np.unique(many)) == {1, 2} and abs((many == 1).mean() - 0.5) < 0.02
    got = draw_goal_offsets(
        np.random.default_rng(1), np.array([8, 9]), np.array([9, 9]), 50, "uniform"
    )
    np.testing.assert_array_equal(got, [1, 0])
    # far from the end both modes are Uniform{1..window}
    far = draw_goal_offsets(
        np.random.default_rng(2), np.zeros(n, int), np.full(n, 999), 4, "uniform"
    )
    np.testing.assert_allclose(np.bincount(far, minlength=5)[1:] / n, 0.25, atol=0.02)
    with pytest.raises(ValueError, match="goal_offsets"):
        draw_goal_offsets(
            np.random.default_rng(0),
            starts=np.zeros(1, int),
            episode_end=np.ones(1, int),
            window=5,
            mode="end",
        )


def test_sampler_goal_offsets_option(store_factory):
    from sgi_lab.data import SequenceSampler

    # one 4-row episode (terminal) + a 30-row truncated one; window 50
    store = store_factory([{"length": 4, "terminal": True}, {"length": 30}])
    for mode in ("clip", "uniform"):
        sampler = SequenceSampler(
            store, batch_size=4000, K=1, n_step=0, goal_window=50, seed=0, goal_offsets=mode
        )
        b = sampler.sample()
        e1 = store.row_episode_end[b.indices]
        assert (b.indices + b.goal_offset <= e1).all()
        near = b.indices == 1  # rows 2 and 3 ahead
        share_last = (b.goal_offset[near] == 2).mean()
        assert share_last > 0.9 if mode == "clip" else abs(share_last - 0.5) < 0.1
        assert (b.goal_offset[b.indices == 3] == 0).all()  # the terminal row: its own state
    with pytest.raises(ValueError, match="goal_offsets"):
        SequenceSampler(store, goal_offsets="text")
    config = load_config(PretrainConfig, ROOT / "params/pretrain/sgi_m.yaml")
    from sgi_lab.train.pretrain_step import make_sampler

    assert make_sampler(config, store).goal_offsets == "clip"
    text = build_config(PretrainConfig, {"prefetch": 0})
    assert make_sampler(text, store).goal_offsets == "uniform"
