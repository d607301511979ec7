"""The two walks of the batched sum tree find the same leaves, write the same leaves and totals,
and the prefix walk does it in a handful of operators (a GPU's kernels) instead of ~130."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sgi_lab.data.batched_sum_tree import BatchedSumTree
from sgi_lab.data.population_replay import PopulationReplay
from sgi_lab.runtime.graphs import count_ops


def trees(values: torch.Tensor, capacity: int) -> tuple[BatchedSumTree, BatchedSumTree]:
    rows = torch.arange(values.shape[1]).expand(values.shape[0], -1)
    walked = BatchedSumTree(values.shape[0], capacity, walk="tree")
    prefixed = BatchedSumTree(values.shape[0], capacity, walk="prefix")
    for tree in (walked, prefixed):
        tree.update(rows, values)
    return walked, prefixed


def test_both_walks_find_the_same_leaves_where_sums_are_exact():
    # integer priorities (zeros among them): every sum is exact in float64, so any mass in
    # [0, total) lies in the same leaf's interval under both sums
    g = torch.Generator().manual_seed(0)
    values = torch.randint(0, 5, (3, 1000), generator=g).double()
    values[1, 990:] = 0  # an empty tail: never returned
    walked, prefixed = trees(values, 1000)
    assert torch.equal(walked.total, prefixed.total)
    mass = torch.rand(3, 4096, generator=g, dtype=torch.float64) * walked.total[:, None]
    mass[:, 0] = 0.0
    mass[:, 1] = walked.total - 0.5  # in the last positive leaf
    found = prefixed.find(mass)
    assert torch.equal(found, walked.find(mass))
    assert bool((prefixed.get(found) > 0).all())
    # a mass at the total (round-off between two sums) lands on the last positive leaf
    at_total = prefixed.find(prefixed.total[:, None].clone())
    assert at_total[1, 0] == 989 and bool((prefixed.get(at_total) > 0).all())


def test_writes_keep_the_same_leaves_totals_and_positive_counts():
    g = torch.Generator().manual_seed(1)
    walked, prefixed = trees(torch.zeros(2, 300, dtype=torch.float64), 300)
    for _ in range(20):
        rows = torch.randint(0, 300, (2, 32), generator=g)  # duplicates within a batch
        values = torch.randint(0, 4, (2, 32), generator=g).double() / 4
        walked.update(rows, values)
        prefixed.update(rows, values)
        assert torch.equal(walked.positive_counts(), prefixed.positive_counts())
        assert torch.equal(walked.leaves, prefixed.leaves)
        assert torch.equal(walked.total, prefixed.total)


def replay(sampling: str, draws: str = "auto", agents: int = 2) -> PopulationReplay:
    r = PopulationReplay(
        agents, 400, K=2, n_step=3, seeds=[5, 6, 7, 8, 9][:agents], sampling=sampling, draws=draws
    )
    rng = np.random.default_rng(0)
    for t in range(300):
        r.append(
            rng.integers(0, 255, (agents, 84, 84), dtype=np.uint8),
            rng.integers(0, 4, agents),
            rng.normal(size=agents).astype(np.float32),
            rng.random(agents) < 0.01,
            np.full(agents, t == 0),
        )
    return r


def test_a_replay_samples_the_same_batches_under_either_walk_with_far_fewer_operators():
    walked, prefixed = replay("tree"), replay("prefix", draws="agent")
    for _ in range(3):
        a, b = walked.sample(16, 0.4), prefixed.sample(16, 0.4)
        assert torch.equal(a.indices, b.indices)
        torch.testing.assert_close(a.weights, b.weights)
        # priorities that are sums of powers of two stay exact: the next draws agree too
        p = torch.randint(1, 8, a.indices.shape).double() / 8
        walked.update_priorities(a.indices, p)
        prefixed.update_priorities(b.indices, p)
    ops = {
        name: (
            sum(count_ops(lambda r=r: r.sample_at_beta(16)).values()),
            sum(count_ops(lambda r=r: r.update_priorities(r.sample(16, 0.4).indices, p)).values()),
        )
        for name, r in (("tree", walked), ("prefix", prefixed))
    }
    # the walk's 9 levels (400 rows) are gone from sampling, and from the priority write
    assert ops["prefix"][0] <= ops["tree"][0] - 60
    with pytest.raises(ValueError, match="sampling: one of"):
        PopulationReplay(1, 10, sampling="heap")


def test_the_default_walk_follows_the_device():
    assert BatchedSumTree(1, 8).walk == "tree"
    assert BatchedSumTree(1, 8, device="meta").walk == "tree"
    with pytest.raises(ValueError, match="walk: one of"):
        BatchedSumTree(1, 8, walk="heap")


@pytest.mark.parametrize("walk", ["tree", "prefix"])
def test_a_write_takes_each_rows_last_value_in_a_handful_of_operators(walk):
    tree = BatchedSumTree(2, 6, walk=walk)
    rows = torch.tensor([[4, 1, 4, 0, 4], [2, 2, 2, 2, 5]])
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0, 0.5], [1.0, 0.0, 7.0, 6.0, 8.0]]).double()
    tree.update(rows, values)
    assert tree.leaves[:, :6].tolist() == [[4, 2, 0, 0, 0.5, 0], [0, 0, 6, 0, 0, 8]]
    assert tree.total.tolist() == [6.5, 14.0] and tree.positive_counts().tolist() == [3, 2]
    tree.host_checks = False  # as on a GPU
    ops = count_ops(lambda: tree.update(rows, values))
    # the last occurrence (scatter_reduce, gather), its value (gather), the leaves (scatter_),
    # then for the tree walk the leaves' nodes and 3 levels of ancestors (8 each); a sort and
    # its run bookkeeping took 11 more
    assert sum(ops.values()) == 4 + (1 + 3 * 8 if walk == "tree" else 0), ops
    # a batch as large as the tree (a rebuild by writes): memory and operators as for a few
    big = BatchedSumTree(2, 100_000, walk=walk)
    rows = torch.arange(100_000).flip(0).expand(2, -1)
    big.update(torch.cat([rows, rows], 1), torch.arange(200_000.0).expand(2, -1))
    assert big.leaves[0, :3].tolist() == [199_999.0, 199_998.0, 199_997.0]


def test_stratified_draws_land_alike_under_both_walks_and_never_past_the_last_positive_leaf():
    g = torch.Generator().manual_seed(2)
    values = torch.randint(0, 5, (3, 500), generator=g).double()  # exact sums
    values[2, 480:] = 0
    walked, prefixed = trees(values, 512)
    u = torch.rand(3, 64, generator=g, dtype=torch.float64)
    u[:, -1] = 1.0 - 2.0**-53  # the largest uniform: the last stratum's mass reaches the total
    found = prefixed.find_stratified(u)
    assert torch.equal(found, walked.find_stratified(u))
    assert found[2, -1] == 479 and bool((prefixed.get(found) > 0).all())
    # stratum b of tree i holds mass (b + u) / B * total: the leaf's running-sum interval has it
    prefix = values.cumsum(1)
    mass = (torch.arange(64) + u) / 64 * prefix[:, -1:]
    lower = prefix.gather(1, found) - values.gather(1, found)
    inside = (lower <= mass) & (mass < prefix.gather(1, found))
    assert bool(inside[:, :-1].all())
    ops = count_ops(lambda: prefixed.find_stratified(u))
    # strata, running sums, the number below the total, mass, one search: no tree walk, and
    # no second search for the last positive leaf
    assert sum(ops.values()) == 6, ops


FIELDS = ("obs", "actions", "rewards", "valid", "terminals", "returns", "bootstrap_obs")
FIELDS += ("bootstrap_discount", "goal_offset", "indices")


def test_population_draws_land_where_the_walk_does_for_the_same_uniforms():
    """The GPU's path (prefix walk, one draw for all agents) on the population's uniforms
    samples the batches the tree walk samples on the same uniforms."""
    walked, pooled = replay("tree"), replay("prefix")
    assert (walked.draws, pooled.draws) == ("agent", "population")
    assert len(pooled.generators) == 1
    for _ in range(3):
        copy = torch.Generator().manual_seed(0)
        copy.set_state(pooled.generators[0].get_state())
        uniforms = torch.rand(2, 16, generator=copy, dtype=torch.float64)
        batch = pooled.sample(16, 0.4)
        starts = walked.tree.find_stratified(uniforms)
        assert torch.equal(batch.indices, starts)
        want = walked.batch_at(starts)
        for name in FIELDS:
            assert torch.equal(getattr(batch, name), getattr(want, name)), name
        w = walked.tree.get(starts) ** -0.4  # (count * P) ** -beta, over the batch max
        torch.testing.assert_close(batch.weights, (w / w.max(1, keepdim=True).values).float())
        p = torch.randint(1, 8, starts.shape).double() / 8  # exact sums under both walks
        walked.update_priorities(starts, p)
        pooled.update_priorities(starts, p)


def test_population_draws_are_one_operator_whatever_the_population():
    def sample_ops(sampling: str, draws: str, agents: int) -> int:
        r = replay(sampling, draws, agents)
        r.set_beta(0.4)
        r.sample_at_beta(16)  # warm: constants made once
        return sum(count_ops(lambda: r.sample_at_beta(16)).values())

    agent = [sample_ops("prefix", "agent", n) for n in (2, 5)]
    pooled = [sample_ops("prefix", "population", n) for n in (2, 5)]
    assert agent[1] - agent[0] == 3 and pooled[0] == pooled[1] == agent[0] - 2
    # draws 1, leaves 6 (`find_stratified`), weights 5, the batch 37: 49 at N = 2 or 26, where
    # the agents' own draws, the second search and the former batch assembly took 104 at 2
    assert pooled[0] == 49
    with pytest.raises(ValueError, match="draws: one of"):
        PopulationReplay(1, 10, draws="each")
