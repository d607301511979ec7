"""The update's passes rewritten to dispatch fewer operators do what the passes they replace
did: the same noise left for acting, the same losses, gradients and state."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from population_helpers import fake_batch, make_config, population

import sgi_lab.train.update as update_module
from sgi_lab.train.update import stage, update

pytestmark = pytest.mark.usefixtures("one_thread")


def test_acting_keeps_the_updates_online_noise(monkeypatch):
    """After an update every agent's noise buffers hold the noise the update's online network
    used (one multi-tensor copy)."""
    configs = [make_config(seed=s, population_batching="vmap") for s in range(2)]
    pop = population(configs, [6, 4])
    seen = {}
    original = update_module.update_inputs

    def spy(p, staged):
        seen["x"] = original(p, staged)
        return seen["x"]

    monkeypatch.setattr(update_module, "update_inputs", spy)
    batches = [fake_batch(c, 6, i) for i, c in enumerate(configs)]
    update(pop, stage(pop, batches, [np.ones(c.batch_size, np.float32) for c in configs]))
    noise = seen["x"].noise_online
    assert noise and all(".eps_" in k for k in noise)
    for k, v in noise.items():
        assert torch.equal(pop.online[k], v), k


@pytest.mark.parametrize("ssl", ["spr", "all"])
def test_the_lean_update_equals_the_cpus(ssl):
    """With `lean_kernels` (a GPU's update: the online encoder and Q head over s_t and the
    bootstrap state in one pass, `online_pass`; renormalize's closed-form gradient) the update
    gives the same losses, priorities and new weights as the CPU's."""
    configs = [
        make_config(seed=s, encoder="nature", ssl=ssl, population_batching="vmap") for s in range(2)
    ]
    batches = [fake_batch(c, 6, 10 + i) for i, c in enumerate(configs)]
    weights = [np.linspace(0.5, 1.0, c.batch_size).astype(np.float32) for c in configs]

    def one_update(lean: bool):
        pop = population(configs, [6, 4])
        pop.lean_kernels = lean
        assert update_module.shared_online_pass(pop) == lean
        stats, priorities = update(pop, stage(pop, batches, weights))
        return pop, stats, priorities

    assert update_module.lean_kernels(population(configs, [6, 4]))  # the default, a CPU's too
    off = [make_config(seed=s, encoder="nature", ssl=ssl, lean_kernels=False) for s in range(2)]
    assert not update_module.lean_kernels(population(off, [6, 4]))  # config lean_kernels: false
    pop, stats, priorities = one_update(True)
    ref_pop, ref_stats, ref_priorities = one_update(False)
    torch.testing.assert_close(priorities, ref_priorities, rtol=1e-5, atol=1e-6)
    for k, v in ref_stats.items():
        torch.testing.assert_close(stats[k], v, rtol=1e-5, atol=1e-6, msg=k)
    for k, v in ref_pop.online.items():
        torch.testing.assert_close(pop.online[k], v, rtol=1e-5, atol=1e-6, msg=k)
