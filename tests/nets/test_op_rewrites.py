"""The update's pieces rewritten to dispatch fewer operators, each against the formula it
replaces (float64, gradients included, under vmap where the update runs them)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import vmap

from sgi_lab.nets.encoders import closed_form_gradients
from sgi_lab.nets.encoders import renormalize as plain_renormalize
from sgi_lab.nets.heads import INVALID_ACTION_LOGIT, dueling_combine


def renormalize(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """`sgi_lab.nets.encoders.renormalize` with its closed-form gradient (a GPU update's)."""
    with closed_form_gradients():
        return plain_renormalize(x, *args, **kwargs)


def autograd_renormalize(x: torch.Tensor, start_dim: int = -3, eps: float = 1e-6) -> torch.Tensor:
    """The textbook formula, differentiated by autograd (amin / amax split ties evenly)."""
    flat = x.flatten(start_dim)
    lo = flat.amin(dim=-1, keepdim=True)
    hi = flat.amax(dim=-1, keepdim=True)
    return ((flat - lo) / (hi - lo).clamp_min(eps)).view(x.shape)


def _values_and_grads(fn, x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_()
    y = fn(x)
    (y * g).sum().backward()
    return y.detach(), x.grad


def test_renormalize_matches_autograd_values_and_gradients() -> None:
    torch.manual_seed(0)
    x = torch.randn(6, 3, 4, 4, dtype=torch.float64)
    x[1] = 2.5  # constant: the span is clamped to eps, y = 0
    x[2, 0, 0, 0] = 1e-9 + x[2].amin()  # near-tie at the minimum (distinct values)
    g = torch.randn_like(x)
    y, grad = _values_and_grads(renormalize, x, g)
    y_ref, grad_ref = _values_and_grads(autograd_renormalize, x, g)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-15)
    rows = [0, 2, 3, 4, 5]
    torch.testing.assert_close(grad[rows], grad_ref[rows], rtol=1e-12, atol=1e-12)
    # the constant sample: every element ties; the tie group's gradient is the same in total
    torch.testing.assert_close(grad[1].sum(), grad_ref[1].sum(), rtol=0, atol=1e-6)  # g / eps ~ 1e6
    assert y[0].amin() == 0 and y[0].amax() == 1 and (y[1] == 0).all()


def test_renormalize_vectors_and_tiny_spans() -> None:
    torch.manual_seed(1)
    x = torch.randn(5, 7, dtype=torch.float64)
    x[3] = x[3] * 1e-8  # span below eps: clamped, no gradient through the span
    g = torch.randn_like(x)
    fn = lambda v: renormalize(v, start_dim=-1)  # noqa: E731
    ref = lambda v: autograd_renormalize(v, start_dim=-1)  # noqa: E731
    for a, b in zip(_values_and_grads(fn, x, g), _values_and_grads(ref, x, g), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_renormalize_ties_at_a_relu_zero_give_the_same_weight_gradient() -> None:
    """ReLU'd latents tie at 0: the minimum's gradient lands on one zero instead of all of
    them, and the ReLU's backward drops it either way."""
    torch.manual_seed(2)
    w = torch.randn(8, 3, 3, 3, dtype=torch.float64)
    obs = torch.randn(4, 3, 6, 6, dtype=torch.float64)
    g = torch.randn(4, 8, 4, 4, dtype=torch.float64)

    def weight_grad(fn) -> torch.Tensor:
        wg = w.clone().requires_grad_()
        (fn(F.relu(F.conv2d(obs, wg))) * g).sum().backward()
        return wg.grad

    assert (F.relu(F.conv2d(obs, w)) == 0).flatten(1).sum(1).min() > 1  # ties at 0
    torch.testing.assert_close(
        weight_grad(renormalize), weight_grad(autograd_renormalize), rtol=1e-12, atol=1e-12
    )


def test_renormalize_under_vmap() -> None:
    torch.manual_seed(3)
    x = torch.randn(3, 5, 2, 3, 3, dtype=torch.float64)
    g = torch.randn_like(x)
    y, grad = _values_and_grads(vmap(renormalize), x, g)
    y_ref, grad_ref = _values_and_grads(autograd_renormalize, x, g)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-15)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-12, atol=1e-12)


def test_renormalize_gradient_is_autograds_to_the_bit_without_ties() -> None:
    """Rounded as autograd's chain rounds it: a near-tie at the maximum (which the gradient
    follows) is resolved alike, so trajectories do not drift apart."""
    torch.manual_seed(4)
    x = F.relu(torch.randn(8, 16, 7, 7))
    g = torch.randn_like(x)
    y, grad = _values_and_grads(renormalize, x, g)
    y_ref, grad_ref = _values_and_grads(autograd_renormalize, x, g)
    assert torch.equal(y, y_ref)
    positive = x > 0  # the ties at 0 get the ReLU's zero gradient either way
    assert torch.equal(grad * positive, grad_ref * positive)


def masked_fill_dueling_combine(value, advantage, action_mask):
    """The masked dueling combination as it was written before (masked_fill, a filled row)."""
    mask = action_mask.view(*action_mask.shape[:-1], -1, 1)
    count = mask.sum(dim=-2, keepdim=True).to(advantage.dtype)
    mean = advantage.masked_fill(~mask, 0).sum(dim=1, keepdim=True) / count
    logits = value + advantage - mean
    invalid = torch.full_like(logits[..., :1, :], INVALID_ACTION_LOGIT)
    invalid[..., 0] = 0.0
    return torch.where(mask, logits, invalid)


def test_dueling_combine_is_the_masked_fill_formula_to_the_bit_under_vmap() -> None:
    torch.manual_seed(5)
    value = torch.randn(3, 4, 1, 7, requires_grad=True)
    advantage = torch.randn(3, 4, 6, 7, requires_grad=True)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] * 3 + [False] * 3])
    g = torch.randn(3, 4, 6, 7)
    outs = []
    for fn in (dueling_combine, masked_fill_dueling_combine):
        out = vmap(fn)(value, advantage, mask)
        outs.append((out, *torch.autograd.grad((out * g).sum(), (value, advantage))))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)
    with torch.inference_mode():  # acting's context first: the constant stays usable in training
        dueling_combine(value[1], advantage[1], mask[1])
    assert torch.equal(dueling_combine(value[1], advantage[1], mask[1]), outs[1][0][1])


def test_renormalize_outside_the_switch_is_autograds_formula() -> None:
    """Outside `closed_form_gradients` (a CPU's default) autograd differentiates the formula."""
    x = torch.rand(2, 3, 4, 4, requires_grad=True)
    assert plain_renormalize(x).grad_fn.name() == "ViewBackward0"
    assert plain_renormalize(x).grad_fn.next_functions[0][0].name() == "DivBackward0"
    assert renormalize(x).grad_fn.next_functions[0][0].name() != "DivBackward0"
