"""Unit tests for sgi_lab.nets: shapes, parameter counts, noise, FiLM, names, EMA."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sgi_lab.nets import (
    ENCODERS,
    PARAMETER_GROUPS,
    FiLMGenerator,
    InvertedResidual,
    NoisyLinear,
    SGIModel,
    TransitionModel,
    ema_update,
    film_layer_norm,
    make_encoder,
    make_target,
    parameter_group,
    renormalize,
    scale_gradient,
)
from sgi_lab.nets.ema import lerp_


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.fixture(scope="module")
def frames():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (2, 4, 84, 84), generator=g, dtype=torch.uint8)


@pytest.mark.parametrize("name,channels", [("nature", 64), ("resnet", 64), ("resnet_l", 96)])
def test_encoder_output_shape(name, channels, frames):
    enc = make_encoder(name)
    out = enc(frames)
    assert out.shape == (2, channels, 7, 7)
    assert enc.output_shape == (channels, 7, 7)
    # uint8 and float pixels in [0, 255] are the same input.
    torch.testing.assert_close(enc(frames.float()), out)


def test_encoder_parameter_counts():
    counts = {name: n_params(make_encoder(name)) for name in ENCODERS}
    # 32x4x8x8 + 64x32x4x4 + 64x64x3x3 weights, plus biases.
    assert counts["nature"] == 4 * 32 * 64 + 32 + 32 * 64 * 16 + 64 + 64 * 64 * 9 + 64 == 77_984
    assert counts["resnet"] == 134_312
    assert counts["resnet_l"] == 883_040
    # The paper says "roughly 5x": the encoder alone is ~6.6x, encoder + transition ~5.0x.
    assert 5.0 < counts["resnet_l"] / counts["resnet"] < 7.0
    t_small, t_large = n_params(TransitionModel(64, 18)), n_params(TransitionModel(96, 18))
    ratio = (counts["resnet_l"] + t_large) / (counts["resnet"] + t_small)
    assert 4.5 < ratio < 5.5


def test_resnet_downsamples_3_2_2(frames):
    enc = make_encoder("resnet")
    sides = []
    for group in enc.layers:
        group.register_forward_hook(lambda m, i, o: sides.append(o.shape[-1]))
    enc(frames)
    assert sides == [28, 14, 7]
    assert [len(g) for g in enc.layers] == [3, 3, 3]
    assert [len(g) for g in make_encoder("resnet_l").layers] == [5, 5, 5]


def test_renormalize_range():
    x = torch.randn(3, 5, 7, 7) * 10 + 3
    y = renormalize(x)
    assert y.shape == x.shape
    flat = y.flatten(1)
    torch.testing.assert_close(flat.amin(1), torch.zeros(3))
    torch.testing.assert_close(flat.amax(1), torch.ones(3))
    # Vectors, and a constant sample, which maps to zeros rather than NaN.
    v = renormalize(torch.stack([torch.arange(4.0), torch.full((4,), 2.0)]), start_dim=-1)
    torch.testing.assert_close(v, torch.tensor([[0, 1 / 3, 2 / 3, 1], [0.0, 0, 0, 0]]))


def test_transition_matches_one_hot_planes():
    torch.manual_seed(0)
    h = TransitionModel(8, 5)
    z = renormalize(torch.rand(6, 8, 7, 7))
    a = torch.tensor([0, 1, 2, 3, 4, 2])
    fast = h(z, a)
    torch.testing.assert_close(fast, h.reference_forward(z, a), atol=1e-5, rtol=1e-5)
    assert fast.shape == z.shape
    assert fast.flatten(1).amin(1).abs().max() < 1e-6
    assert (fast.flatten(1).amax(1) - 1).abs().max() < 1e-5


def test_transition_rollout_is_k_reference_steps_with_their_gradients():
    """The rollout's one gather of all K action maps is K textbook steps, gradients included."""
    torch.manual_seed(0)
    h = TransitionModel(8, 5)
    z0 = renormalize(torch.rand(4, 8, 7, 7))
    actions = torch.randint(0, 5, (4, 3))
    fast = h.rollout(z0, actions)
    z, steps = z0, []
    for k in range(3):
        z = h.reference_forward(z, actions[:, k])
        steps.append(z)
    slow = torch.stack(steps, 1)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    weights = torch.rand_like(fast)
    g_fast = torch.autograd.grad((fast * weights).sum(), list(h.parameters()))
    g_slow = torch.autograd.grad((slow * weights).sum(), list(h.parameters()))
    for a, b in zip(g_fast, g_slow, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("bf16", [False, True])
def test_transition_rollout_picks_each_action_map_exactly(bf16):
    """The rollout's one-hot product picks each step's action map with the same bits as
    indexing the maps (fp32, and under bf16 autocast where the maps are bf16)."""
    torch.manual_seed(0)
    h = TransitionModel(16, 3)
    z0 = renormalize(torch.rand(32, 16, 8, 8))
    actions = torch.randint(0, 3, (32, 5))

    def indexed(z):
        maps = h.action_maps(*z.shape[-2:])[actions]
        steps = []
        for k in range(actions.shape[1]):
            z = h(z, actions[:, k], maps[:, k])
            steps.append(z)
        return torch.stack(steps, 1)

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        fast, slow = h.rollout(z0, actions), indexed(z0)
    assert fast.dtype == (torch.bfloat16 if bf16 else torch.float32)
    assert torch.equal(fast, slow)


def test_noisy_linear_noise_on_off():
    torch.manual_seed(0)
    layer = NoisyLinear(6, 3, std_init=0.5)
    x = torch.randn(4, 6)
    plain = F.linear(x, layer.weight_mu, layer.bias_mu)
    assert not torch.allclose(layer(x), plain)
    layer.noise_enabled = False
    torch.testing.assert_close(layer(x), plain)
    torch.testing.assert_close(layer(x, noise=False), plain)
    assert not torch.allclose(layer(x, noise=True), plain)
    # Initial sigmas as the reference; noise samples are not checkpointed.
    torch.testing.assert_close(layer.weight_sigma, torch.full((3, 6), 0.5 / math.sqrt(6)))
    torch.testing.assert_close(layer.bias_sigma, torch.full((3,), 0.5 / math.sqrt(3)))
    assert set(layer.state_dict()) == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}


def test_noisy_linear_resample_is_reproducible():
    layer = NoisyLinear(6, 3)
    x = torch.randn(4, 6)
    layer.reset_noise(torch.Generator().manual_seed(1))
    first = layer(x)
    layer.reset_noise(torch.Generator().manual_seed(2))
    assert not torch.allclose(layer(x), first)
    layer.reset_noise(torch.Generator().manual_seed(1))
    torch.testing.assert_close(layer(x), first)
    # Factorised: the weight noise is an outer product of the two vectors.
    eps = torch.outer(layer.eps_out, layer.eps_in)
    expected = F.linear(
        x,
        layer.weight_mu + layer.weight_sigma * eps,
        layer.bias_mu + layer.bias_sigma * layer.eps_out,
    )
    torch.testing.assert_close(layer(x), expected)


def test_film_identity_is_plain_layer_norm():
    h = torch.randn(5, 16)
    ln = nn.LayerNorm(16)  # weight 1, bias 0
    torch.testing.assert_close(film_layer_norm(h, torch.ones(16), torch.zeros(16)), ln(h))
    gamma, beta = torch.rand(5, 16), torch.randn(5, 16)
    torch.testing.assert_close(film_layer_norm(h, gamma, beta), gamma * ln(h) + beta)


def test_film_generator_outputs_and_zero_init_identity():
    gen = FiLMGenerator((4, 7, 7), hidden_size=8)
    goal = torch.rand(3, 4 * 49)
    outs = gen(goal)
    assert len(outs) == 4 and all(o.shape == (3, 8) for o in outs)
    assert gen.layers[0].out_channels == 8  # 2C channels: 128 for C = 64
    nn.init.zeros_(gen.layers[-1].weight)
    nn.init.zeros_(gen.layers[-1].bias)
    g_a, b_a, g_v, b_v = gen(goal)
    torch.testing.assert_close(g_a, torch.ones(3, 8))
    torch.testing.assert_close(b_v, torch.zeros(3, 8))


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    return SGIModel("nature", 4, hidden_size=16, goal_head=True, inverse_model=True, atc_head=True)


def test_model_head_shapes(tiny_model, frames):
    m = tiny_model
    z = m.encode(frames)
    assert z.shape == (2, 64, 7, 7)
    lp = m.q_log_probs(z)
    assert lp.shape == (2, 4, 51)
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(2, 4))
    goal = torch.rand(2, 64 * 49)
    assert m.goal_q_log_probs(z, goal).shape == (2, 4, 51)
    y = m.project(z)
    assert y.shape == (2, 32) and m.projection_size == 32
    assert m.predict(y).shape == (2, 32)
    assert m.inverse_logits(y, y).shape == (2, 4)
    assert m.atc_predict(y).shape == (2, 32)
    assert m.bc_logits(z).shape == (2, 4)
    assert m.rollout(z, torch.tensor([[0, 1, 2], [3, 2, 1]])).shape == (2, 3, 64, 7, 7)
    # Leading dims are folded: (B, T, 4, 84, 84) -> (B, T, C, 7, 7).
    assert m.encode(frames[:, None].expand(2, 3, 4, 84, 84)).shape == (2, 3, 64, 7, 7)
    assert m.support[0] == -10 and m.support[-1] == 10


def test_model_noise_switch(tiny_model, frames):
    m = tiny_model
    z = m.encode(frames).detach()
    m.set_noise(False)
    quiet = m.q_logits(z)
    m.reset_noise()
    torch.testing.assert_close(m.q_logits(z), quiet)
    m.set_noise(True)
    m.reset_noise(torch.Generator().manual_seed(0))
    noisy = m.q_logits(z)
    assert not torch.allclose(noisy, quiet)
    # The projection never uses noise.
    m.set_noise(True)
    y1 = m.project(z)
    m.reset_noise()
    torch.testing.assert_close(m.project(z), y1)


def test_parameter_names_are_stable():
    torch.manual_seed(0)
    full = SGIModel("nature", 4, hidden_size=16, goal_head=True, inverse_model=True, atc_head=True)
    pre = SGIModel(
        "nature", 4, hidden_size=16, rl_head=False, goal_head=True, inverse_model=True, noisy=False
    )
    fine = SGIModel("nature", 4, hidden_size=16)
    full_shapes = {k: v.shape for k, v in full.state_dict().items()}
    for part in (pre, fine):
        for k, v in part.state_dict().items():
            assert full_shapes[k] == v.shape
    for k, _ in full.named_parameters():
        assert parameter_group(k) in PARAMETER_GROUPS
    pre_names = set(pre.state_dict())
    assert "head.advantage_hidden.weight_mu" in pre_names
    assert not any(k.startswith("head.advantage_out") for k in pre_names)
    assert {k.split(".")[0] for k in pre_names} == {
        "encoder",
        "transition",
        "head",
        "predictor",
        "film",
        "goal_head",
        "inverse",
    }
    # Loading the pretrained tensors a finetuning model shares by name works strictly.
    shared = {k: v for k, v in pre.state_dict().items() if k in fine.state_dict()}
    missing, unexpected = fine.load_state_dict(shared, strict=False)
    assert not unexpected and all(k.startswith("head.") for k in missing)


def test_channels_last_gives_same_outputs(frames):
    torch.manual_seed(0)
    a = SGIModel("resnet", 4, hidden_size=16, noisy=False)
    b = SGIModel("resnet", 4, hidden_size=16, noisy=False, channels_last=True)
    b.load_state_dict(a.state_dict())
    assert b.encoder.layers[0][0].expand.weight.is_contiguous(memory_format=torch.channels_last)
    za, zb = a.encode(frames), b.encode(frames)
    torch.testing.assert_close(za, zb, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(a.q_logits(za), b.q_logits(zb), atol=1e-4, rtol=1e-4)


def test_ema_update_arithmetic():
    online = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    target = make_target(online)
    assert all(not p.requires_grad for p in target.parameters())
    with torch.no_grad():
        for p in online.parameters():
            p.fill_(1.0)
        for p in target.parameters():
            p.fill_(0.0)
        online[1].running_mean.fill_(2.0)  # target's is 0
        online[1].num_batches_tracked.fill_(7)
    ema_update(target, online, tau=0.99)
    for p in target.parameters():
        torch.testing.assert_close(p, torch.full_like(p, 0.01))
    torch.testing.assert_close(target[1].running_mean, torch.full((2,), 0.02))
    # running_var: 0.99 * 1 + 0.01 * 1 = 1
    torch.testing.assert_close(target[1].running_var, torch.ones(2))
    assert target[1].num_batches_tracked.item() == 7
    ema_update(target, online, tau=0.5)
    torch.testing.assert_close(target[0].weight, torch.full((2, 2), 0.505))
    ema_update(target, online, tau=0.0)
    torch.testing.assert_close(target[0].weight, online[0].weight)
    # Online parameters are untouched and still trainable.
    assert all(p.requires_grad and torch.all(p == 1) for p in online.parameters())


def test_ema_leaves_noise_samples_alone():
    online = NoisyLinear(3, 2)
    target = make_target(online)
    target.reset_noise(torch.Generator().manual_seed(5))
    eps = target.eps_in.clone()
    ema_update(target, online, 0.9)
    torch.testing.assert_close(target.eps_in, eps)


def test_scale_gradient():
    x = torch.ones(3, requires_grad=True)
    (scale_gradient(x, 0.5).sum() + x.sum()).backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 1.5))


def test_noisy_linear_factorised_forward_equals_the_built_weight():
    """Few rows take the factorised path; the function and its gradients are the same."""
    torch.manual_seed(0)
    layer = NoisyLinear(20, 7)
    layer.reset_noise(torch.Generator().manual_seed(3))
    rows = NoisyLinear.FACTORISED_MAX_ROWS["cpu"] + 1
    x = torch.randn(rows, 20)
    few = layer(x[:2])  # factorised
    grads_few = torch.autograd.grad(few.sum(), list(layer.parameters()))
    many = layer(x)  # noisy weight built
    grads_many = torch.autograd.grad(many[:2].sum(), list(layer.parameters()))
    weight = layer.weight_mu + layer.weight_sigma * torch.outer(layer.eps_out, layer.eps_in)
    by_hand = x[:2] @ weight.T + layer.bias_mu + layer.bias_sigma * layer.eps_out
    torch.testing.assert_close(few, by_hand)
    torch.testing.assert_close(few, many[:2])
    for a, b in zip(grads_few, grads_many):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "in_channels, out_channels, stride, side, channels_last",
    [(8, 8, 1, 9, False), (4, 32, 3, 12, True)],  # the latter: 8 hidden channels, wide norms
)
def test_inverted_residual_training_forward_and_gradients_are_the_textbook_ones(
    monkeypatch, in_channels, out_channels, stride, side, channels_last
):
    """The block adds its shortcut in place and (channels-last, 8 hidden channels) normalizes
    through the wide view; outputs and gradients match the plain composition."""
    from sgi_lab.nets import encoders

    torch.manual_seed(0)
    block = InvertedResidual(in_channels, out_channels, stride, expand_ratio=2)
    nn.init.uniform_(block.project_bn.weight, 0.5, 1.5)  # not the zero init, so gradients flow
    x = torch.randn(3, in_channels, side, side)
    if channels_last:
        block.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    wide_calls = []
    apply = encoders._WideNorm.apply
    monkeypatch.setattr(encoders._WideNorm, "apply", lambda *a: wide_calls.append(1) or apply(*a))
    out = block(x)
    assert len(wide_calls) == (2 if channels_last else 0)
    grads = torch.autograd.grad(out.square().sum(), [x, *block.parameters()])
    h = F.relu(block.expand_bn(block.expand(x)))
    h = F.relu(block.depthwise_bn(block.depthwise(h)))
    plain = block.shortcut(x) + block.project_bn(block.project(h))
    plain_grads = torch.autograd.grad(plain.square().sum(), [x, *block.parameters()])
    # The wide norm's backward sums in another order: float32 rounding, amplified by the
    # cancellation in batch norm's gradient (relative 5e-5 seen on the expand weights).
    tol = {"atol": 2e-4, "rtol": 2e-4} if channels_last else {}
    torch.testing.assert_close(out, plain, **tol)
    for a, b in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_lerp_is_the_per_tensor_lerp(monkeypatch):
    targets = [torch.zeros(3), torch.ones(2, 2)]
    sources = [torch.full((3,), 2.0), torch.full((2, 2), 3.0)]
    lerp_(targets, sources, 0.25)  # t + 0.25 * (s - t)
    torch.testing.assert_close(targets[0], torch.full((3,), 0.5))
    torch.testing.assert_close(targets[1], torch.full((2, 2), 1.5))
    monkeypatch.delattr(torch, "_foreach_lerp_")  # the public fallback gives the same
    lerp_(targets, sources, 0.25)
    torch.testing.assert_close(targets[0], torch.full((3,), 0.875))
    lerp_([], [], 0.5)


def test_norm_input_gives_a_vmapped_gpu_tensor_the_standard_layout():
    """CUDA's batch norm under vmap failed on channels-last-like strides (torch 2.11, H100):
    `norm_input` copies such a per-agent tensor to the standard layout off the CPU (the meta
    device stands in for CUDA here) and returns a CPU tensor as it is."""
    from torch.func import vmap

    from sgi_lab.nets.encoders import norm_input

    def layout(x):
        y = norm_input(x)
        assert not x.is_contiguous() and y.is_contiguous()
        return y

    looks_channels_last = torch.empty(2, 8, 10, 10, 4, device="meta").permute(0, 1, 4, 2, 3)
    assert vmap(layout)(looks_channels_last).shape == (2, 8, 4, 10, 10)
    cpu = torch.randn(8, 10, 10, 4).permute(0, 3, 1, 2)
    assert norm_input(cpu) is cpu
    assert vmap(norm_input)(cpu[None].expand(2, -1, -1, -1, -1)).shape == (2, 8, 4, 10, 10)
