"""Networks: encoders, SPR transition model, C51 dueling noisy heads with FiLM goal
conditioning, inverse-dynamics and ATC heads, composed in :class:`SGIModel`."""

from sgi_lab.nets.ema import ema_update, make_target
from sgi_lab.nets.encoders import (
    ENCODERS,
    InvertedResidual,
    MinAtarCNN,
    NatureCNN,
    ResNetEncoder,
    make_encoder,
    renormalize,
)
from sgi_lab.nets.heads import (
    ATCContrast,
    DistributionalDuelingHead,
    FiLMGenerator,
    GoalHeadOutputs,
    InverseModel,
    film_layer_norm,
    scale_gradient,
)
from sgi_lab.nets.model import PARAMETER_GROUPS, SGIModel, parameter_group
from sgi_lab.nets.noisy import NoisyLinear
from sgi_lab.nets.transition import TransitionModel

__all__ = [
    "ENCODERS",
    "PARAMETER_GROUPS",
    "ATCContrast",
    "DistributionalDuelingHead",
    "FiLMGenerator",
    "GoalHeadOutputs",
    "InverseModel",
    "InvertedResidual",
    "MinAtarCNN",
    "NatureCNN",
    "NoisyLinear",
    "ResNetEncoder",
    "SGIModel",
    "TransitionModel",
    "ema_update",
    "film_layer_norm",
    "make_encoder",
    "make_target",
    "parameter_group",
    "renormalize",
    "scale_gradient",
]
