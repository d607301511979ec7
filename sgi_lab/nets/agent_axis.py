"""Convolution, batch norm and linear layers with a population's agent axis explicit, for
updates under vmap.

A population runs every agent's network at once under ``torch.func.vmap`` (one operator for all
agents). vmap's own batching rules for a conv or a batch norm whose weights are batched move the
agent axis into the channels with a grouped conv / a per-(agent, channel) norm, but they pay for
it in re-layouts: each call permutes and copies its input, adds the bias and applies the norm's
affine map as separate operators, and moves the result back, and the backward mirrors it (a conv
~29 dispatches with views, forward and backward, a batch norm ~38); a linear layer with batched
weights is a bmm, a bias add and a scaling, its weight gradient re-laid out by a copy. Here the
same grouped operators are written once, on the unwrapped tensors (an autograd.Function's
``vmap`` staticmethod): a conv's input is read as (B, N * C, H, W), its weights as
(N * O, C, kh, kw), its result left in that layout with the agent axis at dimension 1, so the
next conv or norm reads it without a copy; a (noisy) linear layer is one ``baddbmm`` with a
backward written out (`noisy_linear`). `sgi_lab.nets.transition` runs a whole SPR rollout so.

They round differently from vmap's rules (the bias and the norm's affine map fused into the
kernel: equal within 1e-5 in float32), so they run only within `lean_kernels`: a population's
update under vmap, on a GPU and a CPU alike, unless its config sets ``lean_kernels: false``
(`sgi_lab.train.update.lean_kernels`; runs made before 2026-11-29 took vmap's rules on a CPU).
Outside it, and outside vmap, every function and layer here is the plain operator or nn's own
module. On a CPU the lean update is the faster one: a MinAtar population's learn step, batch 32,
one thread, took 0.876x vmap's rules' process time at 16 agents (one round) and 0.887-0.911x
at 33 (six interleaved rounds; `benchmarks/speed_ab.py --now-lean`), loaded 2-core Zen 4 EPYC,
2026-11-29.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_LEAN = contextvars.ContextVar("lean_kernels", default=False)


@contextlib.contextmanager
def lean_kernels(enabled: bool = True) -> Iterator[None]:
    """Within the block, the networks take their formulations with fewer operators (for
    devices that launch a kernel per operator): convs, norms, linear layers and the SPR rollout
    with the agent axis explicit under vmap, and `sgi_lab.nets.encoders.renormalize`'s
    closed-form gradient."""
    token = _LEAN.set(enabled)
    try:
        yield
    finally:
        _LEAN.reset(token)


def lean() -> bool:
    """Whether `lean_kernels` is on here."""
    return _LEAN.get()


def under_vmap(x: torch.Tensor) -> bool:
    """Whether ``x`` is a torch.func (vmap) wrapper, as inside a population's batched update."""
    return torch._C._functorch.is_functorch_wrapped_tensor(x)


def norm_input(x: torch.Tensor) -> torch.Tensor:
    """``x`` for a batch norm: in the standard layout when it is a vmap wrapper on a GPU.

    CUDA's batch norm asks ``is_contiguous(channels_last)`` of an input whose strides look
    channels-last, and vmap does not implement that question: with torch 2.11 on an H100 the
    MinAtar transition model's norm failed so inside a population's update ("NYI: querying
    is_contiguous inside of vmap for memory_format other than torch.contiguous_format";
    docs/results/gpu.md). A copy of a 10x10 map costs nothing beside that; elsewhere ``x``
    itself.
    """
    return x.contiguous() if x.device.type != "cpu" and under_vmap(x) else x


def agent_axis_here(*tensors: torch.Tensor) -> bool:
    """Whether to take this module's agent-axis formulations: within `lean_kernels`, with one
    of ``tensors`` a vmap wrapper."""
    return lean() and any(under_vmap(t) for t in tensors)


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding)`` on (B, C, H, W) inputs; under vmap within
    `lean_kernels`, one grouped conv over the agents (`_AgentConv2d`)."""
    if x.dim() == 4 and agent_axis_here(x, weight):
        return _AgentConv2d.apply(x, weight, bias, _pair(stride), _pair(padding))
    return F.conv2d(x, weight, bias, stride, padding)


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` (the same parameters and names) whose forward is `conv2d`: one grouped conv
    over the agents under vmap within `lean_kernels`, ``F.conv2d`` otherwise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        plain = self.groups != 1 or self.dilation != (1, 1) or self.padding_mode != "zeros"
        if plain or isinstance(self.padding, str):
            return super().forward(x)
        return conv2d(x, self.weight, self.bias, self.stride, self.padding)


class Linear(nn.Linear):
    """``nn.Linear`` (the same parameters and names) whose forward, under vmap within
    `lean_kernels`, is `noisy_linear` without noise: one batched product with the bias."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if self.bias is None or not agent_axis_here(x, self.weight):
            return super().forward(x)
        return noisy_linear(x, self.weight, self.bias)


class ReLU(nn.ReLU):
    """``nn.ReLU``, out of place where `conv2d`'s agent-axis results come in (under vmap within
    `lean_kernels`): vmap runs an in-place operator on a view of the agents' tensor, whose
    gradient autograd then re-lays out in four more operators."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return F.relu(x) if self.inplace and agent_axis_here(x) else super().forward(x)


def batch_norm(bn: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    """``bn(x)`` for a (B, C, H, W) input; under vmap within `lean_kernels` and in training
    with running statistics (a population's update), one norm over the agents' channels
    (`_AgentBatchNorm`), the running statistics moved in place as ``bn`` moves them."""
    if not (
        lean()
        and bn.training
        and bn.track_running_stats
        and bn.momentum is not None  # a cumulative average reads the count on the host
        and bn.weight is not None
        and x.dim() == 4
        and under_vmap(x)
    ):
        return bn(norm_input(x))
    bn.num_batches_tracked.add_(1)
    return _AgentBatchNorm.apply(
        x, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.momentum, bn.eps
    )[0]


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def fresh_view(out: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``out.view(shape)`` for an operator's fresh result, which nothing else aliases, as a
    tensor of its own for autograd (``_unsafe_view``, as ``reshape`` returns its copies), so
    that an in-place operator on it needs no view bookkeeping of its own."""
    return torch.ops.aten._unsafe_view(out, shape)


def agents_first(t: torch.Tensor, dim: int | None, n: int) -> torch.Tensor:
    """A (N, ...) view of an unwrapped tensor with its agent axis at ``dim`` (None: shared by
    every agent, expanded)."""
    if dim is None:
        return t.expand(n, *t.shape)
    return t.movedim(dim, 0) if dim else t


def agents_in_channels(x: torch.Tensor, dim: int | None, n: int) -> torch.Tensor:
    """An unwrapped (B, C, H, W) input with its agent axis at ``dim`` -> (B, N * C, H, W): a
    view where the agent axis already sits before the channels (the layout this module's
    results have), else one copy."""
    if dim is None:
        x = x.unsqueeze(1).expand(-1, n, *x.shape[1:])
    elif dim != 1:
        x = x.movedim(dim, 1)
    return x.flatten(1, 2)


class _AgentConv2d(torch.autograd.Function):
    """``F.conv2d`` whose ``vmap`` rule is one grouped conv over the agents (module doc)."""

    @staticmethod
    def forward(x, weight, bias, stride, padding):  # noqa: ANN001, ANN205, D102
        return F.conv2d(x, weight, bias, stride, padding)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        x, weight, bias, ctx.stride, ctx.padding = inputs
        ctx.bias_size = None if bias is None else [bias.shape[0]]
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x, weight = ctx.saved_tensors
        wanted = [*ctx.needs_input_grad[:2], ctx.bias_size is not None]
        gx, gw, gb = torch.ops.aten.convolution_backward(
            grad, x, weight, ctx.bias_size, ctx.stride, ctx.padding, [1, 1], False, [0, 0], 1,
            wanted,
        )  # fmt: skip
        return gx, gw, gb, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x, weight, bias, stride, padding):  # noqa: ANN001, ANN205
        n = info.batch_size
        x_dim, w_dim, b_dim = in_dims[:3]
        weight = agents_first(weight, w_dim, n)
        out_channels = weight.shape[1]
        weight = weight.reshape(n * out_channels, *weight.shape[2:])
        if bias is not None:
            bias = agents_first(bias, b_dim, n).reshape(-1)
        if x_dim is None:  # every agent reads the same input: one conv, no groups
            out = F.conv2d(x, weight, bias, stride, padding)
        else:
            x = agents_in_channels(x, x_dim, n)
            out = F.conv2d(x, weight, bias, stride, padding, groups=n)
        return fresh_view(out, (out.shape[0], n, out_channels, *out.shape[2:])), 1


class _AgentBatchNorm(torch.autograd.Function):
    """Training-mode batch norm with running statistics, whose ``vmap`` rule is one norm over
    the (agent, channel) pairs (module doc); the agents' running statistics, (N, C) tensors,
    are moved in place through their (N * C,) views. Returns the result and the batch's mean
    and inverse standard deviation (not differentiable)."""

    @staticmethod
    def forward(x, running_mean, running_var, weight, bias, momentum, eps):  # noqa: ANN001, ANN205, D102
        return torch.native_batch_norm(
            x, weight, bias, running_mean, running_var, True, momentum, eps
        )

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        x, _, _, weight, _, _, ctx.eps = inputs
        _, mean, invstd = output
        ctx.mark_non_differentiable(mean, invstd)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, weight, mean, invstd)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple:
        x, weight, mean, invstd = ctx.saved_tensors
        wanted = [ctx.needs_input_grad[i] for i in (0, 3, 4)]
        gx, gw, gb = torch.ops.aten.native_batch_norm_backward(
            grad, x, weight, None, None, mean, invstd, True, ctx.eps, wanted
        )
        return gx, None, None, gw, gb, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x, running_mean, running_var, weight, bias, momentum, eps):  # noqa: ANN001, ANN205, E501
        n = info.batch_size
        x_dim, mean_dim, var_dim, w_dim, b_dim = in_dims[:5]
        if x_dim is None or mean_dim is None or var_dim is None:
            raise ValueError("an agent-axis batch norm needs batched inputs and statistics")
        stats = [agents_first(running_mean, mean_dim, n), agents_first(running_var, var_dim, n)]
        if not all(s.is_contiguous() for s in stats):
            raise ValueError("the agents' running statistics must be contiguous (N, C) tensors")
        out, mean, invstd = torch.native_batch_norm(
            agents_in_channels(x, x_dim, n),
            agents_first(weight, w_dim, n).reshape(-1),
            agents_first(bias, b_dim, n).reshape(-1),
            stats[0].view(-1),
            stats[1].view(-1),
            True,
            momentum,
            eps,
        )
        out = fresh_view(out, (out.shape[0], n, -1, *out.shape[2:]))
        return (out, mean.view(n, -1), invstd.view(n, -1)), (1, 0, 0)


def noisy_linear(
    x: torch.Tensor,
    weight_mu: torch.Tensor,
    bias_mu: torch.Tensor,
    noise: tuple[torch.Tensor, ...] | None = None,
) -> torch.Tensor:
    """x (mu_w + sigma_w eps_out eps_in^T)^T + mu_b + sigma_b eps_out on (..., D) inputs, or
    ``F.linear`` over the means when ``noise`` (sigma_w, sigma_b, eps_in, eps_out) is None.

    Under vmap (callers ask `agent_axis_here` first) the noisy weight is built once for every
    agent and multiplied with the bias in one batched product, whose backward writes each
    gradient once, in its parameter's layout (`_AgentsLinear`): 4 operators forward and 5
    backward for a noisy layer, where vmap's rules take 6 and 12 (two of them copies re-laying
    out the weights' gradients)."""
    return _AgentLinear.apply(x, weight_mu, bias_mu, *(noise or (None,) * 4))


def _noisy_parameters(weight_mu, bias_mu, weight_sigma, bias_sigma, eps_in, eps_out):  # noqa: ANN001, ANN202
    """(weight, bias, eps_out eps_in^T), the last None without noise."""
    if weight_sigma is None:
        return weight_mu, bias_mu, None
    outer = eps_out.unsqueeze(-1) * eps_in.unsqueeze(-2)
    weight = torch.addcmul(weight_mu, weight_sigma, outer)
    return weight, torch.addcmul(bias_mu, bias_sigma, eps_out), outer


def _linear_grads(need, grad, x, weight, outer, eps_out) -> tuple:  # noqa: ANN001
    """`_AgentsLinear`'s gradients from (N, R, O) ``grad`` (its docstring)."""
    grad_x = torch.bmm(grad, weight) if need[0] else None
    grad_w = torch.bmm(grad.transpose(1, 2), x) if need[1] or need[3] else None
    grad_b = grad.sum(1) if need[2] or need[4] else None
    return (
        grad_x,
        grad_w if need[1] else None,
        grad_b if need[2] else None,
        grad_w * outer if need[3] else None,
        grad_b * eps_out if need[4] else None,
        None,
        None,
    )


class _AgentsLinear(torch.autograd.Function):
    """The (noisy) linear layer of N agents at once: x (N, R, D), weights (N, O, D), biases and
    noise (N, O) / (N, D); y = baddbmm(b, x, W^T). Backward: dW = g^T x in W's layout (not the
    transposed product autograd re-lays out), d sigma_w = dW * eps_out eps_in^T, db = sum g,
    d sigma_b = db * eps_out, dx = g W."""

    @staticmethod
    def forward(ctx, x, weight_mu, bias_mu, weight_sigma, bias_sigma, eps_in, eps_out):  # noqa: ANN001, ANN205, D102
        weight, bias, outer = _noisy_parameters(
            weight_mu, bias_mu, weight_sigma, bias_sigma, eps_in, eps_out
        )
        ctx.save_for_backward(x, weight, outer, eps_out)
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205, D102
        return _linear_grads(ctx.needs_input_grad, grad, *ctx.saved_tensors)


class _AgentLinear(torch.autograd.Function):
    """One agent's (noisy) linear layer on (..., D) inputs, whose ``vmap`` rule is
    `_AgentsLinear` over every agent (`noisy_linear`)."""

    @staticmethod
    def forward(x, weight_mu, bias_mu, weight_sigma, bias_sigma, eps_in, eps_out):  # noqa: ANN001, ANN205, D102
        weight, bias, _ = _noisy_parameters(
            weight_mu, bias_mu, weight_sigma, bias_sigma, eps_in, eps_out
        )
        return F.linear(x, weight, bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x, *params = ctx.saved_tensors
        one = [None if p is None else p.unsqueeze(0) for p in params]
        weight, _, outer = _noisy_parameters(*one)
        grads = _linear_grads(
            ctx.needs_input_grad,
            grad.reshape(1, -1, grad.shape[-1]),
            x.reshape(1, -1, x.shape[-1]),
            weight,
            outer,
            one[-1],
        )
        grads = [None if g is None else g[0] for g in grads]
        if grads[0] is not None:
            grads[0] = grads[0].view(x.shape)
        return tuple(grads)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x, *params):  # noqa: ANN001, ANN205
        n = info.batch_size
        x = agents_first(x, in_dims[0], n)
        lead = x.shape[1:-1]
        params = [
            None if p is None else agents_first(p, d, n)
            for p, d in zip(params, in_dims[1:], strict=True)
        ]
        if x.dim() == 3:  # (N, B, D): the rows as they are
            return _AgentsLinear.apply(x, *params), 0
        out = _AgentsLinear.apply(x.reshape(n, -1, x.shape[-1]), *params)
        return fresh_view(out, (n, *lead, out.shape[-1])), 0
