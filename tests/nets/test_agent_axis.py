"""Convolution, batch norm and the transition model with the agent axis explicit
(`sgi_lab.nets.agent_axis`, a GPU population's update) against vmap's own batching rules: the
same values, gradients and running statistics (float64 to 1e-12; float32, the update's dtype,
to 1e-5), in fewer operators."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

import sgi_lab.nets.transition as transition_module
from sgi_lab.nets import agent_axis
from sgi_lab.nets.agent_axis import batch_norm, conv2d, lean_kernels
from sgi_lab.nets.encoders import make_encoder, renormalize
from sgi_lab.nets.heads import InverseModel
from sgi_lab.nets.model import SGIModel
from sgi_lab.nets.noisy import NoisyLinear
from sgi_lab.nets.transition import TransitionModel
from sgi_lab.runtime.graphs import OpCounter
from sgi_lab.train.update import learn_step

AGENTS = 3


def stacked(module: nn.Module, dtype: torch.dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``module`` (noise samples included) for AGENTS agents,
    each agent's different."""
    torch.manual_seed(seed)
    state = {}
    for k, v in [*module.named_parameters(), *module.named_buffers()]:
        if v.is_floating_point():
            t = torch.randn(AGENTS, *v.shape, dtype=dtype)
            t = t.abs() + 0.5 if k.endswith("running_var") else t
            state[k] = t.requires_grad_(k in dict(module.named_parameters()))
        else:
            state[k] = v.detach().expand(AGENTS, *v.shape).clone()
    return state


def run(module, state, fn, inputs, grad_out, lean: bool):
    """fn(module, *inputs) under vmap over the agents' state (copies of it: running statistics
    move in place), its gradient from ``grad_out``: values, the inputs' and parameters' gradients
    and the buffers after."""
    state = {k: v.detach().clone().requires_grad_(v.requires_grad) for k, v in state.items()}
    inputs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    batched = [i for i, x in enumerate(inputs) if x.shape[0] == AGENTS]

    def per_agent(s, *xs):
        return functional_call(module, s, (fn, *xs))

    with lean_kernels(lean):
        out = vmap(
            per_agent, in_dims=(0, *[0 if i in batched else None for i in range(len(inputs))])
        )(state, *inputs)
    params = [v for v in state.values() if v.requires_grad]
    wrt = [x for x in inputs if x.requires_grad] + params
    grads = torch.autograd.grad((out * grad_out).sum(), wrt, allow_unused=True)
    buffers = [v for v in state.values() if not v.requires_grad]
    return out.detach(), grads, buffers


class Apply(nn.Module):
    def __init__(self, **children: nn.Module) -> None:
        super().__init__()
        for k, v in children.items():
            self.add_module(k, v)

    def forward(self, fn, *xs):
        return fn(self, *xs)


def assert_same(a, b, tol: float) -> None:
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            assert x is None and y is None
            continue
        if not x.is_floating_point():
            assert torch.equal(x, y)
            continue
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


def conv_bn_conv(m, x):
    h = F.relu(conv2d(x, m.conv.weight[:, :4], m.conv.bias, m.conv.stride, m.conv.padding))
    h = batch_norm(m.bn, h)
    return conv2d(h, m.conv2.weight, None, 2, 1)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_conv_and_batch_norm_equal_vmaps_rules(dtype, tol):
    """A conv over a slice of its weight (as the transition model's first conv), a norm with
    running statistics and a strided conv without bias: lean equals vmap's rules, running
    statistics and the norm's step count included."""
    module = Apply(
        conv=nn.Conv2d(6, 5, 3, padding=1), bn=nn.BatchNorm2d(5), conv2=nn.Conv2d(5, 7, 3)
    )
    state = stacked(module, dtype)
    x = torch.randn(AGENTS, 4, 4, 6, 6, dtype=dtype)
    g = torch.randn(AGENTS, 4, 7, 3, 3, dtype=dtype)
    lean = run(module, state, conv_bn_conv, [x], g, lean=True)
    plain = run(module, state, conv_bn_conv, [x], g, lean=False)
    assert_same([lean[0], *lean[1], *lean[2]], [plain[0], *plain[1], *plain[2]], tol)
    assert lean[2][-1].tolist() == [1] * AGENTS  # num_batches_tracked moved once per agent


def test_conv_of_an_input_every_agent_shares():
    """The action maps' conv: one input (the one-hot planes) for every agent's weights."""
    module = Apply(conv=nn.Conv2d(4, 5, 3, padding=1))
    state = stacked(module, torch.float64)
    planes = torch.randn(2, 4, 5, 5, dtype=torch.float64)
    g = torch.randn(AGENTS, 2, 5, 5, 5, dtype=torch.float64)

    def fn(m, x):
        return conv2d(x, m.conv.weight, m.conv.bias, 1, 1)

    lean = run(module, state, fn, [planes], g, lean=True)
    plain = run(module, state, fn, [planes], g, lean=False)
    assert_same([lean[0], *lean[1]], [plain[0], *plain[1]], 1e-12)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_transition_rollout_equals_vmaps_rules(dtype, tol):
    """K = 3 recursive steps of MinAtar's transition model (16 channels, 8x8, 6 actions)."""
    model = TransitionModel(16, 6).to(dtype)
    module = Apply(t=model)
    state = stacked(module, dtype, seed=1)
    z = torch.rand(AGENTS, 4, 16, 8, 8, dtype=dtype)
    actions = torch.randint(0, 6, (AGENTS, 4, 3))
    g = torch.randn(AGENTS, 4, 3, 16, 8, 8, dtype=dtype)

    def fn(m, z, a):
        return m.t.rollout(z, a)

    lean = run(module, state, fn, [z, actions], g, lean=True)
    plain = run(module, state, fn, [z, actions], g, lean=False)
    assert_same([lean[0], *lean[1], *lean[2]], [plain[0], *plain[1], *plain[2]], tol)


def node_names(t: torch.Tensor, depth: int = 4) -> set[str]:
    """Names of the autograd nodes within ``depth`` steps of ``t``'s."""
    names, frontier = set(), [t.grad_fn]
    for _ in range(depth):
        frontier = [n for n in frontier if n is not None]
        names |= {n.name() for n in frontier}
        frontier = [nxt for n in frontier for nxt, _ in n.next_functions]
    return names


def count(module, state, fn, inputs, g, lean: bool, views: bool) -> int:
    counter = OpCounter(views)
    with counter:
        run(module, state, fn, inputs, g, lean)
    return sum(counter.totals().values())


def test_the_lean_rollout_dispatches_fewer_operators():
    model = TransitionModel(16, 6)
    module = Apply(t=model)
    state = stacked(module, torch.float32, seed=2)
    inputs = [torch.rand(AGENTS, 4, 16, 8, 8), torch.randint(0, 6, (AGENTS, 4, 3))]
    g = torch.randn(AGENTS, 4, 3, 16, 8, 8)

    def fn(m, z, a):
        return m.t.rollout(z, a)

    for views in (False, True):
        lean, plain = (count(module, state, fn, inputs, g, le, views) for le in (True, False))
        assert lean < 0.8 * plain, (views, lean, plain)


def test_outside_the_switch_or_vmap_the_plain_operators_run():
    """Outside `lean_kernels` (a CPU's update) vmap's own rules run: the same operators as
    ``F.conv2d`` under vmap; outside vmap, ``F.conv2d`` itself."""
    conv = nn.Conv2d(3, 4, 3).double()
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    with lean_kernels():
        assert agent_axis.lean()
        assert conv2d(x, conv.weight, conv.bias).grad_fn.name() == "ConvolutionBackward0"
    assert not agent_axis.lean()
    xs = x.detach().expand(2, -1, -1, -1, -1)
    counted = []
    for fn in (conv2d, F.conv2d):
        weights = conv.weight.detach().expand(2, -1, -1, -1, -1).clone().requires_grad_()
        counter = OpCounter(views=True)
        with counter:
            vmap(lambda w, x, fn=fn: fn(x, w))(weights, xs).sum().backward()
        counted.append(counter.counts["other"])
    assert counted[0] == counted[1]


def test_the_functions_outside_vmap_are_the_plain_operators():
    """Applied directly (not under vmap), each autograd Function is the operator it batches:
    values and gradients."""
    torch.manual_seed(3)
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    ours = agent_axis._AgentConv2d.apply(x, w, b, (2, 2), (1, 1))
    theirs = F.conv2d(x, w, b, 2, 1)
    assert_same(
        [ours, *torch.autograd.grad((ours * g).sum(), (x, w, b))],
        [theirs, *torch.autograd.grad((theirs * g).sum(), (x, w, b))],
        1e-12,
    )
    weight, bias = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    weight.requires_grad_(), bias.requires_grad_()
    stats = [torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)]
    ref_stats = [s.clone() for s in stats]
    g = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    ours = agent_axis._AgentBatchNorm.apply(x, *stats, weight, bias, 0.1, 1e-5)[0]
    theirs = F.batch_norm(x, *ref_stats, weight, bias, True, 0.1, 1e-5)
    assert_same(
        [ours, *torch.autograd.grad((ours * g).sum(), (x, weight, bias)), *stats],
        [theirs, *torch.autograd.grad((theirs * g).sum(), (x, weight, bias)), *ref_stats],
        1e-12,
    )


@pytest.mark.parametrize("noise", [True, False])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_noisy_linear_equals_the_layers_formula(noise, dtype, tol):
    """A noisy layer on (B, K, D) inputs, with noise (the Q head) and without (SPR's
    projection): values, the input's and every parameter's gradient (None where unused)."""
    module = Apply(layer=NoisyLinear(12, 5))
    state = stacked(module, dtype, seed=4)
    x = torch.randn(AGENTS, 4, 3, 12, dtype=dtype)
    g = torch.randn(AGENTS, 4, 3, 5, dtype=dtype)

    def fn(m, x):
        return m.layer(x, noise=noise)

    lean = run(module, state, fn, [x], g, lean=True)
    plain = run(module, state, fn, [x], g, lean=False)
    assert_same([lean[0], *lean[1]], [plain[0], *plain[1]], tol)
    assert (lean[1][-1] is None) is not noise  # sigma_b: a gradient only with noise


def test_noisy_linear_dispatches_fewer_operators():
    module = Apply(layer=NoisyLinear(64, 32))
    state = stacked(module, torch.float32, seed=5)
    x, g = torch.randn(AGENTS, 8, 64), torch.randn(AGENTS, 8, 32)

    def fn(m, x):
        return m.layer(x)

    for views in (False, True):
        lean, plain = (count(module, state, fn, [x], g, le, views) for le in (True, False))
        assert lean < 0.7 * plain, (views, lean, plain)


def test_the_noisy_function_outside_vmap_is_the_layers_formula():
    torch.manual_seed(6)
    layer = NoisyLinear(6, 4).double()
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 3, 4, dtype=torch.float64)
    params = [layer.weight_mu, layer.bias_mu, layer.weight_sigma, layer.bias_sigma]
    noise = (layer.weight_sigma, layer.bias_sigma, layer.eps_in, layer.eps_out)
    ours = agent_axis.noisy_linear(x, layer.weight_mu, layer.bias_mu, noise)
    theirs = layer(x)
    assert_same(
        [ours, *torch.autograd.grad((ours * g).sum(), [x, *params])],
        [theirs, *torch.autograd.grad((theirs * g).sum(), [x, *params])],
        1e-12,
    )


def test_renormalize_under_vmap_runs_on_the_unwrapped_tensor():
    """Within `lean_kernels` renormalize's vmap rule is the closed-form Function itself on the
    unwrapped tensor, the agents on any axis (here the last, which the formula must not reduce
    over): autograd's formula, values and gradients."""
    torch.manual_seed(7)
    x = torch.randn(5, 6, AGENTS, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, 6, AGENTS, dtype=torch.float64)

    def formula(v):
        lo, hi = v.amin(-1, keepdim=True), v.amax(-1, keepdim=True)
        return (v - lo) / (hi - lo).clamp_min(1e-6)

    with lean_kernels():
        ours = vmap(lambda v: renormalize(v, start_dim=-1), in_dims=2, out_dims=2)(x)
    theirs = vmap(formula, in_dims=2, out_dims=2)(x)
    assert "_RenormalizeBackward" in node_names(ours)  # the Function, not vmap's re-batching
    assert_same(
        [ours, *torch.autograd.grad((ours * g).sum(), x)],
        [theirs, *torch.autograd.grad((theirs * g).sum(), x)],
        1e-12,
    )


def test_a_rollout_splits_the_first_kernel_once():
    """The rollout's K steps and its action maps read the first conv's kernel through one split
    (its gradient one concatenation, no zero-filled kernel per step), with the gradient of K
    single steps (whose maps are indexed, not picked by a one-hot product: equal up to
    rounding). Against the per-step slices it replaced the rollout is equal to the bit (float32,
    vmap'd and plain, values, gradients and running statistics; checked when it was made)."""
    torch.manual_seed(8)
    model = TransitionModel(8, 4)
    z, actions = torch.rand(3, 8, 5, 5), torch.randint(0, 4, (3, 4))
    g = torch.randn(3, 4, 8, 5, 5)

    def kernel_grad(rollout: bool) -> tuple[torch.Tensor, set[str]]:
        model.zero_grad()
        if rollout:
            out = model.rollout(z, actions)
        else:
            steps, h = [], z
            for k in range(actions.shape[1]):
                h = model(h, actions[:, k])
                steps.append(h)
            out = torch.stack(steps, 1)
        counter = OpCounter()
        with counter:
            (out * g).sum().backward()
        return model.first.weight.grad.clone(), set(counter.counts["other"])

    (ours, ops), (theirs, _) = kernel_grad(True), kernel_grad(False)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert "slice_backward" not in ops and "cat" in ops


@pytest.mark.parametrize(
    ("encoder", "shape"),
    [("nature", (4, 36, 36)), ("minatar", (4, 10, 10)), ("minatar_l", (6, 10, 10))],
)
def test_encoders_equal_vmaps_rules(encoder, shape):
    """The encoders' convs (`sgi_lab.nets.agent_axis.Conv2d`) and in-place ReLUs under vmap:
    lean equals vmap's rules (float64, values and gradients); the module names are nn's."""
    module = Apply(e=make_encoder(encoder, shape[0], shape[1]))
    assert all(
        isinstance(m, (nn.Conv2d, nn.ReLU, nn.Sequential, type(module.e), Apply))
        for m in module.modules()
    )
    state = stacked(module, torch.float64, seed=9)
    x = torch.rand(AGENTS, 2, *shape, dtype=torch.float64)  # prepared: scaled already
    g = torch.randn(AGENTS, 2, *module.e.output_shape, dtype=torch.float64)

    def fn(m, x):
        return m.e(x, prepared=True)

    lean = run(module, state, fn, [x], g, lean=True)
    plain = run(module, state, fn, [x], g, lean=False)
    assert_same([lean[0], *lean[1]], [plain[0], *plain[1]], 1e-12)
    assert count(module, state, fn, [x], g, True, True) < count(
        module, state, fn, [x], g, False, True
    )


def test_the_rollout_function_outside_vmap_is_the_rollout():
    """`_AgentRollout` applied to one agent's tensors (not under vmap; its gradient by
    recomputation) is `TransitionModel.rollout`: values, gradients, running statistics moved
    once."""
    torch.manual_seed(10)
    model = TransitionModel(8, 4).double()
    z = torch.rand(3, 8, 5, 5, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, 4, (3, 4))
    g = torch.randn(3, 4, 8, 5, 5, dtype=torch.float64)
    bn = model.first_bn
    params = [model.first.weight, model.first.bias, bn.weight, bn.bias]
    params += [bn.running_mean, bn.running_var, model.final.weight, model.final.bias]
    trained = [p for p in params if p.requires_grad]
    stats = [bn.running_mean.clone(), bn.running_var.clone()]
    ours = transition_module._AgentRollout.apply(z, actions, *params, (8, 4, bn.momentum, bn.eps))
    ours_stats = [bn.running_mean.clone(), bn.running_var.clone()]
    ours_grads = torch.autograd.grad((ours * g).sum(), [z, *trained])
    bn.running_mean.copy_(stats[0]), bn.running_var.copy_(stats[1])
    theirs = model.rollout(z, actions)
    assert_same(
        [ours, *ours_grads, *ours_stats],
        [
            theirs,
            *torch.autograd.grad((theirs * g).sum(), [z, *trained]),
            bn.running_mean,
            bn.running_var,
        ],
        1e-12,
    )


def test_heads_layers_equal_vmaps_rules():
    """SPR's predictor, the inverse model and the FiLM generator (agent_axis' Linear, Conv2d
    and ReLU) under vmap: lean equals vmap's rules (float64, values and gradients)."""
    model = SGIModel("minatar", 6, in_channels=4, image_size=10, hidden_size=8, goal_head=True)
    model.inverse = InverseModel(model.projection_size, 6)
    module = Apply(predictor=model.predictor, inverse=model.inverse, film=model.film).double()
    state = stacked(module, torch.float64, seed=11)
    y = torch.randn(AGENTS, 4, model.projection_size, dtype=torch.float64)
    goal = torch.randn(AGENTS, 4, model.latent_size, dtype=torch.float64)
    g = torch.randn(AGENTS, 4, 6 + model.projection_size + 4 * 8, dtype=torch.float64)

    def fn(m, y, goal):
        return torch.cat([m.inverse(y, y), m.predictor(y), *m.film(goal)], -1)

    lean = run(module, state, fn, [y, goal], g, lean=True)
    plain = run(module, state, fn, [y, goal], g, lean=False)
    assert_same([lean[0], *lean[1]], [plain[0], *plain[1]], 1e-12)
    fewer = [count(module, state, fn, [y, goal], g, le, True) for le in (True, False)]
    assert fewer[0] < fewer[1]


def channels_last_weights(pop) -> None:  # noqa: ANN001
    """Each agent's conv kernels in the channels-last layout, as a run whose models were moved
    to it (`cpu_settings`' choice) stacks them: (N, O, C, kh, kw) with C innermost."""
    for v in pop.online.values():
        if v.dim() == 5:
            v.data = v.detach().permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_a_lean_minatar_learn_step_equals_the_cpus(layout):
    """A MinAtar population's learn step (3 agents, SPR, benchmarks/learn_ops.py's replay)
    with `lean_kernels` (every formulation above, on a GPU) against the CPU's path: the same
    losses, priorities and new weights within the lean update's tolerances (rtol 1e-5,
    atol 1e-6, as tests/train/test_update_ops.py's Nature case), in fewer dispatches. Also with
    channels-last kernels, whose convolutions return channels-last maps (the transition
    rollout once read them with a view that fails on that layout)."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    try:
        import learn_ops
    finally:
        sys.path.pop(0)
    results = {}
    for lean in (True, False):
        pop, replay = learn_ops.build("minatar", 3, 4, "prefix", 64)
        pop.lean_kernels = lean
        if layout == "channels_last":
            channels_last_weights(pop)
        replay.set_beta(0.4)
        counter = OpCounter(views=True)
        with counter:
            stats = learn_step(pop, replay)
        results[lean] = stats, pop.online, sum(counter.totals().values())
    (stats, online, lean_ops), (ref_stats, ref_online, plain_ops) = results[True], results[False]
    for k, v in ref_stats.items():
        torch.testing.assert_close(stats[k], v, rtol=1e-5, atol=1e-6, msg=k)
    for k, v in ref_online.items():
        torch.testing.assert_close(online[k], v, rtol=1e-5, atol=1e-6, msg=k)
    assert lean_ops < 0.75 * plain_ops
