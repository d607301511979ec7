"""Noisy linear layer with factorised Gaussian noise (Fortunato et al., 2018)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sgi_lab.nets.agent_axis import agent_axis_here, noisy_linear


def _signed_sqrt(x: torch.Tensor) -> torch.Tensor:
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b, eps_w = f(eps_out) f(eps_in)^T.

    Initialisation follows the SPR/SGI reference (``src/networks.py``): mu ~ U(+-1/sqrt(in)),
    sigma_w = std_init / sqrt(in), sigma_b = std_init / sqrt(out).

    Noise is used only while ``noise_enabled`` is True; pretraining switches it off (the paper
    uses no noisy-net noise there). With noise off the layer is a plain ``F.linear`` over the
    means and the sigmas get no gradient. The noise samples are non-persistent buffers: they
    follow ``.to(device)`` but are neither checkpointed nor averaged into EMA targets, so a
    target network draws its own noise.

    Args:
        in_features: input size.
        out_features: output size.
        std_init: sigma_0 (0.5 in SPR/SGI finetuning).
        noise_enabled: initial noise switch.
    """

    FACTORISED_MAX_ROWS = {"cpu": 64, "other": 8}
    """Inputs of at most this many rows use the factorised forward (the same function), per
    device type. On a CPU it wins up to well past the finetuning batch of 32: building the
    noisy weight is an elementwise pass over mu, sigma and eps_out eps_in^T, plus a rounding to
    bf16 under autocast and, in backward, the sigma gradient as another full-size product; the
    factorised form only adds thin matmuls. Other devices keep it to acting-size inputs."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        std_init: float = 0.5,
        noise_enabled: bool = True,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.std_init = std_init
        self.noise_enabled = noise_enabled
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        """Re-draw the means and reset the sigmas to their initial value."""
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight_mu, -bound, bound)
        nn.init.uniform_(self.bias_mu, -bound, bound)
        self.reset_noise_parameters()

    @torch.no_grad()
    def reset_noise_parameters(self) -> None:
        """Reset sigma to std_init-based values (the reference does this after loading weights)."""
        self.weight_sigma.fill_(self.std_init / math.sqrt(self.in_features))
        self.bias_sigma.fill_(self.std_init / math.sqrt(self.out_features))

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new factorised noise (on the layer's device; the generator must live there)."""
        device = self.weight_mu.device
        self.eps_in.copy_(
            _signed_sqrt(torch.randn(self.in_features, generator=generator, device=device))
        )
        self.eps_out.copy_(
            _signed_sqrt(torch.randn(self.out_features, generator=generator, device=device))
        )

    def forward(self, x: torch.Tensor, noise: bool | None = None) -> torch.Tensor:
        """Apply the layer; ``noise`` overrides ``noise_enabled`` for this call."""
        use_noise = self.noise_enabled if noise is None else noise
        if agent_axis_here(x, self.weight_mu):  # a GPU population's update: fewer operators
            noisy = (self.weight_sigma, self.bias_sigma, self.eps_in, self.eps_out)
            return noisy_linear(x, self.weight_mu, self.bias_mu, noisy if use_noise else None)
        if not use_noise:
            return F.linear(x, self.weight_mu, self.bias_mu)
        bias = torch.addcmul(self.bias_mu, self.bias_sigma, self.eps_out)
        limit = self.FACTORISED_MAX_ROWS["cpu" if x.device.type == "cpu" else "other"]
        if x.numel() <= limit * self.in_features:
            # Few rows: (sigma * eps_out eps_in^T) x = eps_out * (sigma (eps_in * x)), two thin
            # matmuls instead of building the (out, in) noisy weight (~3x faster at batch 1).
            # Large batches amortize the build.
            noise = F.linear(x * self.eps_in, self.weight_sigma)
            return torch.addcmul(F.linear(x, self.weight_mu, bias), noise, self.eps_out)
        weight = torch.addcmul(
            self.weight_mu, self.weight_sigma, torch.outer(self.eps_out, self.eps_in)
        )
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"std_init={self.std_init}, noise_enabled={self.noise_enabled}"
        )
