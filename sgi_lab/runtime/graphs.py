"""CUDA graphs: a step captured once and replayed (`GraphedCall`), and a check, on any device,
that replaying it is right (`check_replayable`).

A CUDA graph records the kernels of one call with their arguments and memory addresses; each
replay runs exactly those kernels on exactly that memory, with no Python and no launch cost.
A replay therefore does what an eager call would only if every call does the same work on the
same persistent tensors: no Python number that changes between calls (a step count, an annealed
beta) baked into an operator, no state replaced by a new tensor instead of updated in place, no
shape that depends on data, and no host synchronisation (``.item()``, ``bool(tensor)``), which
capture forbids.

`ReplayTrace` records what a graph would fix (every computing operator, its non-tensor
arguments, its tensors' shapes and dtypes, and the storage of each tensor that existed before
the call) so that two calls' traces can be compared; `check_replayable` runs a step twice and
names the first difference; `OpCounter` counts a call's operators by phase. It runs on a CPU, so the CUDA path's graph safety is tested where no
GPU is available (tests/runtime/test_graphs.py).
"""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten


class GraphedCall:
    """``fn(*inputs)`` run eagerly ``warmup`` times on a side stream (PyTorch's recipe: the
    allocator and cuDNN settle), then captured once as a CUDA graph and replayed at every later
    call: the tensor inputs are copied into the graph's static inputs, and the graph's static
    outputs are returned (a later call overwrites them: copy what must outlive it).

    Args:
        fn: the step; it must be replay-safe (`check_replayable`).
        warmup: eager calls before the capture.
        generators: torch generators ``fn`` draws from, registered with the graph so that each
            replay advances them.
        before_capture: called right before the capture (e.g. ``optimizer.zero_grad(
            set_to_none=True)``, so the captured backward allocates its gradients in the graph's
            memory).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        warmup: int = 3,
        generators: Sequence[torch.Generator] = (),
        before_capture: Callable[[], None] | None = None,
    ) -> None:
        self.fn, self.warmup, self.generators = fn, warmup, list(generators)
        self.before_capture = before_capture
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: list[torch.Tensor] = []
        self.outputs: Any = None

    @staticmethod
    def available(device: torch.device) -> bool:
        """CUDA, with a PyTorch that registers generators with graphs."""
        return device.type == "cuda" and hasattr(torch.cuda.CUDAGraph, "register_generator_state")

    def __call__(self, *inputs: Any) -> Any:
        flat, spec = tree_flatten(inputs)
        if self.graph is None and self.calls < self.warmup:
            self.calls += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self.fn(*inputs)
            torch.cuda.current_stream().wait_stream(side)
            return out
        if self.graph is None:
            self.inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in flat]
            graph = torch.cuda.CUDAGraph()
            for g in self.generators:
                graph.register_generator_state(g)
            if self.before_capture is not None:
                self.before_capture()
            with torch.cuda.graph(graph):
                self.outputs = self.fn(*tree_unflatten(self.inputs, spec))
            self.graph = graph
        for static, value in zip(self.inputs, flat, strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.outputs


# Operators that read a value on the host or give data-dependent shapes: not capturable.
HOST_SYNCS = frozenset(
    {
        "_local_scalar_dense",
        "nonzero",
        "masked_select",
        "unique",
        "_unique",
        "_unique2",
        "unique_consecutive",
        "unique_dim",
        "repeat_interleave",  # with a tensor of repeats
        "equal",
        "is_nonzero",
    }
)
_VIEWS = frozenset(
    "view _unsafe_view alias as_strided detach t transpose permute expand unsqueeze squeeze "
    "select slice unbind split split_with_sizes unflatten unfold lift_fresh".split()
)


@dataclass(frozen=True)
class _Scalar:
    """A 0-dim host tensor's storage and value; equal when either agrees."""

    ptr: int
    value: float | int | bool

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Scalar) and (self.ptr == other.ptr or self.value == other.value)

    def __hash__(self) -> int:
        return 0


@dataclass
class ReplayTrace(TorchDispatchMode):
    """Records one call's operators as a graph capture would fix them (use as a context)."""

    ops: list[tuple[Any, ...]] = field(default_factory=list)
    host_syncs: list[str] = field(default_factory=list)
    _created: set[int] = field(default_factory=set)  # storages allocated inside the call
    _made: dict[int, weakref.ref] = field(default_factory=dict)  # tensors made inside it

    def __post_init__(self) -> None:
        super().__init__()

    def _describe(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            ptr = value.untyped_storage().data_ptr()
            made = self._made.get(id(value))
            if made is not None and made() is value:
                where: Any = "new"
            elif value.dim() == 0 and value.device.type == "cpu":
                # A host scalar not made here: state updated in place (same storage at every
                # call) or a number wrapped afresh at each call (e.g. by vmap), whose storage may
                # be a freed tensor's, which a graph bakes in: the same if storage or value agree.
                with _disable_current_modes():
                    where = _Scalar(ptr, value.item())
            elif ptr in self._created:
                where = "new"
            else:
                where = ("state", ptr, value.storage_offset())
            return ("tensor", tuple(value.shape), value.dtype, where)
        if isinstance(value, torch.Generator):
            # A fresh Python wrapper at each dispatch: named by its device and seed.
            return ("generator", value.device.type, value.initial_seed())
        if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
            return value
        if isinstance(value, (int, float, bool, str, type(None))):
            return value
        return type(value).__name__

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in HOST_SYNCS:
            self.host_syncs.append(str(func))
        flat, _ = tree_flatten((args, kwargs))
        described = tuple(self._describe(v) for v in flat)
        out = func(*args, **kwargs)
        if name not in _VIEWS:
            self.ops.append((str(func), described))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                if not any(v is t for v in flat):
                    self._made[id(t)] = weakref.ref(t)
                ptr = t.untyped_storage().data_ptr()
                if not any(
                    isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() == ptr
                    for v in flat
                ):
                    self._created.add(ptr)
        return out


def trace(step: Callable[[], Any]) -> ReplayTrace:
    """The `ReplayTrace` of one call of ``step``."""
    with ReplayTrace() as recorded:
        step()
    return recorded


def count_ops(step: Callable[[], Any]) -> Counter[str]:
    """The computing ATen operators of one call of ``step`` by name (views excluded): on a GPU
    each is a kernel launch wherever nothing is captured in a graph."""
    return Counter(op[0].split(".")[1] for op in trace(step).ops)


class OpCounter(TorchDispatchMode):
    """Counts the computing ATen operators (views excluded, as `count_ops`) dispatched while it
    is active, by the phase named with `phase` (the innermost label wins; ``other`` outside
    every label). Exact and load-independent: what a GPU launches per phase when nothing is
    captured in a graph. ``views``: count views too (every dispatch: the host's work per op
    where nothing is captured)."""

    def __init__(self, views: bool = False) -> None:
        super().__init__()
        self.counts: dict[str, Counter[str]] = {}
        self._phase = "other"
        self._skipped = frozenset() if views else _VIEWS

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        outer, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = outer

    def totals(self) -> dict[str, int]:
        """``{phase: operators}`` in the order the phases first dispatched."""
        return {k: sum(v.values()) for k, v in self.counts.items()}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = func.overloadpacket.__name__
        if name not in self._skipped:
            self.counts.setdefault(self._phase, Counter())[name] += 1
        return func(*args, **(kwargs or {}))


def check_replayable(step: Callable[[], Any], calls: int = 2) -> None:
    """Run ``step`` ``calls`` times (after one untraced warm-up call) and raise if a graph
    captured from the first traced call would not do what the later calls do eagerly.

    Raises:
        AssertionError: naming the host synchronisation, or the first operator whose
            arguments, shapes or state tensors differ between calls.
    """
    step()
    first = trace(step)
    for call in range(1, calls):
        assert_replays(first, trace(step), f"call {call}")
    if calls == 1:
        assert_replays(first, first, "call 0")


def assert_replays(
    captured: ReplayTrace, later: ReplayTrace, label: str = "the later call"
) -> None:
    """Raise unless a graph captured from ``captured`` does what ``later`` did eagerly.

    Raises:
        AssertionError: naming a host synchronisation, or the first operator whose arguments,
            shapes or state tensors differ.
    """
    for name, recorded in (("the captured call", captured), (label, later)):
        if recorded.host_syncs:
            raise AssertionError(f"host synchronisation inside {name}: {recorded.host_syncs[:5]}")
    if len(later.ops) != len(captured.ops):
        raise AssertionError(
            f"{label} runs {len(later.ops)} operators, the captured call {len(captured.ops)}"
        )
    for i, (a, b) in enumerate(zip(captured.ops, later.ops, strict=True)):
        if a != b:
            raise AssertionError(
                f"operator {i} differs between calls (a replay would not do what {label} "
                f"does):\n  captured: {_short(a)}\n  {label}: {_short(b)}"
            )


def _short(op: tuple[Any, ...]) -> str:
    text = repr(op)
    return text if len(text) < 600 else text[:600] + "..."
