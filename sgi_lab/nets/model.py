"""SGIModel: encoder, transition model, Q head (whose first layer is SPR's projection),
predictor, and the optional goal-conditioned, inverse-dynamics and ATC heads, in one module.

Parameter names are stable (they do not depend on which optional parts exist), because
finetuning loads every tensor present in both the pretrained and the finetuning model by name:

=============================  ===========================================================
prefix                         what it is
=============================  ===========================================================
``encoder.``                   f_o, the convolutional encoder
``transition.``                h, SPR's latent transition model
``head.advantage_hidden.``     first Q-head layer, advantage stream } together: SPR's
``head.value_hidden.``         first Q-head layer, value stream     } projection p
``head.advantage_out.``        Q-head output layers (finetuning RL; BC logits); only with
``head.value_out.``            ``rl_head=True``
``predictor.``                 q, SPR's linear predictor
``film.``                      FiLM generator j (goal -> gamma, beta); ``goal_head=True``
``goal_head.``                 output layers of the goal-conditioned Q head; ``goal_head=True``
``inverse.``                   inverse-dynamics MLP; ``inverse_model=True``
``atc.``                       ATC's anchor MLP and contrast matrix W; ``atc_head=True``
``rl_hidden.``                 the RL head's own copy of ``head.*_hidden.`` (same names
                               below it), which ``q_logits`` then reads; ``rl_hidden=True``
=============================  ===========================================================

Noisy layers keep their means in ``*.weight_mu``/``*.bias_mu`` and their scales in
``*.weight_sigma``/``*.bias_sigma``; the noise samples are not checkpointed.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sgi_lab.nets.agent_axis import Linear
from sgi_lab.nets.encoders import make_encoder, renormalize
from sgi_lab.nets.heads import (
    INVALID_ACTION_LOGIT,
    ATCContrast,
    DistributionalDuelingHead,
    DuelingHiddenLayers,
    FiLMGenerator,
    FiLMStyle,
    GoalHeadOutputs,
    InverseModel,
)
from sgi_lab.nets.noisy import NoisyLinear
from sgi_lab.nets.transition import TransitionModel

PARAMETER_GROUPS: dict[str, tuple[str, ...]] = {
    "encoder": ("encoder.",),
    "transition": ("transition.",),
    # rl_hidden: the RL head's copy of the projection's layers (docs/paper_vs_code.md row 40),
    # trained as the reference's q_l1_lr group trains both copies
    "projection": ("head.advantage_hidden.", "head.value_hidden.", "rl_hidden."),
    "q_output": ("head.advantage_out.", "head.value_out."),
    "predictor": ("predictor.",),
    "goal": ("film.", "goal_head."),
    "inverse": ("inverse.",),
    "atc": ("atc.",),
}


def parameter_group(name: str) -> str:
    """Which part of SGIModel a parameter name belongs to (a key of PARAMETER_GROUPS)."""
    for group, prefixes in PARAMETER_GROUPS.items():
        if name.startswith(prefixes):
            return group
    raise KeyError(f"parameter {name!r} belongs to no known SGIModel part")


class SGIModel(nn.Module):
    """Everything SGI pretraining and Rainbow+SPR finetuning need, with stable names.

    Pixels in, per-sample renormalized latents z (B, C, 7, 7) out of :meth:`encode`; every
    other method takes latents. The target networks are EMA copies of this whole module
    (:func:`sgi_lab.nets.make_target`, :func:`sgi_lab.nets.ema_update`).

    Args:
        encoder: ``"nature"``, ``"resnet"`` or ``"resnet_l"``.
        num_actions: A.
        in_channels: stacked frames.
        image_size: input height = width.
        hidden_size: Q-head hidden units per stream (512 in SGI).
        num_atoms: C51 atoms Z.
        v_min: lowest atom.
        v_max: highest atom.
        noisy: noisy-net noise on in the Q heads (False in pretraining). Switch later with
            :meth:`set_noise`; the layers are noisy either way so names never change.
        noise_std: noisy-net sigma_0.
        rl_head: build the unconditioned Q output layers (finetuning, BC).
        goal_head: build the FiLM generator and goal-conditioned Q outputs (goal RL).
        inverse_model: build the inverse-dynamics model.
        atc_head: build ATC's contrast head.
        rl_hidden: give the unconditioned Q head a second copy of the first layers
            (``rl_hidden.``) that :meth:`q_logits` reads, while ``head.``'s stay SPR's
            projection and the goal head's layers: the authors' finetuning with goal RL
            (docs/paper_vs_code.md row 40; `FinetuneConfig.rl_head_hidden`). Needs ``rl_head``.
        goal_film: how goals condition the Q head, ``"text"`` or ``"reference"``
            (`sgi_lab.nets.heads.FiLMStyle`).
        width_scale: encoder channel multiplier (1 for the paper's networks; see
            `sgi_lab.nets.encoders.make_encoder`).
        channels_last: store conv weights and feed inputs channels-last (faster convs on
            recent CPUs and GPUs; results are the same).
    """

    def __init__(
        self,
        encoder: str = "resnet",
        num_actions: int = 18,
        *,
        in_channels: int = 4,
        image_size: int = 84,
        hidden_size: int = 512,
        num_atoms: int = 51,
        v_min: float = -10.0,
        v_max: float = 10.0,
        noisy: bool = True,
        noise_std: float = 0.5,
        rl_head: bool = True,
        goal_head: bool = False,
        inverse_model: bool = False,
        atc_head: bool = False,
        rl_hidden: bool = False,
        goal_film: FiLMStyle = "text",
        width_scale: float = 1.0,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        self.init_args = {
            "encoder": encoder,
            "num_actions": num_actions,
            "in_channels": in_channels,
            "image_size": image_size,
            "hidden_size": hidden_size,
            "num_atoms": num_atoms,
            "v_min": v_min,
            "v_max": v_max,
            "noisy": noisy,
            "noise_std": noise_std,
            "rl_head": rl_head,
            "goal_head": goal_head,
            "inverse_model": inverse_model,
            "atc_head": atc_head,
            "goal_film": goal_film,
            "width_scale": width_scale,
        }
        """The constructor's arguments (channels_last aside): ``SGIModel(**m.init_args)`` builds
        the same architecture."""
        if rl_hidden:  # only when set: every other model's recorded arguments stay as they were
            self.init_args["rl_hidden"] = True
        self.encoder_name = encoder
        self.num_actions = num_actions
        self.num_atoms = num_atoms
        self.encoder = make_encoder(encoder, in_channels, image_size, width_scale)
        self.latent_shape: tuple[int, int, int] = tuple(self.encoder.output_shape)
        self.latent_size = math.prod(self.latent_shape)
        self.transition = TransitionModel(self.latent_shape[0], num_actions)
        self.head = DistributionalDuelingHead(
            self.latent_size,
            num_actions,
            hidden_size,
            num_atoms,
            std_init=noise_std,
            noise_enabled=noisy,
            outputs=rl_head,
        )
        self.projection_size = self.head.projection_size
        self.predictor = Linear(self.projection_size, self.projection_size)
        self._build_optional_parts(self.init_args)
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms), persistent=False)
        self.channels_last = channels_last
        self.encoder.channels_last = channels_last
        if channels_last:
            self.to(memory_format=torch.channels_last)

    def _build_optional_parts(self, args: dict[str, Any]) -> None:
        """The goal head (FiLM generator and outputs), inverse model, ATC head and the RL head's
        copy of the first layers, as ``args`` (the constructor's) ask, in this order."""
        hidden, noisy = args["hidden_size"], {"std_init": args["noise_std"]}
        noisy["noise_enabled"] = args["noisy"]
        if args["goal_head"]:
            self.film = FiLMGenerator(self.latent_shape, hidden, style=args["goal_film"])
            self.goal_head = GoalHeadOutputs(
                hidden, self.num_actions, self.num_atoms, **noisy, style=args["goal_film"]
            )
        if args["inverse_model"]:
            self.inverse = InverseModel(self.projection_size, self.num_actions)
        if args["atc_head"]:
            self.atc = ATCContrast(self.projection_size)
        self.has_rl_hidden = bool(args.get("rl_hidden", False))
        if self.has_rl_hidden and not args["rl_head"]:
            raise ValueError("rl_hidden=True needs rl_head=True: the copy feeds the Q outputs")
        if self.has_rl_hidden:  # last: every other layer draws the initial weights it would
            self.rl_hidden = DuelingHiddenLayers(self.latent_size, hidden, **noisy)

    @property
    def encoder_has_batch_norm(self) -> bool:
        """Whether the encoder normalizes with batch statistics in training (the ResNets)."""
        return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.encoder.modules())

    # -- latents --------------------------------------------------------------------------------
    def encode(self, obs: torch.Tensor, prepared: bool = False) -> torch.Tensor:
        """Pixels (..., 4, 84, 84), uint8 or float in [0, 255] -> renormalized (..., C, 7, 7).

        ``prepared=True``: obs come from `sgi_lab.nets.encoders.prepare_pixels` (already
        scaled by 1/255, in the compute dtype and layout), as the training loops make them.
        """
        lead = obs.shape[:-3]
        z = renormalize(self.encoder(obs.reshape(-1, *obs.shape[-3:]), prepared=prepared))
        return z.reshape(*lead, *z.shape[1:])

    def rollout(self, z0: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """SPR's recursive predictions z_hat_{1..K} from z_hat_0 = z0.

        Args:
            z0: (B, C, 7, 7) online latent of s_t.
            actions: (B, K) int64 actions a_t..a_{t+K-1}.

        Returns:
            (B, K, C, 7, 7) predicted latents.
        """
        return self.transition.rollout(z0, actions)

    def project(self, z: torch.Tensor) -> torch.Tensor:
        """SPR projection p (first Q-head layers, noise-free): (..., C, 7, 7) -> (..., P)."""
        return self.head.project(z.flatten(-3))

    def predict(self, y: torch.Tensor) -> torch.Tensor:
        """SPR predictor q: (..., P) -> (..., P)."""
        return self.predictor(y)

    # -- Q heads --------------------------------------------------------------------------------
    def q_logits(self, z: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Unconditioned C51 head: (B, C, 7, 7) -> (B, A, Z) atom logits (float32).

        Reads ``rl_hidden``'s first layers where the model has them, else ``head.``'s.
        ``action_mask``: (A,) bool, the actions the game has when the network is wider
        (`sgi_lab.nets.heads.dueling_combine`); None: all of them.
        """
        hidden = self.rl_hidden if self.has_rl_hidden else None
        return self.head(z.flatten(1), action_mask, hidden).float()

    def q_log_probs(self, z: torch.Tensor) -> torch.Tensor:
        """(B, C, 7, 7) -> (B, A, Z) log-probabilities over atoms."""
        return F.log_softmax(self.q_logits(z), dim=-1)

    def q_values(self, z: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, C, 7, 7) -> (B, A) expected returns (v_min for actions masked out)."""
        return (F.softmax(self.q_logits(z, action_mask), dim=-1) * self.support).sum(-1)

    def goal_q_logits(
        self,
        z: torch.Tensor,
        goal: torch.Tensor,
        action_mask: torch.Tensor | None = None,
        film: tuple[torch.Tensor, ...] | None = None,
    ) -> torch.Tensor:
        """FiLM goal-conditioned C51 head: latents (B, C, 7, 7), goals (B, D) -> (B, A, Z).

        Shares the hidden layers with :meth:`q_logits`; a layer norm whose affine parameters
        come from the FiLM generator sits after them, then the goal head's output layers.
        ``film``: ``self.film(goal)`` when the caller has it (two passes with the same goals).
        """
        adv_h, val_h = self.head.hidden(z.flatten(1))
        film = self.film(goal) if film is None else film
        return self.goal_head(adv_h, val_h, film, action_mask).float()

    def goal_q_log_probs(self, z: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """(B, C, 7, 7), (B, D) -> (B, A, Z) log-probabilities over atoms."""
        return F.log_softmax(self.goal_q_logits(z, goal), dim=-1)

    # -- other heads ----------------------------------------------------------------------------
    def inverse_logits(
        self, y: torch.Tensor, y_next: torch.Tensor, action_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Inverse dynamics: online projection y_hat_k, target projection y_tilde_{k+1}
        (..., P) each -> (..., A) logits of a_k (actions masked out get a logit of -1e4)."""
        logits = self.inverse(y, y_next)
        if action_mask is not None:
            logits = logits.masked_fill(~action_mask, INVALID_ACTION_LOGIT)
        return logits

    def bc_logits(self, z: torch.Tensor) -> torch.Tensor:
        """Behavioural-cloning logits (B, A): the Q head's expected values.

        As the reference's default (``bc_from_values=True``): BC trains the whole Q head,
        which finetuning then loads, instead of a separate policy layer.
        """
        return self.q_values(z)

    def atc_predict(self, y: torch.Tensor) -> torch.Tensor:
        """ATC anchor prediction W(y + mlp(y)): (N, P) -> (N, P)."""
        return self.atc(y)

    # -- noise ----------------------------------------------------------------------------------
    def noisy_layers(self) -> list[NoisyLinear]:
        return [m for m in self.modules() if isinstance(m, NoisyLinear)]

    def set_noise(self, enabled: bool) -> None:
        """Switch noisy-net noise on or off in every Q-head layer."""
        for layer in self.noisy_layers():
            layer.noise_enabled = enabled

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Resample the factorised noise of every noisy layer."""
        for layer in self.noisy_layers():
            layer.reset_noise(generator)

    def reset_noise_parameters(self) -> None:
        """Reset every sigma to its initial value (call after loading pretrained weights,
        as the reference does: pretraining runs noise-free, so its sigmas carry nothing)."""
        for layer in self.noisy_layers():
            layer.reset_noise_parameters()
