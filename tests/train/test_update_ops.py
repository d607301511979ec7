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
