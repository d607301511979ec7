"""SGIModel's second copy of the Q head's first layers (``rl_hidden``, docs/paper_vs_code.md
row 40): which methods read which copy, names, groups, initialization and arguments."""

from __future__ import annotations

import pytest
import torch

from sgi_lab.nets import SGIModel, parameter_group
from sgi_lab.nets.heads import DUELING_GRAD_SCALE, DuelingHiddenLayers

ARGS = {"encoder": "nature", "num_actions": 4, "hidden_size": 8, "width_scale": 0.25}
ARGS.update(image_size=52, goal_head=True, inverse_model=True)
HIDDEN = ("advantage_hidden", "value_hidden")


def build(rl_hidden: bool, seed: int = 0) -> SGIModel:
    torch.manual_seed(seed)
    model = SGIModel(**ARGS, rl_hidden=rl_hidden)
    model.set_noise(False)  # deterministic outputs; noise is checked on its own below
    return model


def outputs(model: SGIModel, z: torch.Tensor, goal: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        y = model.project(z)
        return {
            "q": model.q_logits(z),
            "project": y,
            "goal_q": model.goal_q_logits(z, goal),
            "inverse": model.inverse_logits(y, y),
        }


@pytest.fixture(scope="module")
def latents():
    g = torch.Generator().manual_seed(1)
    z = torch.rand(3, 16, 3, 3, generator=g)  # 16 channels: Nature at width 1/4
    return z, torch.rand(3, 16 * 9, generator=g)


def test_names_groups_and_arguments():
    model = build(True)
    names = {k for k in model.state_dict() if k.startswith("rl_hidden.")}
    expected = {
        f"rl_hidden.{s}.{p}_{q}"
        for s in HIDDEN
        for p in ("weight", "bias")
        for q in ("mu", "sigma")
    }
    assert names == expected
    for k in names:  # the same shapes as head.'s first layers
        assert model.state_dict()[k].shape == model.state_dict()["head." + k[10:]].shape
        assert parameter_group(k) == "projection"
    assert model.init_args["rl_hidden"] is True
    assert set(SGIModel(**model.init_args).state_dict()) == set(model.state_dict())
    # every other model records the arguments it always did
    assert "rl_hidden" not in build(False).init_args
    with pytest.raises(ValueError, match="rl_hidden=True needs rl_head=True"):
        SGIModel(**{**ARGS, "rl_head": False}, rl_hidden=True)


def test_the_copy_is_built_last_so_every_other_tensor_starts_as_without_it():
    one, two = build(False), build(True)
    for k, v in one.state_dict().items():
        torch.testing.assert_close(two.state_dict()[k], v, rtol=0, atol=0)


def test_q_logits_read_the_copy_and_everything_else_reads_heads_layers(latents):
    z, goal = latents
    model = build(True)
    model.rl_hidden.load_state_dict(
        {k: v for k, v in model.head.state_dict().items() if "_hidden." in k}
    )
    same = outputs(model, z, goal)
    plain = build(False)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if "rl_hidden" not in k})
    for key, value in outputs(plain, z, goal).items():  # equal copies: one-copy outputs
        torch.testing.assert_close(same[key], value, rtol=0, atol=0)
    with torch.no_grad():
        model.rl_hidden.advantage_hidden.weight_mu.mul_(-2.0)
    moved = outputs(model, z, goal)
    assert not torch.allclose(moved["q"], same["q"])
    for key in ("project", "goal_q", "inverse"):
        torch.testing.assert_close(moved[key], same[key], rtol=0, atol=0)
    with torch.no_grad():
        model.head.value_hidden.bias_mu.add_(1.0)
    changed = outputs(model, z, goal)
    torch.testing.assert_close(changed["q"], moved["q"], rtol=0, atol=0)
    for key in ("project", "goal_q"):
        assert not torch.allclose(changed[key], moved[key])


def test_each_copy_gets_only_its_own_gradient(latents):
    """The C51 logits train the copy (never head.'s first layers); the goal head and SPR's
    projection train head.'s (never the copy); the latent's gradient through the copy is scaled
    by 1/sqrt(2) as through head.'s layers."""
    z, goal = latents
    model = build(True)
    model.q_logits(z).sum().backward()  # noise off: the sigmas get no gradient
    assert all(p.grad is not None for n, p in model.rl_hidden.named_parameters() if "_mu" in n)
    assert all(p.grad is None for n, p in model.head.named_parameters() if "_hidden" in n)
    model.zero_grad(set_to_none=True)
    (model.goal_q_logits(z, goal).sum() + model.project(z).sum()).backward()
    assert all(p.grad is None for p in model.rl_hidden.parameters())
    assert model.head.advantage_hidden.weight_mu.grad is not None
    # the input gradient: d/dz of sum(W z) through one stream is W's column sums x 1/sqrt(2)
    layers = DuelingHiddenLayers(6, 2)
    for layer in (layers.advantage_hidden, layers.value_hidden):
        layer.noise_enabled = False
        with torch.no_grad():
            layer.bias_mu.fill_(10.0)  # every unit active: ReLU passes the gradient
    x = torch.rand(1, 6, requires_grad=True)
    sum(h.sum() for h in layers(x)).backward()
    w = layers.advantage_hidden.weight_mu + layers.value_hidden.weight_mu
    torch.testing.assert_close(x.grad[0], DUELING_GRAD_SCALE * w.sum(0).detach())


def test_the_copy_has_noise_and_sigmas_of_its_own(latents):
    z, _ = latents
    model = build(True)
    model.set_noise(True)
    noisy_ids = {id(m) for m in model.noisy_layers()}
    assert all(id(m) in noisy_ids for m in model.rl_hidden.children())
    model.reset_noise(torch.Generator().manual_seed(0))
    with torch.no_grad():
        noisy = model.q_logits(z)
        for layer in model.rl_hidden.children():  # silence only the copy's noise
            layer.eps_in.zero_()
            layer.eps_out.zero_()
        assert not torch.allclose(model.q_logits(z), noisy)
        for layer in model.rl_hidden.children():
            layer.weight_sigma.fill_(3.0)
    model.reset_noise_parameters()  # what transfer does after loading: sigma_0 / sqrt(in)
    assert torch.all(model.rl_hidden.advantage_hidden.weight_sigma == 0.5 / (16 * 9) ** 0.5)
