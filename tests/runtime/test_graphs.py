"""sgi_lab.runtime.graphs: what a CUDA graph would fix, checked on a CPU; the population's
update passes it on the GPU's path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from population_helpers import append_random_row, fake_batch, make_config, population

from sgi_lab.runtime.graphs import check_replayable, trace
from sgi_lab.train.acting import acting_actions
from sgi_lab.train.update import learn_step, stage, update

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_step_that_updates_state_in_place_and_draws_from_a_generator_is_replayable():
    state = torch.zeros(3)
    g = torch.Generator().manual_seed(0)

    def step():
        noise = torch.rand(3, generator=g)
        state.mul_(0.5).add_(noise)

    check_replayable(step, calls=3)


def test_host_synchronisation_is_named():
    x = torch.ones(2)
    with pytest.raises(AssertionError, match="host synchronisation.*_local_scalar_dense"):
        check_replayable(lambda: x.add_(1) if bool(x.sum() > 0) else None)


def test_state_replaced_by_a_new_tensor_is_caught():
    holder = {"best": torch.zeros(2)}

    def step():
        holder["best"] = torch.maximum(holder["best"], torch.ones(2))  # not in place

    with pytest.raises(
        AssertionError, match="maximum.*differs|differs.*maximum|operator 1 differs"
    ):
        check_replayable(step)


def test_a_changing_python_number_is_caught():
    x, calls = torch.ones(4), [0]

    def step():
        calls[0] += 1
        x.mul_(0.9 ** calls[0])  # an annealed coefficient baked into the kernel

    with pytest.raises(AssertionError, match="differs between calls"):
        check_replayable(step)


def test_trace_records_operators_shapes_and_state():
    state = torch.zeros(2, 3)
    recorded = trace(lambda: state.add_(torch.ones(3)))
    names = [op[0] for op in recorded.ops]
    assert names == ["aten.ones.default", "aten.add_.Tensor"]
    add = recorded.ops[1][1]
    assert add[0][:3] == ("tensor", (2, 3), torch.float32) and add[0][3][0] == "state"
    assert add[1][3] == "new"


@pytest.mark.parametrize(
    ("ssl", "batching", "encoder"),
    [
        ("spr", "vmap", "resnet"),
        ("all", "vmap", "resnet"),
        ("spr", "loop", "resnet"),
        ("none", "vmap", "resnet"),
        ("spr", "vmap", "nature"),  # one online pass over s_t and the bootstrap state
    ],
)
def test_population_update_is_replayable_on_the_gpu_path(ssl, batching, encoder):
    """The update a CUDA graph captures (`sgi_lab.train.update.update`, host checks off and
    lean kernels on, as on a GPU) does the same work on the same tensors at every call:
    captured once, replays stay right."""
    configs = [
        make_config(seed=s, game=g, ssl=ssl, population_batching=batching, encoder=encoder)
        for s, g in enumerate(["Pong", "Breakout"])
    ]
    pop = population(configs, [6, 4])
    pop.host_checks = False
    pop.lean_kernels = True
    staged = stage(
        pop,
        [fake_batch(c, 4, seed=i) for i, c in enumerate(configs)],
        [np.ones(c.batch_size, np.float32) for c in configs],
    )
    check_replayable(lambda: update(pop, staged), calls=3)
    # The CPU's own path reads values on the host, which a graph could not.
    pop.host_checks = True
    with pytest.raises(AssertionError, match="host synchronisation"):
        check_replayable(lambda: update(pop, staged))


def test_acting_is_replayable_across_updates():
    """The acting forward a CUDA graph captures reads the weights, noise and statistics that
    updates change in place: after an update its trace is the captured one."""
    from sgi_lab.runtime.graphs import assert_replays

    configs = [make_config(seed=s, population_batching="vmap") for s in range(2)]
    pop = population(configs, [6, 6])
    pop.host_checks = False
    staged = stage(
        pop,
        [fake_batch(c, 6, seed=i) for i, c in enumerate(configs)],
        [np.ones(c.batch_size, np.float32) for c in configs],
    )
    x = torch.randint(0, 255, (2, 4, 84, 84), dtype=torch.uint8)
    acting_actions(pop, x)
    captured = trace(lambda: acting_actions(pop, x))
    for _ in range(3):
        update(pop, staged)
    assert_replays(captured, trace(lambda: acting_actions(pop, x)), "acting after updates")


@pytest.mark.parametrize("ssl", ["spr", "all"])
def test_a_learning_step_is_replayable_across_appends(ssl):
    """Sample -> update -> priorities, the step a CUDA graph captures whole: after rows are
    appended and beta moves on (both eager, outside the graph), its trace is the captured one."""
    from sgi_lab.data.population_replay import PopulationReplay
    from sgi_lab.runtime.graphs import assert_replays

    configs = [make_config(seed=s, ssl=ssl, population_batching="vmap") for s in range(2)]
    pop = population(configs, [6, 6])
    cfg = pop.config
    replay = PopulationReplay(
        2,
        200,
        K=cfg.spr_steps,
        n_step=cfg.n_step,
        seeds=[0, 1],
        goal_window=3 if ssl == "all" else 0,
    )
    pop.host_checks = replay.tree.host_checks = False
    rng = np.random.default_rng(0)
    for t in range(40):
        append_random_row(replay, rng, first=t == 0)
    assert replay.ready()
    replay.set_beta(0.4)
    learn_step(pop, replay)
    captured = trace(lambda: learn_step(pop, replay))
    for beta in (0.5, 0.6):
        append_random_row(replay, rng)
        replay.set_beta(beta)
        assert_replays(captured, trace(lambda: learn_step(pop, replay)))
    # The weights follow the device beta: a replay of the captured step would too.
    replay.set_beta(1.0)
    batch = replay.sample_at_beta(cfg.batch_size)
    assert float(batch.weights.max()) == 1.0 and float(batch.weights.min()) < 1.0


@pytest.mark.parametrize("objective", ["sgi", "atc"])
def test_a_pretraining_step_is_replayable(objective, tmp_path):
    """The pretraining step `GraphedStep` captures (host checks off as on a GPU) does the same
    work on the same tensors at every call, for SGI's losses and ATC's."""
    from conftest import moving_dot_store

    from sgi_lab.config import PretrainConfig, build_config
    from sgi_lab.data import TransitionStore
    from sgi_lab.train.pretrain_step import build_state, make_sampler, train_step
    from sgi_lab.train.pretrain_step import device_batch as _to_device

    store = moving_dot_store(tmp_path / "dot", rows=300, num_actions=6)
    store = store if isinstance(store, TransitionStore) else TransitionStore(store)
    values = {"encoder": "nature", "batch_size": 4, "prefetch": 0, "cpu_amp": False}
    if objective == "atc":
        values.update(atc_weight=1.0, atc_sequences=2)
        values.update(spr_coefficient=0.0, goal_weight=0.0, inverse_weight=0.0)  # ATC alone
    config = build_config(PretrainConfig, values)
    state = build_state(config, store.num_actions, torch.device("cpu"))
    state.model.train()
    sampler = make_sampler(config, store)
    batch = _to_device(sampler.sample(), torch.device("cpu"))
    sampler.close()
    check_replayable(lambda: train_step(config, state, batch, host_checks=False), calls=3)
    with pytest.raises(AssertionError, match="host synchronisation"):
        check_replayable(lambda: train_step(config, state, batch))


@pytest.mark.parametrize("first_after_terminal", [False, True])
def test_appending_a_row_is_replayable(first_after_terminal):
    """The append a CUDA graph captures (`PopulationReplay._write_row`) reads the row position
    from device state: consecutive rows, episode starts and terminals among them, trace alike
    (also where the row after a terminal starts a stack, the authors' env protocol)."""
    from sgi_lab.data.population_replay import PopulationReplay
    from sgi_lab.runtime.graphs import assert_replays

    replay = PopulationReplay(
        3, 50, K=2, n_step=3, seeds=[0, 1, 2], first_after_terminal=first_after_terminal
    )
    replay.tree.host_checks = False
    rng = np.random.default_rng(0)

    def row(first, terminal):
        return (
            torch.from_numpy(rng.integers(0, 255, (3, 84, 84), dtype=np.uint8)),
            torch.from_numpy(rng.integers(0, 6, 3)),
            torch.from_numpy(rng.normal(size=3).astype(np.float32)),
            torch.tensor(terminal),
            torch.tensor(first),
        )

    static = row([True] * 3, [False] * 3)  # a graph's static inputs, refilled for each row
    replay._write_row(*static)

    def write(first, terminal):
        for target, value in zip(static, row(first, terminal), strict=True):
            target.copy_(value)
        return trace(lambda: replay._write_row(*static))

    captured = write([False] * 3, [False] * 3)
    for first, terminal in (
        ([False, True, False], [True, False, False]),
        ([False] * 3, [False] * 3),
        ([True] * 3, [False] * 3),
    ):
        assert_replays(captured, write(first, terminal), "a later row")
    assert int(replay.position) == 5
    assert replay.firsts[:, 3].tolist() == [first_after_terminal, False, False]
