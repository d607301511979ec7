"""A population's tensors along a leading agent axis: zero-padding to the widest action set and
back, stacking (conv weights channels-last per agent when asked), per-agent shapes, and maps
over the nested dicts of tensors a batched update passes around."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from sgi_lab.nets import SGIModel

__all__ = ["own_shapes", "pad_to", "stack_agents", "tree_map", "tree_stack", "unpad_to"]


def pad_to(tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Zero-pad ``tensor`` at the end of every dimension that is shorter than ``shape``."""
    if tuple(tensor.shape) == tuple(shape):
        return tensor
    out = tensor.new_zeros(shape)
    out[tuple(slice(0, s) for s in tensor.shape)] = tensor
    return out


def unpad_to(tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """The leading ``shape`` block of ``tensor`` (the inverse of `pad_to`), as a copy."""
    return tensor[tuple(slice(0, s) for s in shape)].clone()


_SHAPES: dict[str, dict[str, torch.Size]] = {}


def own_shapes(model_args: dict[str, Any]) -> dict[str, torch.Size]:
    """The state-dict shapes of ``SGIModel(**model_args)`` (built on the meta device once per
    distinct arguments: a build costs 12-48 ms, and a checkpoint asks for each agent's shapes
    several times)."""
    key = repr(sorted(model_args.items()))
    if key not in _SHAPES:
        with torch.device("meta"):
            model = SGIModel(**model_args)
        _SHAPES[key] = {k: v.shape for k, v in model.state_dict().items()}
    return dict(_SHAPES[key])


def stack_agents(tensors: list[torch.Tensor], channels_last: bool) -> torch.Tensor:
    """Stack along a new agent axis; conv weights (4-D per agent) with each agent's slice in
    channels-last memory format when asked, as a lone model's ``.to(channels_last)`` stores it
    (so a population of one runs the same kernels a single model did)."""
    stacked = torch.stack(tensors)
    if not channels_last or stacked.dim() != 5:
        return stacked
    n, o, i, h, w = stacked.shape
    out = stacked.new_empty((n, o, h, w, i)).permute(0, 1, 4, 2, 3)
    return out.copy_(stacked)


def tree_stack(trees: list[Any]) -> Any:
    """Stack matching nested dicts/tuples/lists of tensors along a new leading axis."""
    first = trees[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(trees)
    if isinstance(first, dict):
        return {k: tree_stack([t[k] for t in trees]) for k in first}
    if isinstance(first, (tuple, list)):
        return _rebuild(first, [tree_stack([t[i] for t in trees]) for i in range(len(first))])
    return first


def tree_map(fn: Callable[[torch.Tensor], Any], tree: Any) -> Any:
    """``fn`` on every tensor of nested dicts, tuples and lists."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return _rebuild(tree, [tree_map(fn, v) for v in tree])
    return tree


def _rebuild(like: tuple | list, items: list[Any]) -> tuple | list:
    """A tuple, named tuple or list of the type of ``like`` holding ``items``."""
    if hasattr(like, "_fields"):  # a NamedTuple: its fields are positional arguments
        return type(like)(*items)
    return type(like)(items)
