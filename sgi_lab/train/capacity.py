"""How many finetuning agents fit one device, and how a larger set is split into populations.

A row of the paper is 26 games x 10 seeds = 260 runs; at ~1.1-1.7 GB per agent (replay, networks,
Adam, one update's activations) that is 290-440 GB, more than any one device holds. So a
set of (game, seed) pairs larger than what fits is trained as several populations, one after
another on one device (`sgi-lab finetune --max-agents`) or as separate tasks of an experiment
(`max_agents` in its file), each a product of some games and some seeds so that it is one
`sgi-lab finetune --game ... --seed ...` call writing the same run folders.

The per-agent estimate (`agent_bytes`) counts the networks and Adam from the model's own
tensors, the replay from the config's steps, and adds the update's working memory measured per
encoder on a CPU in fp32 (benchmarks/README.md, "Populations"); on a GPU in bf16 it is smaller,
so the estimate errs on the safe side.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import torch

from sgi_lab.config import FinetuneConfig
from sgi_lab.nets import SGIModel
from sgi_lab.train.transfer import model_args_for

# One update's working memory per agent at batch 32 (measured, population_memory.py, CPU fp32).
# MinAtar's: 37 MB of peak RSS for updates of the `minatar` encoder, hidden 128, batch 32, K 5
# (2-core Intel Xeon, 2026-11-26); `minatar_l` counted at twice that, not measured.
UPDATE_BYTES_AT_BATCH_32 = {
    "nature": 264e6,
    "resnet": 810e6,
    "resnet_l": 1620e6,
    "minatar": 40e6,
    "minatar_l": 80e6,
}
# Replay bytes per stored step: an 84x84 uint8 frame plus per-row arrays and the sum tree
# (711 MB for 100k steps, measured); a frame of another observation spec costs its own bytes.
REPLAY_BYTES_PER_STEP = 7_110
REPLAY_ROW_BYTES = REPLAY_BYTES_PER_STEP - 84 * 84
HEADROOM = 0.85  # of the free memory a population may plan to use
MEMORY_SHARE_ENV = "SGI_LAB_MEMORY_SHARE"
"""Environment variable: the part (0, 1] of the free memory this process may plan for, set by
experiments that run several tasks on one machine (`sgi_lab.experiments`)."""


def agent_bytes(config: FinetuneConfig, num_actions: int = 18) -> dict[str, float]:
    """Estimated bytes one agent of ``config`` holds: ``networks`` (online, SPR target and a
    separate Q target if any), ``adam`` (two moments of the trained parameters), ``replay``
    (``config.steps`` rows), ``update`` (working memory) and their ``total``."""
    with torch.device("meta"):
        model = SGIModel(**model_args_for(config, num_actions))
    params = sum(p.numel() * 4 for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    separate_q = not (config.target_tau == 1.0 and config.target_update_period == 1)
    networks = (params + buffers) * (3 if separate_q else 2)
    adam = 2 * params
    spec = config.observation_spec  # one frame per stored step (stacks are rebuilt when sampled)
    replay = (spec.channels * spec.height * spec.width + REPLAY_ROW_BYTES) * config.steps
    update = UPDATE_BYTES_AT_BATCH_32.get(config.encoder, 1620e6) * config.batch_size / 32
    total = networks + adam + replay + update
    return {"networks": networks, "adam": adam, "replay": replay, "update": update, "total": total}


def free_bytes(device: torch.device | str) -> int:
    """Memory free for a new population: the GPU's free memory, or the host's available memory
    (``MemAvailable``) on a CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def max_agents(config: FinetuneConfig, device: torch.device | str, free: int | None = None) -> int:
    """The largest population of ``config`` agents that fits ``HEADROOM`` of the free memory,
    times this process's share (`memory_share`), at least 1."""
    free = free_bytes(device) if free is None else free
    return max(1, int(free * HEADROOM * memory_share() // agent_bytes(config)["total"]))


def memory_share() -> float:
    """This process's part of the free memory: ``$SGI_LAB_MEMORY_SHARE`` (default 1).

    Raises:
        ValueError: the variable is not a number in (0, 1].
    """
    text = os.environ.get(MEMORY_SHARE_ENV, "1")
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0 < share <= 1:
        raise ValueError(f"{MEMORY_SHARE_ENV}={text!r}: expected a number in (0, 1]")
    return share


def split_population(
    games: Sequence[str], seeds: Sequence[int], limit: int
) -> list[tuple[list[str], list[int]]]:
    """Games x seeds as populations of at most ``limit`` agents, each a product of some games
    and some seeds, sizes as even as the split allows, every pair exactly once, in games-major
    order within each.

    >>> split_population(["a", "b", "c"], [0, 1], 4)
    [(['a', 'b', 'c'], [0]), (['a', 'b', 'c'], [1])]
    >>> split_population(["a", "b", "c"], [0], 2)
    [(['a', 'b'], [0]), (['c'], [0])]
    """
    games, seeds = list(games), list(seeds)
    if limit < 1:
        raise ValueError(f"max_agents must be at least 1, got {limit}")
    if len(games) * len(seeds) <= limit:
        return [(games, seeds)]
    if len(games) <= limit:  # every game together, seeds in groups
        return [(games, group) for group in _even_groups(seeds, limit // len(games))]
    return [(group, [s]) for s in seeds for group in _even_groups(games, limit)]


def split_agents(items: Sequence[Any], limit: int) -> list[list[Any]]:
    """Any list of agents (a shared population's, where agents are not games x seeds) as
    consecutive populations of at most ``limit``, sizes differing by at most one.

    >>> split_agents(["a", "b", "c", "d", "e"], 2)
    [['a', 'b'], ['c', 'd'], ['e']]
    """
    if limit < 1:
        raise ValueError(f"max_agents must be at least 1, got {limit}")
    return _even_groups(list(items), limit) if items else []


def _even_groups(items: list, most: int) -> list[list]:
    """``items`` in consecutive groups of at most ``most``, sizes differing by at most one."""
    count = math.ceil(len(items) / most)
    size, extra = divmod(len(items), count)
    groups, start = [], 0
    for i in range(count):
        end = start + size + (i < extra)
        groups.append(items[start:end])
        start = end
    return groups
