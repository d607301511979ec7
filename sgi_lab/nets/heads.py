"""Heads over renormalized latents: distributional dueling Q head, FiLM goal conditioning,
inverse-dynamics model and ATC's contrast head.

Shapes: latents z are (B, C, 7, 7) and enter the heads flattened to (B, D), D = C * 49.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from sgi_lab.nets.agent_axis import Conv2d, Linear, ReLU
from sgi_lab.nets.noisy import NoisyLinear

DUELING_GRAD_SCALE = 2**-0.5


class _ScaleGradient(torch.autograd.Function):
    generate_vmap_rule = True  # a population's batched update runs the heads under vmap

    @staticmethod
    def forward(x: torch.Tensor, scale: float) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


def scale_gradient(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Identity forward; multiplies the gradient flowing back through this use of x by scale.

    Applied whenever gradients are enabled: inside ``torch.func.vmap`` a tensor that carries a
    gradient reports ``requires_grad=False``, so that flag cannot decide.
    """
    if scale == 1.0 or not torch.is_grad_enabled():
        return x
    return _ScaleGradient.apply(x, scale)


INVALID_ACTION_LOGIT = -1.0e4
"""Logit of every atom but the lowest for an action a game does not have (see `dueling_combine`)."""


def dueling_combine(
    value: torch.Tensor, advantage: torch.Tensor, action_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-atom dueling: (B, 1, Z) value and (B, A, Z) advantage -> (B, A, Z) logits.

    ``action_mask`` (A,) or (B, A) bool marks the actions the game has, when a network is wider
    than its game (agents of a population share the widest action set). The advantage mean then
    runs over the game's actions only, and every other action gets a distribution with all its
    mass on the lowest atom: its expected value is v_min, so no argmax (acting, double Q) picks
    it over a real action (ties go to the lower index, and real actions come first), and its
    parameters get no gradient. With the mask all True the logits equal the unmasked ones.
    """
    if action_mask is None:
        return value + advantage - advantage.mean(dim=1, keepdim=True)
    mask = action_mask.view(*action_mask.shape[:-1], -1, 1)  # (..., A, 1)
    # The mask as 0/1 numbers (advantage x 1 is advantage, x 0 is 0: the masked sum's bits),
    # and the invalid actions' logits a constant: 8 operators where masked_fill and a freshly
    # filled row took 11.
    kept = mask.to(advantage.dtype)
    mean = (advantage * kept).sum(dim=1, keepdim=True) / kept.sum(dim=-2, keepdim=True)
    logits = value + advantage - mean
    return torch.where(mask, logits, _invalid_logits(logits.shape[-1], logits.dtype, logits.device))


_INVALID: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def _invalid_logits(atoms: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(Z,) logits of an action a game does not have: 0 on the lowest atom, `INVALID_ACTION_LOGIT`
    on the others; made once per shape, dtype and device (never written to)."""
    key = (atoms, dtype, device)
    if key not in _INVALID:
        with torch.inference_mode(False), torch.no_grad():  # an ordinary tensor, whoever asks first
            row = torch.full((atoms,), INVALID_ACTION_LOGIT, dtype=dtype, device=device)
            row[0] = 0.0
        _INVALID[key] = row
    return _INVALID[key]


def film_layer_norm(
    h: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """Layer norm whose per-channel affine parameters are given (FiLM): gamma * LN(h) + beta.

    Args:
        h: (B, H) features.
        gamma: (B, H) or (H,) scales.
        beta: (B, H) or (H,) shifts.
        eps: layer-norm epsilon.
    """
    return torch.addcmul(beta, gamma, F.layer_norm(h, h.shape[-1:], eps=eps))


def dueling_hidden(
    advantage_hidden: NoisyLinear, value_hidden: NoisyLinear, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A dueling head's first layers on (B, D) latents: ReLU'd (B, hidden) features of each
    stream; the gradient into x is scaled by 1/sqrt(2), as the two streams share it (SPR)."""
    x = scale_gradient(x, DUELING_GRAD_SCALE)
    return F.relu(advantage_hidden(x)), F.relu(value_hidden(x))


class DuelingHiddenLayers(nn.Module):
    """A second copy of a dueling head's first layers (advantage and value streams, D -> hidden
    each, noisy), with the same names below its prefix.

    The authors' finetuning with goal RL keeps one copy for the RL head and one for the goal
    head, which is also SPR's projection (docs/paper_vs_code.md row 40); `SGIModel` builds this
    as ``rl_hidden`` for that and passes it to `DistributionalDuelingHead.forward`.

    Args:
        in_features: D = C * 7 * 7.
        hidden_size: units per stream.
        std_init: noisy-net sigma_0.
        noise_enabled: initial noise switch of both layers.
    """

    def __init__(
        self, in_features: int, hidden_size: int, std_init: float = 0.5, noise_enabled: bool = True
    ) -> None:
        super().__init__()
        self.advantage_hidden = NoisyLinear(in_features, hidden_size, std_init, noise_enabled)
        self.value_hidden = NoisyLinear(in_features, hidden_size, std_init, noise_enabled)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, D) -> ReLU'd (B, hidden) features of each stream (`dueling_hidden`)."""
        return dueling_hidden(self.advantage_hidden, self.value_hidden, x)


class DistributionalDuelingHead(nn.Module):
    """C51 dueling head with noisy layers; its first layers are SPR's projection p.

    Advantage and value streams each have a hidden layer (D -> hidden) and an output layer.
    The two hidden layers, concatenated and without activation or noise, are the projection
    p(z) of SPR (``projection: q_l1``, ``q_l1_type: [value, advantage]`` in the reference),
    which is how pretrained SPR/ATC projections end up as the first layer of the DQN head.

    Args:
        in_features: D = C * 7 * 7.
        num_actions: A.
        hidden_size: units per stream (512 in SGI, 256 in SPR).
        num_atoms: Z (51).
        std_init: noisy-net sigma_0.
        noise_enabled: initial noise switch of every noisy layer.
        outputs: build the (unconditioned) Q output layers; pretraining without RL or BC has
            no use for them and leaves them out, so finetuning starts them fresh.
    """

    def __init__(
        self,
        in_features: int,
        num_actions: int,
        hidden_size: int = 512,
        num_atoms: int = 51,
        std_init: float = 0.5,
        noise_enabled: bool = True,
        outputs: bool = True,
    ) -> None:
        super().__init__()
        self.num_actions = num_actions
        self.num_atoms = num_atoms
        self.hidden_size = hidden_size
        self.advantage_hidden = NoisyLinear(in_features, hidden_size, std_init, noise_enabled)
        self.value_hidden = NoisyLinear(in_features, hidden_size, std_init, noise_enabled)
        self.has_outputs = outputs
        if outputs:
            self.advantage_out = NoisyLinear(
                hidden_size, num_actions * num_atoms, std_init, noise_enabled
            )
            self.value_out = NoisyLinear(hidden_size, num_atoms, std_init, noise_enabled)

    @property
    def projection_size(self) -> int:
        return 2 * self.hidden_size

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """SPR projection p: (..., D) -> (..., 2 * hidden), noise-free, no activation."""
        return torch.cat(
            [self.advantage_hidden(x, noise=False), self.value_hidden(x, noise=False)], dim=-1
        )

    def hidden(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ReLU'd hidden features of both streams, (B, hidden) each; input gradient x 1/sqrt(2)."""
        return dueling_hidden(self.advantage_hidden, self.value_hidden, x)

    def forward(
        self,
        x: torch.Tensor,
        action_mask: torch.Tensor | None = None,
        hidden: DuelingHiddenLayers | None = None,
    ) -> torch.Tensor:
        """(B, D) flat latents -> (B, A, Z) atom logits (``action_mask``: `dueling_combine`).

        ``hidden``: first layers to read in place of this head's own (a second copy,
        `DuelingHiddenLayers`); the output layers are this head's either way.
        """
        if not self.has_outputs:
            raise RuntimeError("this head was built without output layers (outputs=False)")
        adv_h, val_h = self.hidden(x) if hidden is None else hidden(x)
        advantage = self.advantage_out(adv_h).view(-1, self.num_actions, self.num_atoms)
        value = self.value_out(val_h).view(-1, 1, self.num_atoms)
        return dueling_combine(value, advantage, action_mask)


FiLMStyle = Literal["text", "reference"]
"""How goals condition the Q head (docs/paper_vs_code.md): ``"text"``, a layer norm after the
head's hidden layer whose affine parameters FiLM gives, gamma = 1 + output; ``"reference"``, the
authors' code (``ln_for_rl_head: false``): no layer norm, gamma the raw output, and the value
stream conditioned on the already conditioned *advantage* features (their
``value_hidden = advantage_hidden * value_scales + value_biases``)."""


def _film_gamma_offset(style: str) -> float:
    if style not in ("text", "reference"):
        raise ValueError(f"FiLM style must be 'text' or 'reference', got {style!r}")
    return 1.0 if style == "text" else 0.0


class FiLMGenerator(nn.Module):
    """Goal -> per-channel FiLM parameters for both streams of the Q head.

    The goal (B, D) is viewed as a (C, 7, 7) map; two 3x3 convs with 2C channels (128 for
    C = 64, as the paper and reference) and ReLU, flatten, linear -> 2 streams x (gamma, beta).
    The linear predicts delta-gamma and gamma = 1 + delta-gamma (the FiLM paper's advice), so the
    goal-conditioned layer norm starts close to a plain one; the reference instead uses the raw
    output as the scale.

    Args:
        latent_shape: (C, H, W) of goals.
        hidden_size: Q-head hidden units per stream.
        channels: conv channels (default 2C).
        style: ``"text"``: gamma = 1 + the linear's output; ``"reference"``: gamma is the raw
            output, as the authors' ``GoalConditionedDuelingHead`` (see `GoalHeadOutputs`).
    """

    def __init__(
        self,
        latent_shape: tuple[int, int, int],
        hidden_size: int = 512,
        channels: int | None = None,
        style: FiLMStyle = "text",
    ) -> None:
        super().__init__()
        c, h, w = latent_shape
        channels = channels or 2 * c
        self.latent_shape = latent_shape
        self.hidden_size = hidden_size
        self.gamma_offset = _film_gamma_offset(style)
        self.layers = nn.Sequential(
            Conv2d(c, channels, 3, padding=1),
            ReLU(inplace=True),
            Conv2d(channels, channels, 3, padding=1),
            ReLU(inplace=True),
            nn.Flatten(1),
            Linear(channels * h * w, 4 * hidden_size),
        )

    def forward(self, goal: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(B, D) goals -> gamma_adv, beta_adv, gamma_val, beta_val, each (B, hidden)."""
        out = self.layers(goal.reshape(-1, *self.latent_shape))
        d_gamma_a, beta_a, d_gamma_v, beta_v = out.chunk(4, dim=-1)
        return self.gamma_offset + d_gamma_a, beta_a, self.gamma_offset + d_gamma_v, beta_v


class GoalHeadOutputs(nn.Module):
    """Output layers of the goal-conditioned Q head (shares its hidden layers with ``head``).

    Args:
        hidden_size: Q-head hidden units per stream.
        num_actions: A.
        num_atoms: Z.
        std_init: noisy-net sigma_0.
        noise_enabled: initial noise switch.
        style: `FiLMStyle`.
    """

    def __init__(
        self,
        hidden_size: int,
        num_actions: int,
        num_atoms: int = 51,
        std_init: float = 0.5,
        noise_enabled: bool = True,
        style: FiLMStyle = "text",
    ) -> None:
        super().__init__()
        _film_gamma_offset(style)
        self.style = style
        self.num_actions = num_actions
        self.num_atoms = num_atoms
        self.advantage_out = NoisyLinear(
            hidden_size, num_actions * num_atoms, std_init, noise_enabled
        )
        self.value_out = NoisyLinear(hidden_size, num_atoms, std_init, noise_enabled)

    def forward(
        self,
        adv_h: torch.Tensor,
        val_h: torch.Tensor,
        film: tuple[torch.Tensor, ...],
        action_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden features (B, hidden) x2 and FiLM params -> (B, A, Z) atom logits
        (``action_mask``: `dueling_combine`)."""
        gamma_a, beta_a, gamma_v, beta_v = film
        if self.style == "reference":
            adv_h = torch.addcmul(beta_a, gamma_a, adv_h)
            val_h = torch.addcmul(beta_v, gamma_v, adv_h)  # sic: the advantage features
        else:
            adv_h = film_layer_norm(adv_h, gamma_a, beta_a)
            val_h = film_layer_norm(val_h, gamma_v, beta_v)
        advantage = self.advantage_out(adv_h).view(-1, self.num_actions, self.num_atoms)
        value = self.value_out(val_h).view(-1, 1, self.num_atoms)
        return dueling_combine(value, advantage, action_mask)


class InverseModel(nn.Module):
    """Two-layer MLP on concat(y_hat_k, y_tilde_{k+1}) -> action logits (reference layout).

    Args:
        projection_size: size of one projected latent.
        num_actions: A.
        hidden_size: 256 in the reference.
    """

    def __init__(self, projection_size: int, num_actions: int, hidden_size: int = 256) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            Linear(2 * projection_size, hidden_size),
            ReLU(inplace=True),
            Linear(hidden_size, num_actions),
        )

    def forward(self, y: torch.Tensor, y_next: torch.Tensor) -> torch.Tensor:
        """(..., P) online projection and (..., P) target projection -> (..., A) logits."""
        return self.layers(torch.cat([y, y_next], dim=-1))


class ATCContrast(nn.Module):
    """ATC's ``ContrastModel``: residual anchor MLP, then a bilinear matrix W.

    ``forward(anchor)`` returns W(anchor + mlp(anchor)); logits against positives are
    ``pred @ positive.T`` (see :func:`sgi_lab.objectives.atc.atc_loss`).

    Args:
        latent_size: size of the projected anchors/positives.
        hidden_size: anchor MLP hidden units (512 in ATC).
    """

    def __init__(self, latent_size: int, hidden_size: int = 512) -> None:
        super().__init__()
        self.anchor_mlp = nn.Sequential(
            Linear(latent_size, hidden_size),
            ReLU(inplace=True),
            Linear(hidden_size, latent_size),
        )
        self.W = nn.Linear(latent_size, latent_size, bias=False)

    def forward(self, anchor: torch.Tensor) -> torch.Tensor:
        """(N, P) projected anchors -> (N, P) predictions to contrast with positives."""
        return self.W(anchor + self.anchor_mlp(anchor))
