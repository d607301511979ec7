"""Networks: encoders, SPR transition model, C51 dueling noisy heads with FiLM goal
conditioning, inverse-dynamics and ATC heads, composed in :class:`SGIModel`.

- `encoders`: the Nature CNN, the ResNets of the paper and the MinAtar CNNs (`make_encoder`),
  and `renormalize`;
- `transition`: SPR's latent transition model h(z, a) -> z';
- `heads`: the distributional dueling Q head, FiLM goal conditioning, the inverse-dynamics
  model and ATC's contrast head;
- `noisy`: the noisy linear layer (factorised Gaussian noise);
- `model`: `SGIModel`, all of them in one module under stable parameter names;
- `ema`: target networks and the one EMA step;
- `agent_axis`: convolution and batch norm with a population's agent axis explicit under vmap
  (`lean_kernels`: fewer operators per update, a population's default under vmap).
"""

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
