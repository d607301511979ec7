"""Convolutional encoders f: observations (B, C_in, H, W) -> latents (B, C, H', W').

Inputs are pixel-valued: uint8, or float in [0, 255] (e.g. after :mod:`sgi_lab.augment.ops`). Every
encoder divides by 255 itself, so callers never rescale.

Three encoders, as in the paper (appendix C.3) and the reference code (``mila-iqia/SGI``,
``src/networks.py`` and ``src/models.py``):

* ``"nature"``: the DQN CNN, 32x8x8 s4, 64x4x4 s2, 64x3x3 s1, ReLU after each conv -> 64x7x7.
* ``"resnet"``: three groups of three inverted-residual blocks (32/64/64 channels, expansion 2,
  batch norm after every conv of the residual branch), strides 3/2/2: 84 -> 28 -> 14 -> 7.
* ``"resnet_l"``: five blocks per group, 48/96/96 channels, expansion 4 -> 96x7x7 (~5x params).

Two for MinAtar's 10x10 grids (`MinAtarCNN`; input channels = the spec's ``channels x frames``):

* ``"minatar"``: the MinAtar paper's network (Young & Tian 2019): one 16-channel 3x3 conv,
  stride 1, no padding, ReLU -> 16x8x8 (its fully connected layer is the heads' job here).
* ``"minatar_l"``: a 32-channel 3x3 conv (padding 1) then a 64-channel 3x3 conv -> 64x8x8.

Latents are renormalized per sample to [0, 1] (:func:`renormalize`) before any head sees them;
that happens in :class:`sgi_lab.nets.SGIModel`, not in the encoders.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sgi_lab.nets.agent_axis import Conv2d, ReLU, lean, lean_kernels, norm_input, under_vmap

PIXEL_SCALE = 1.0 / 255.0


def renormalize(x: torch.Tensor, start_dim: int = -3, eps: float = 1e-6) -> torch.Tensor:
    """Per-sample min-max renormalization to [0, 1], as SPR/SGI do to every latent.

    Args:
        x: (..., C, H, W) latents (or (..., D) vectors with ``start_dim=-1``).
        start_dim: first dimension of one sample; min and max are taken over it and all after.
        eps: floor on (max - min), so a constant latent maps to zeros instead of NaN (the
            reference divides by (max - min) unguarded).

    Returns:
        Tensor of the same shape with per-sample minimum 0 and maximum 1.

    Within `closed_form_gradients` the gradient is `_Renormalize`'s closed form: 11 operators
    where autograd's chain through amin, amax, two subtractions, the clamp and the division
    dispatches 24 (under vmap, per call, and there are 8 calls in a finetuning update).
    """
    if start_dim < 0:
        start_dim += x.dim()
    flat = x.flatten(start_dim)
    if lean():
        y = _Renormalize.apply(flat, eps)[0]
        return y if flat is x else y.view(x.shape)
    lo = flat.amin(dim=-1, keepdim=True)
    hi = flat.amax(dim=-1, keepdim=True)
    flat = (flat - lo) / (hi - lo).clamp_min(eps)
    return flat.view(x.shape)


closed_form_gradients = lean_kernels
"""`sgi_lab.nets.agent_axis.lean_kernels` by the name the update enters it with: within it,
`renormalize` builds its gradient in closed form (`_Renormalize`), for devices that launch a
kernel per operator (a population's update under vmap, `sgi_lab.train.update.lean_kernels`).
Alone, on a CPU under vmap, the autograd Function's Python cost more than the operators it saved
(MinAtar, 16 agents: +3 % a learn step); with the rest of the lean kernels the whole step is
cheaper there too (`sgi_lab.nets.agent_axis`)."""


class _Renormalize(torch.autograd.Function):
    """y = (x - min x) / max(max x - min x, eps) over the last axis, with its gradient in
    closed form. With g the output gradient, s = max(span, eps), gy = g / s, and c = 1 where the
    span is not clamped (else 0)::

        dL/dx = gy + e_argmin (c sum(g y / s) - sum(gy)) - e_argmax c sum(g y / s)

    The minimum's and maximum's gradient goes to one element each (the first of the ties), where
    amin / amax split it evenly between ties: the same in every case that matters. Ties at the
    minimum of a ReLU'd latent sit at 0, where the ReLU's backward drops the gradient either way,
    and equal values elsewhere come from equal receptive fields, whose weight gradients are the
    same whichever of them receives it (`tests/nets/test_nets.py` checks both against autograd).
    """

    @staticmethod
    def vmap(info: Any, in_dims: tuple, flat: torch.Tensor, eps: float) -> tuple:
        """Every agent at once: the formula reduces over the last axis whatever the leading
        ones, so the Function itself runs on the unwrapped tensor (forward and backward without
        vmap's wrappers, where a generated rule re-batches each operator of the backward)."""
        dim = in_dims[0]
        if dim == flat.dim() - 1:  # the agents last: they are not what the formula reduces
            flat, dim = flat.movedim(dim, 0), 0
        return _Renormalize.apply(flat, eps), (dim,) * 5

    @staticmethod
    def forward(flat: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
        lo, lo_index = flat.min(-1, keepdim=True)
        hi, hi_index = flat.max(-1, keepdim=True)
        span = hi - lo
        scale = span.clamp_min(eps)
        return (flat - lo) / scale, scale, span, lo_index, hi_index

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        y, scale, span, lo_index, hi_index = output
        ctx.eps = inputs[1]
        ctx.set_materialize_grads(False)  # no zero-filled gradients for the other outputs
        ctx.mark_non_differentiable(scale, span, lo_index, hi_index)
        ctx.save_for_backward(y, scale, span, lo_index, hi_index)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple[torch.Tensor, None]:
        y, scale, span, lo_index, hi_index = ctx.saved_tensors
        gy = grad / scale
        total = gy.sum(-1, keepdim=True)
        # g (y / s), not gy * y: rounded as autograd's chain rounds it (div's backward), so
        # that the two agree to the bit and a later near-tie at the maximum resolves alike
        moment = (grad * (y / scale)).sum(-1, keepdim=True) * (span >= ctx.eps)  # 0: clamped
        out = gy.scatter_add(-1, lo_index, moment - total)
        return out.scatter_add(-1, hi_index, -moment), None


_HALF = (torch.bfloat16, torch.float16)


def prepare_pixels(
    x: torch.Tensor,
    factor: torch.Tensor | None = None,
    channels_last: bool = False,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Pixels in [0, 255] -> the first conv's input ``x * factor / 255``, in its dtype and layout.

    The scaling by 1/255 and an optional per-stack factor (the intensity jitter of
    `sgi_lab.augment.ops`) are one multiply; the comments below say where each route rounds and
    where it changes the layout (a direct NCHW -> channels-last write of 4-channel frames in a
    wider dtype is several times slower than either).

    Args:
        x: (N, C, H, W) pixels, uint8 or float.
        factor: (N, 1, 1, 1) per-stack multipliers, or None.
        channels_last: return a channels-last tensor.
        dtype: result dtype; default: the autocast dtype under autocast, else float32 (under
            autocast the result then equals autocast's own cast of ``x.float() / 255``).

    Returns:
        A tensor for an encoder called with ``prepared=True``.
    """
    if dtype is None:
        dtype = torch.float32
        if torch.is_autocast_enabled(x.device.type):
            dtype = torch.get_autocast_dtype(x.device.type)
    if factor is not None and dtype in _HALF and not x.is_floating_point():
        # Training batches: a cast (exact: every integer up to 256 is a bf16) and one multiply
        # in bf16, a third of the memory traffic of the float32 route below; the factor's own
        # rounding (relative 2^-9) perturbs the random jitter a little, nothing else. The
        # layout change moves the uint8 pixels, half the bytes of the bf16 result (the cast
        # keeps the layout; the in-place multiply then runs on memory still in cache).
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x.to(dtype).mul_((factor * PIXEL_SCALE).to(dtype))
    # Otherwise a float32 copy, an in-place multiply and one rounding: the exact product, about
    # 2x faster than one mixed-dtype multiply into the result (which makes temporaries); the
    # layout change then moves the result.
    scale = PIXEL_SCALE if factor is None else factor * PIXEL_SCALE
    out = x.to(torch.float32, copy=True).mul_(scale)
    if dtype != torch.float32:
        out = out.to(dtype)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


def scale_pixels(x: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
    """Pixels in [0, 255] (uint8 or float) -> x / 255 (see :func:`prepare_pixels`)."""
    return prepare_pixels(x, channels_last=channels_last)


def _conv_out(size: int, kernel: int, stride: int, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class NatureCNN(nn.Module):
    """The DQN encoder of Mnih et al. (2015), without its fully connected layers.

    Args:
        in_channels: stacked frames (4).
        image_size: input height = width (84).
        channels: output channels of the three convs (32, 64, 64).
    """

    def __init__(
        self,
        in_channels: int = 4,
        image_size: int = 84,
        channels: tuple[int, int, int] = (32, 64, 64),
    ) -> None:
        super().__init__()
        c1, c2, c3 = channels
        self.layers = nn.Sequential(
            Conv2d(in_channels, c1, 8, stride=4),
            ReLU(inplace=True),
            Conv2d(c1, c2, 4, stride=2),
            ReLU(inplace=True),
            Conv2d(c2, c3, 3, stride=1),
            ReLU(inplace=True),
        )
        side = _conv_out(_conv_out(_conv_out(image_size, 8, 4), 4, 2), 3, 1)
        self.output_shape: tuple[int, int, int] = (c3, side, side)
        self.channels_last = False  # feed the first conv channels-last (set by SGIModel)

    def forward(self, x: torch.Tensor, prepared: bool = False) -> torch.Tensor:
        """(B, 4, H, W) pixels in [0, 255] -> (B, 64, 7, 7).

        ``prepared=True``: x is already :func:`prepare_pixels`'s output (scaled, in layout).
        """
        return self.layers(x if prepared else scale_pixels(x, self.channels_last))


class InvertedResidual(nn.Module):
    """MobileNetV2-style block: 1x1 expand -> 3x3 depthwise (strided) -> 1x1 project.

    Each conv is followed by batch norm (ReLU after the first two). The shortcut is the identity
    or, when the block downsamples, a learned ``stride x stride`` conv with stride ``stride``
    (no norm), as in the reference ``InvertedResidual``. The last BN's scale starts at zero so
    every block starts as its shortcut, and convs use the reference's fixup-style init
    (fan-out He normal scaled by ``num_layers ** -0.25``).

    Args:
        in_channels: input channels.
        out_channels: output channels.
        stride: 1, 2 or 3.
        expand_ratio: hidden channels = ``in_channels * expand_ratio``.
        num_layers: total blocks in the network (for the init scale).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stride: int,
        expand_ratio: int,
        num_layers: int = 1,
    ) -> None:
        super().__init__()
        hidden = round(in_channels * expand_ratio)
        # Convs feeding a batch norm carry no bias: the norm's shift makes it redundant.
        self.expand = nn.Conv2d(in_channels, hidden, 1, bias=False)
        self.expand_bn = nn.BatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(
            hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False
        )
        self.depthwise_bn = nn.BatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, out_channels, 1, bias=False)
        self.project_bn = nn.BatchNorm2d(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = nn.Conv2d(in_channels, out_channels, stride, stride=stride)
            _he_fan_out(self.shortcut.weight, 1.0)
        else:
            self.shortcut = nn.Identity()
        scale = num_layers**-0.25
        for conv in (self.expand, self.depthwise, self.project):
            _he_fan_out(conv.weight, scale)
        nn.init.zeros_(self.project_bn.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training and not torch.is_grad_enabled():
            return self._folded_forward(x)
        h = F.relu(_train_norm(self.expand_bn, self.expand(x)), inplace=True)
        h = F.relu(_train_norm(self.depthwise_bn, self._depthwise(h)), inplace=True)
        # In place: batch norm's backward needs its input, not its output.
        return self.project_bn(norm_input(self.project(h))).add_(self.shortcut(x))

    def _folded_forward(self, x: torch.Tensor) -> torch.Tensor:
        """Eval-mode forward without gradient, each batch norm folded into the conv before it.

        In eval mode a norm is a fixed per-channel affine map, so it becomes a scale on its
        conv's output channels and a bias: three convs instead of three convs and three norm
        passes over the activations (~2x faster on CPU). Same function as the eval-mode
        forward, up to rounding.
        """
        h = F.relu(_folded_conv(self.expand, self.expand_bn, x), inplace=True)
        h = F.relu(_folded_conv(self.depthwise, self.depthwise_bn, h), inplace=True)
        return _folded_conv(self.project, self.project_bn, h).add_(self.shortcut(x))

    def _depthwise(self, h: torch.Tensor) -> torch.Tensor:
        # oneDNN's bf16 backward of a *strided* depthwise conv is ~10x slower than its fp32 one
        # (measured 200 ms vs 21 ms at batch 256 on an AVX512-BF16 CPU), so under CPU autocast
        # that conv runs in fp32 whenever it needs a gradient. Gradient-free passes stay bf16.
        if (
            self.depthwise.stride != (1, 1)
            and h.device.type == "cpu"
            and torch.is_autocast_enabled("cpu")
            and torch.is_grad_enabled()
        ):
            with torch.autocast("cpu", enabled=False):
                return self.depthwise(h.float())
        return self.depthwise(h)


_WIDE = 64
"""Channels of a channels-last row at which the CPU batch norm kernels run at full speed."""


def _train_norm(bn: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    """``bn(x)`` in training mode, faster on a CPU for narrow channels-last activations.

    PyTorch's CPU batch norm walks a channels-last tensor one pixel (C values) at a time, which
    for the 8 hidden channels of the first ResNet block at 84x84 is several times slower than
    for 64 channels (measured for (32, 8, 84, 84) bf16: forward 3.5 ms, backward 7.2 ms). Such
    an activation is, in memory, a (pixels / k, k * C) matrix with k * C = 64. We take
    per-column statistics of that wide view, pool its k column groups (law of total variance)
    into the C channel means and variances, update the running statistics exactly as ``bn``
    would, and run the eval-mode kernel on the wide view with the tiled statistics: the same
    affine map as training mode, computed in float32 and rounded once. When a gradient is
    wanted, `_WideNorm` gives training mode's backward from the eval-mode backward kernel on the
    same view plus a per-channel correction.

    Anything else is ``bn(x)``: other devices, eval mode, more than 8 channels (no faster:
    9.0 ms vs 8.4 ms at 16), other layouts, a norm without affine parameters.
    """
    n, c, h, w = x.shape
    k = _WIDE // c
    if (
        x.device.type != "cpu"
        or under_vmap(x)
        or not bn.training
        or bn.weight is None
        or c * 8 > _WIDE
        or _WIDE % c
        or (n * h * w) % k
        or not x.is_contiguous(memory_format=torch.channels_last)
    ):
        return bn(norm_input(x))
    wide = _wide(x, k)
    with torch.no_grad():
        # float32 scratch buffers make the kernel return float32 statistics (it would round
        # them to x's dtype otherwise); momentum 0 leaves them as they are.
        scratch = torch.zeros(k * c, device=x.device), torch.ones(k * c, device=x.device)
        col_mean, col_var = torch.batch_norm_update_stats(wide, *scratch, 0.0)
        col_mean, col_var = col_mean.view(k, c), col_var.view(k, c)
        mean = col_mean.mean(0)
        var = (col_var + (col_mean - mean).square_()).mean(0)  # biased, as the norm uses
        if bn.track_running_stats and bn.running_mean is not None:
            bn.num_batches_tracked.add_(1)
            factor = bn.momentum
            if factor is None:  # cumulative moving average
                factor = 1.0 / float(bn.num_batches_tracked)
            count = n * h * w
            bn.running_mean.lerp_(mean, factor)
            bn.running_var.lerp_(var * (count / max(count - 1, 1)), factor)
    if torch.is_grad_enabled() and (x.requires_grad or bn.weight.requires_grad):
        return _WideNorm.apply(x, mean, var, bn.weight, bn.bias, bn.eps)
    return _wide_eval_norm(x, k, mean, var, bn.weight, bn.bias, bn.eps)


def _wide(x: torch.Tensor, k: int) -> torch.Tensor:
    """A channels-last (N, C, H, W) tensor as the (pixels / k, k * C) matrix it is in memory."""
    return x.permute(0, 2, 3, 1).reshape(-1, k * x.shape[1])


def _wide_eval_norm(
    x: torch.Tensor,
    k: int,
    mean: torch.Tensor,
    var: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """Eval-mode batch norm of channels-last ``x`` with per-channel (C,) statistics and affine
    parameters, run on its wide view; the result is a new channels-last tensor (not a view, so
    an in-place ReLU after it needs no autograd bookkeeping)."""
    out = torch.empty_like(x, memory_format=torch.channels_last)
    unused = x.new_empty(0, dtype=torch.float32), x.new_empty(0, dtype=torch.float32)
    tiled = [t.detach().repeat(k) for t in (weight, bias, mean, var)]
    torch.ops.aten.native_batch_norm.out(
        _wide(x, k), *tiled, False, 0.0, eps,
        out=_wide(out, k), save_mean=unused[0], save_invstd=unused[1],
    )  # fmt: skip
    return out


class _WideNorm(torch.autograd.Function):
    """Training-mode batch norm of channels-last (N, C, H, W) activations through their wide
    view, given the pooled batch statistics (see `_train_norm`).

    Backward: with M values per channel, xhat = (x - mean) * invstd and the per-channel sums
    gb = sum(g) and gw = sum(g * xhat), training mode's input gradient is

        w * invstd * (g - gb / M - xhat * gw / M)  =  [w * invstd * g]  +  [xhat * s * gw + s * gb]

    with s = -w * invstd / M. The eval-mode backward kernel on the wide view gives the first
    bracket and the per-column sums that pool into gb and gw; the eval-mode forward kernel with
    weight s * gw and bias s * gb gives the second (x - mean in float32, rounded once). Both run
    at full speed on the wide view, in x's dtype (a float32 correction mixed into bf16 tensors
    was 20x slower).
    """

    @staticmethod
    def forward(ctx, x, mean, var, weight, bias, eps):  # noqa: D102
        k = _WIDE // x.shape[1]
        ctx.save_for_backward(x, mean, var, weight)
        ctx.eps, ctx.k = eps, k
        return _wide_eval_norm(x, k, mean, var, weight, bias, eps)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # noqa: D102
        x, mean, var, weight = ctx.saved_tensors
        k, c = ctx.k, x.shape[1]
        grad = grad.contiguous(memory_format=torch.channels_last)
        tiled = [t.repeat(k) for t in (weight, mean, var)]
        g_eval, col_gw, col_gb = torch.ops.aten.native_batch_norm_backward(
            _wide(grad, k), _wide(x, k), *tiled, None, None, False, ctx.eps, [True, True, True]
        )
        gw, gb = col_gw.view(k, c).sum(0), col_gb.view(k, c).sum(0)
        grad_x = None
        if ctx.needs_input_grad[0]:
            s = weight * torch.rsqrt(var + ctx.eps) / -(x.numel() // c)
            correction = _wide_eval_norm(x, k, mean, var, s * gw, s * gb, ctx.eps)
            grad_x = correction.add_(g_eval.view(x.shape[0], *x.shape[2:], c).permute(0, 3, 1, 2))
        return grad_x, None, None, gw, gb, None


def _folded_conv(conv: nn.Conv2d, bn: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    """bn(conv(x)) for a bias-free conv and an eval-mode batch norm, as one conv."""
    scale = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
    weight = conv.weight * scale.view(-1, 1, 1, 1)
    bias = bn.bias - bn.running_mean * scale
    return F.conv2d(x, weight, bias, conv.stride, conv.padding, conv.dilation, conv.groups)


def _he_fan_out(weight: torch.Tensor, scale: float) -> None:
    fan_out = weight.shape[0] * math.prod(weight.shape[2:])
    nn.init.normal_(weight, 0.0, math.sqrt(2.0 / fan_out) * scale)


class ResNetEncoder(nn.Module):
    """Groups of inverted-residual blocks; the first block of each group downsamples.

    Args:
        in_channels: stacked frames (4).
        channels: output channels per group.
        strides: downsampling factor per group (3, 2, 2 turns 84 into 7).
        blocks_per_group: blocks in each group.
        expand_ratio: inverted-residual expansion.
        image_size: input height = width (84).
    """

    def __init__(
        self,
        in_channels: int = 4,
        channels: tuple[int, ...] = (32, 64, 64),
        strides: tuple[int, ...] = (3, 2, 2),
        blocks_per_group: int = 3,
        expand_ratio: int = 2,
        image_size: int = 84,
    ) -> None:
        super().__init__()
        num_layers = blocks_per_group * len(channels)
        groups = []
        side, c_in = image_size, in_channels
        for c_out, stride in zip(channels, strides, strict=True):
            blocks = [InvertedResidual(c_in, c_out, stride, expand_ratio, num_layers)]
            blocks += [
                InvertedResidual(c_out, c_out, 1, expand_ratio, num_layers)
                for _ in range(blocks_per_group - 1)
            ]
            groups.append(nn.Sequential(*blocks))
            main, short = _conv_out(side, 3, stride, 1), _conv_out(side, stride, stride)
            if main != short:
                raise ValueError(f"image size {side} does not divide evenly by stride {stride}")
            side, c_in = main, c_out
        self.layers = nn.Sequential(*groups)
        self.output_shape: tuple[int, int, int] = (c_in, side, side)
        self.channels_last = False  # feed the first conv channels-last (set by SGIModel)

    def forward(self, x: torch.Tensor, prepared: bool = False) -> torch.Tensor:
        """(B, 4, H, W) pixels in [0, 255] -> (B, C, 7, 7).

        ``prepared=True``: x is already :func:`prepare_pixels`'s output (scaled, in layout).
        """
        return self.layers(x if prepared else scale_pixels(x, self.channels_last))


class MinAtarCNN(nn.Module):
    """MinAtar's encoder: 3x3 stride-1 convs with ReLU, each but the last padded by 1, so a
    10x10 grid comes out 8x8 whatever the depth.

    Args:
        in_channels: the spec's ``channels x frames`` (4 to 10 for one MinAtar frame).
        image_size: grid height = width (10).
        channels: output channels of each conv ((16,): the MinAtar paper's network).
    """

    def __init__(
        self, in_channels: int = 4, image_size: int = 10, channels: tuple[int, ...] = (16,)
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        for i, c_out in enumerate(channels):
            padding = 0 if i == len(channels) - 1 else 1
            layers += [Conv2d(c_in, c_out, 3, stride=1, padding=padding), ReLU(inplace=True)]
            c_in = c_out
        self.layers = nn.Sequential(*layers)
        side = _conv_out(image_size, 3, 1)
        self.output_shape: tuple[int, int, int] = (c_in, side, side)
        self.channels_last = False  # feed the first conv channels-last (set by SGIModel)

    def forward(self, x: torch.Tensor, prepared: bool = False) -> torch.Tensor:
        """(B, C_in, 10, 10) cells in [0, 255] (MinAtar's 0/255) -> (B, C, 8, 8).

        ``prepared=True``: x is already :func:`prepare_pixels`'s output (scaled, in layout).
        """
        return self.layers(x if prepared else scale_pixels(x, self.channels_last))


ENCODERS = ("nature", "resnet", "resnet_l", "minatar", "minatar_l")


def make_encoder(
    name: str, in_channels: int = 4, image_size: int = 84, width_scale: float = 1.0
) -> nn.Module:
    """Build an encoder by name; its ``output_shape`` attribute is (C, H', W'), what the heads,
    the transition model and the FiLM generator are sized from.

    Args:
        name: Atari's ``"nature"`` (64x7x7), ``"resnet"`` (64x7x7) or ``"resnet_l"``
            (96x7x7) at 84x84; MinAtar's ``"minatar"`` (16x8x8) or ``"minatar_l"`` (64x8x8)
            at 10x10.
        in_channels: the observation's channels (`sgi_lab.envs.spec.ObservationSpec.
            input_channels`: 4 stacked frames for Atari).
        image_size: input height = width.
        width_scale: channel multiplier (``int(c * width_scale)``, the reference's
            ``cnn_scale_factor``); 1 for the paper's networks. The reference fixtures use
            narrower networks (tests/fixtures/reference).
    """

    def widths(*channels: int) -> tuple[int, ...]:
        return tuple(int(c * width_scale) for c in channels)

    if name == "nature":
        return NatureCNN(in_channels, image_size, widths(32, 64, 64))
    if name == "resnet":
        return ResNetEncoder(in_channels, widths(32, 64, 64), (3, 2, 2), 3, 2, image_size)
    if name == "resnet_l":
        return ResNetEncoder(in_channels, widths(48, 96, 96), (3, 2, 2), 5, 4, image_size)
    if name == "minatar":
        return MinAtarCNN(in_channels, image_size, widths(16))
    if name == "minatar_l":
        return MinAtarCNN(in_channels, image_size, widths(32, 64))
    raise ValueError(f"unknown encoder {name!r}; choose one of {', '.join(ENCODERS)}")
