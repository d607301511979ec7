"""N sum trees of priorities as one tensor, and two ways to find the leaf a draw lands on.

`BatchedSumTree` keeps N agents' priorities as one (N, 2 * size) float64 tensor laid out as a
binary sum tree (node 1 the root, node j's children 2j and 2j + 1, leaves ``size .. 2*size - 1``),
as :class:`sgi_lab.data.replay.SumTree` does for one agent. A draw of mass m in [0, total) lands
on the leaf whose prefix-sum interval holds m; two walks find it:

- ``"tree"``: the descent from the root, one level at a time (17 levels for 100k rows: about 8
  operators a level), and a priority write that recomputes its ancestors level by level. Its
  sums are the numpy tree's, bit for bit: the CPU's default.
- ``"prefix"``: the leaves' running sum and a binary search (`torch.searchsorted`), and a
  priority write that sets the leaves only (the total is the leaves' sum). A handful of
  operators whatever the capacity: on a GPU each operator is a kernel launch, and the walk was
  about a third of a learn step's (issue of the GPU path). Its sums are sequential rather than
  pairwise, so a draw within float round-off of an interval's edge may land one leaf over;
  otherwise it lands where the walk does (tested with priorities whose sums are exact).

Both never return an empty leaf for a mass below the total. A replay's sample is one
`BatchedSumTree.find_stratified` (B strata per tree: 6 operators by prefix sums, ~190 by the
walk at 100k rows); a priority write is one leaf scatter (plus the walk's ancestors), each
repeated row taking its last value in the batch.
"""

from __future__ import annotations

import torch

__all__ = ["SAMPLING", "BatchedSumTree"]

SAMPLING = ("auto", "tree", "prefix")
"""How a draw finds its leaf: ``auto`` is ``prefix`` on CUDA and ``tree`` elsewhere."""


class BatchedSumTree:
    """N binary sum trees over ``capacity`` priorities each, as one (N, 2 * size) float64 tensor.

    Node 1 is a root, node j's children are 2j and 2j+1, leaves are ``size .. 2*size - 1``
    (``size`` the power of two at or above ``capacity``), as in :class:`SumTree`, whose float64
    sums this reproduces bit for bit.
    """

    def __init__(
        self,
        num_trees: int,
        capacity: int,
        device: torch.device | str = "cpu",
        walk: str | None = None,
    ) -> None:
        device = torch.device(device)
        self.walk = walk or ("prefix" if device.type == "cuda" else "tree")
        if self.walk not in SAMPLING[1:]:
            raise ValueError(f"walk: one of {SAMPLING[1:]}, got {self.walk!r}")
        self.capacity = int(capacity)
        size = 1
        while size < self.capacity:
            size *= 2
        self.size = size
        # Validate values on the host (free on a CPU; a synchronisation elsewhere, never
        # inside a CUDA graph): `sgi_lab.runtime.graphs` turns it off to check the GPU's path.
        self.host_checks = torch.device(device).type == "cpu"
        self.levels = size.bit_length() - 1  # edges from the root to a leaf
        self.tree = torch.zeros(num_trees, 2 * size, dtype=torch.float64, device=device)
        self._arange = torch.zeros(0, dtype=torch.int64, device=device)
        self._last = torch.zeros(num_trees, size, dtype=torch.int64, device=device)  # scratch
        self._zero = torch.zeros((), dtype=torch.float64, device=device)

    @property
    def total(self) -> torch.Tensor:
        """(N,) total priority of each tree."""
        if self.walk == "prefix":  # the inner nodes are not kept
            return self.leaves.sum(1)
        return self.tree[:, 1]

    @property
    def leaves(self) -> torch.Tensor:
        """(N, size) the leaves (a view)."""
        return self.tree[:, self.size :]

    def get(self, rows: torch.Tensor) -> torch.Tensor:
        """(N, B) leaf priorities at ``rows`` (N, B)."""
        return self.leaves.gather(1, rows)

    def update(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        """Set leaves (and, for the tree walk, recompute their ancestors level by level), for
        all trees at once.

        A row repeated within a tree's batch takes the value of its last occurrence (as numpy
        fancy assignment does in :class:`SumTree`). Values are validated on a CPU only, where
        checking costs no device synchronisation.

        Args:
            rows: (N, B) int64 leaf indices per tree.
            values: (N, B) new priorities (broadcastable), finite and non-negative.
        """
        rows = torch.as_tensor(rows, dtype=torch.int64, device=self.tree.device)
        values = torch.as_tensor(values, dtype=torch.float64, device=self.tree.device)
        values = values.expand(rows.shape)
        if self.host_checks:
            low, high = torch.aminmax(values)  # NaN propagates to both
            if not (float(low) >= 0 and float(high) < float("inf")):
                raise ValueError("priorities must be finite and non-negative")
        # Scatter order among duplicate indices is unspecified (and differs on a GPU): give every
        # duplicate the value of its last occurrence, so any write order ends the same. Each
        # written leaf's last position in the batch is the largest scattered to it (a reduction
        # that ignores what the scratch held: no reset), read back at every occurrence: two
        # operators whatever the batch, where a sort and its run bookkeeping took eleven.
        positions = self._positions(rows.shape[1]).expand(rows.shape)
        self._last.scatter_reduce_(1, rows, positions, "amax", include_self=False)
        values = values.gather(1, self._last.gather(1, rows))
        self.leaves.scatter_(1, rows, values)
        if self.walk == "prefix":  # the leaves are all the prefix walk reads
            return
        nodes = rows + self.size
        for _ in range(self.levels):
            # Siblings within a level are final before their parents are summed; duplicate
            # parents read the same children and so write the same sum.
            nodes = nodes // 2
            sums = self.tree.gather(1, 2 * nodes) + self.tree.gather(1, 2 * nodes + 1)
            self.tree.scatter_(1, nodes, sums)

    def _positions(self, count: int) -> torch.Tensor:
        """``arange(count)`` on the tree's device, made once (a constant of every write)."""
        if len(self._arange) < count:
            self._arange = torch.arange(count, device=self.tree.device)
        return self._arange[:count]

    def positive_counts(self) -> torch.Tensor:
        """(N,) int64 number of positive leaves in each tree (a pass over every leaf: for
        bookkeeping and tests, not for a learn step)."""
        return (self.leaves > 0).sum(1)

    def rebuild(self, tree: int, leaves: torch.Tensor) -> None:
        """Replace all leaves of one tree (the first ``len(leaves)``; the rest 0) and its sums."""
        t = self.tree[tree]
        t.zero_()
        t[self.size : self.size + len(leaves)] = leaves.to(t)
        lo = self.size
        while lo > 1:
            hi, lo = lo, lo // 2
            t[lo:hi] = t[2 * lo : 2 * hi : 2] + t[2 * lo + 1 : 2 * hi : 2]

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """(N, B) leaves whose prefix-sum interval contains ``mass`` (N, B) in ``[0, total)``.

        The descent goes right when the mass reaches past the left subtree, as `SumTree.find`
        does, but never into an empty subtree, so round-off near a tree's total still lands on a
        positive leaf (the numpy replay redraws those instead).
        """
        mass = mass.to(torch.float64)
        if self.walk == "prefix":
            return self._find_by_prefix(mass)
        nodes = torch.ones_like(mass, dtype=torch.int64)
        for _ in range(self.levels):
            left = 2 * nodes
            left_sum = self.tree.gather(1, left)
            right_sum = self.tree.gather(1, left + 1)
            go_right = (mass >= left_sum) & (right_sum > 0)
            mass = torch.where(go_right, mass - left_sum, mass)
            nodes = left + go_right.long()
        return (nodes - self.size).clamp_(max=self.capacity - 1)

    def find_stratified(self, uniforms: torch.Tensor) -> torch.Tensor:
        """(N, B) leaves of stratified draws: draw b of tree i lands at mass
        ``(b + uniforms[i, b]) * total_i / B``, in the b-th of B equal slices of the tree's total
        (`find`'s leaf, all of whose trees have a positive total).

        The prefix walk reads its total off the running sum it searches and scales the strata
        to the number just below it (``(b + u) / B`` is at most 1, so the mass stays under the
        total whatever the round-off), so the first running sum past the mass is a positive
        leaf's: one search, where `find` needs a second for the last positive leaf.
        """
        strata = self._positions(uniforms.shape[1]) + uniforms.to(torch.float64)
        if self.walk != "prefix":
            return self.find(strata * (self.total[:, None] / uniforms.shape[1]))
        prefix = self.leaves.cumsum(1)
        below_total = prefix[:, -1:].nextafter(self._zero)
        return torch.searchsorted(prefix, strata / uniforms.shape[1] * below_total, right=True)

    def _find_by_prefix(self, mass: torch.Tensor) -> torch.Tensor:
        """`find` by the leaves' running sums: the first leaf whose running sum passes the
        mass (so never an empty one), or the last positive leaf for a mass at or past the
        total (round-off between the two sums)."""
        prefix = self.leaves.cumsum(1)
        found = torch.searchsorted(prefix, mass.contiguous(), right=True)
        last = torch.searchsorted(prefix, prefix[:, -1:].contiguous())  # the last positive leaf
        return torch.minimum(found, last).clamp_(max=self.capacity - 1)
