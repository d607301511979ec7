"""The CUDA path: the same numbers as on the CPU, and pretraining/finetuning end to end on a GPU.

Skipped where no GPU is present (the development machine and CI); run on a GPU machine with
``pytest tests/runtime/test_cuda.py``. Runs made on the GPU must load on a CPU-only machine.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from conftest import moving_dot_store

import sgi_lab.train.finetune as ft
from sgi_lab.augment.ops import augment
from sgi_lab.base.files import read_jsonl
from sgi_lab.config import FinetuneConfig, PretrainConfig, build_config
from sgi_lab.data.replay import PrioritizedReplay
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import load_checkpoint
from sgi_lab.runs.folder import RunDir
from sgi_lab.runtime.device import autocast_reaches_vmap
from sgi_lab.train.acting import act, acting_q, forward_graph
from sgi_lab.train.population import Population
from sgi_lab.train.pretrain import load_pretrained_model, pretrain
from sgi_lab.train.transfer import model_args_for
from sgi_lab.train.update import learn, stage, update

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

PRETRAIN = dict(encoder="nature", batch_size=16, log_every=5, checkpoint_every=10, prefetch=2)
FINETUNE = {
    "encoder": "nature",
    "batch_size": 8,
    "updates_per_step": 1,
    "spr_steps": 2,
    "n_step": 3,
    "learning_starts": 20,
    "eps_steps": 21,
    "eval_episodes": 2,
    "eval_envs": 2,
    "eval_max_frames": 200,
    "log_every": 10,
    "checkpoint_every": 30,
    "device": "cuda",
}


@pytest.fixture(scope="module")
def dot_store(tmp_path_factory):
    # Pong's 6 actions, so that a run pretrained on it finetunes on Pong.
    return moving_dot_store(tmp_path_factory.mktemp("data") / "dot", rows=1200, num_actions=6)


@pytest.fixture
def no_tf32():
    """True fp32 on the GPU for the test (restored after; monkeypatch cannot undo these)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.usefixtures("no_tf32")
@pytest.mark.parametrize("encoder", ["nature", "resnet"])
def test_fp32_forward_matches_the_cpu(encoder):
    torch.manual_seed(0)
    model = SGIModel(encoder, 6, goal_head=True, inverse_model=True).eval()
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        z_cpu = model.encode(x)
        q_cpu = model.q_logits(z_cpu)
        gpu = model.cuda()
        z_gpu = gpu.encode(x.cuda())
        q_gpu = gpu.q_logits(z_gpu)
    torch.testing.assert_close(z_gpu.cpu(), z_cpu, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(q_gpu.cpu(), q_cpu, rtol=1e-3, atol=1e-3)


def test_augmentation_on_the_gpu_keeps_shape_range_and_seed():
    x = torch.randint(0, 256, (6, 3, 4, 84, 84), dtype=torch.uint8, device="cuda")
    g = torch.Generator(device="cuda")
    out = [augment(x, g.manual_seed(3)) for _ in range(2)]
    assert out[0].device.type == "cuda" and out[0].shape == x.shape
    torch.testing.assert_close(out[0], out[1])  # same seed, same draws
    assert not torch.equal(out[0], x.float())  # something was shifted or jittered


def test_pretraining_on_the_gpu_resumes_and_loads_on_the_cpu(dot_store, tmp_path):
    config = build_config(PretrainConfig, {**PRETRAIN, "steps": 20, "device": "cuda"})

    def crash(row):
        if row["step"] == 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pretrain(config, dot_store, tmp_path / "run", progress=False, callback=crash)
    path = pretrain(config, dot_store, tmp_path / "run", progress=False)
    rows = RunDir(tmp_path / "run").read_metrics()
    assert [r["step"] for r in rows] == [5, 10, 15, 20]
    for key in ("losses/spr", "losses/goal", "losses/inverse", "losses/total"):
        assert all(np.isfinite(r[key]) for r in rows), key
    payload = load_checkpoint(path, kind="pretrained_model")  # map_location cpu
    assert all(t.device.type == "cpu" for t in payload["model"].values())
    model = load_pretrained_model(tmp_path / "run")
    assert next(model.parameters()).device.type == "cpu"


def test_finetuning_on_the_gpu_from_a_gpu_pretraining_run(dot_store, tmp_path):
    pre = build_config(PretrainConfig, {**PRETRAIN, "steps": 5, "device": "cuda"})
    pretrain(pre, dot_store, tmp_path / "pre", progress=False)
    config = FinetuneConfig(**FINETUNE, steps=60, pretrained=str(tmp_path / "pre"))

    def crash(step, agent):
        if step == 45:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        ft.finetune(config, tmp_path / "run", progress=False, callback=crash)
    run = ft.finetune(config, tmp_path / "run", progress=False)
    assert run.status()["state"] == "finished"
    assert run.evaluation["episodes"] == 2
    rows = [r for r in read_jsonl(run.metrics_path) if "losses/total" in r]
    assert rows and all(np.isfinite(r["losses/total"]) for r in rows)
    ckpt = load_checkpoint(run.checkpoints()[-1], kind="finetune")
    assert all(t.device.type == "cpu" for t in ckpt["model"].values())


def test_all_ssl_update_on_the_gpu():
    config = FinetuneConfig(**{**FINETUNE, "ssl": "all"}, steps=100)
    torch.manual_seed(0)
    model = SGIModel(**model_args_for(config, 6))
    pop = Population.build([config], [model], loaded=(), device="cuda")
    replay = PrioritizedReplay(100, K=2, n_step=3, goal_window=50)
    rng = np.random.default_rng(0)
    first = True
    for i in range(80):
        frame = rng.integers(0, 255, (84, 84), dtype=np.uint8)
        replay.append(frame, int(rng.integers(6)), float(i % 7 == 0), i % 40 == 39, first)
        first = i % 40 == 39
    batch, weights = replay.sample(8, 0.4)
    logs, _ = update(pop, stage(pop, [batch], [weights]))
    for key in ("losses/rl", "losses/spr", "losses/goal_rl", "losses/inverse"):
        assert torch.isfinite(logs[key]).all().item(), key


@pytest.mark.usefixtures("no_tf32")
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16"])
def test_population_update_on_the_gpu_equals_separate_updates(amp):
    """vmap'd update of 3 agents (two action counts) against populations of one, on CUDA, in
    the precision the population runs: bf16 only where autocast reaches inside vmap
    (`autocast_reaches_vmap`; with torch 2.11 on an H100 it did not, so fp32)."""
    from population_helpers import fake_batch, make_config

    configs = [
        make_config(seed=s, encoder="resnet", device="cuda", amp=amp, cpu_amp=False)
        for s in range(3)
    ]
    actions = (6, 4, 6)
    models = []
    for c, a in zip(configs, actions):
        torch.manual_seed(c.seed)
        models.append(SGIModel(**model_args_for(c, a)))
    batches = [fake_batch(c, a, i) for i, (c, a) in enumerate(zip(configs, actions))]
    weights = [np.ones(c.batch_size, np.float32) for c in configs]
    together = Population.build(configs, models, loaded=(), device="cuda")
    update(together, stage(together, batches, weights))
    tol = {"rtol": 2e-2, "atol": 2e-3} if together.update_amp else {"rtol": 1e-3, "atol": 1e-4}
    assert together.update_amp == (amp and autocast_reaches_vmap("cuda"))
    for i, (c, a) in enumerate(zip(configs, actions)):
        torch.manual_seed(c.seed)
        c = dataclasses.replace(c, amp=together.update_amp)
        alone = Population.build([c], [SGIModel(**model_args_for(c, a))], (), "cuda")
        update(alone, stage(alone, [batches[i]], [weights[i]]))
        mine, theirs = together.agent_state(i), alone.agent_state(0)
        for k in theirs:
            torch.testing.assert_close(mine[k], theirs[k], msg=k, **tol)


@pytest.mark.usefixtures("no_tf32")
def test_cuda_graph_acting_equals_eager_acting():
    """Acting's forward replayed from a graph captured at the first step, with updates in
    between (weights and noise change in place), gives the eager forward's Q values, and
    acting with graphs picks the actions acting without them picks."""
    from population_helpers import fake_batch, make_config, population

    def run(graphs: bool) -> np.ndarray:
        configs = [
            make_config(seed=s, device="cuda", amp=False, cuda_graphs=graphs) for s in range(2)
        ]
        pop = population(configs, [6, 6], device="cuda")
        assert pop.uses_forward_graphs == graphs
        rng, chosen = np.random.default_rng(0), []
        for step in range(8):
            obs = rng.integers(0, 255, (2, 4, 84, 84), dtype=np.uint8)
            x = torch.from_numpy(obs).cuda()
            replayed = forward_graph(pop, "q", lambda x: acting_q(pop, x), x)
            torch.testing.assert_close(replayed, acting_q(pop, x), rtol=1e-5, atol=1e-5)
            greedy = [np.random.default_rng(i) for i in range(2)]
            chosen.append(act(pop, obs, [0.0, 0.0], greedy))
            batches = [fake_batch(c, 6, 100 * step + i) for i, c in enumerate(configs)]
            update(pop, stage(pop, batches, [np.ones(c.batch_size, np.float32) for c in configs]))
        return np.stack(chosen)

    assert np.array_equal(run(True), run(False))


@pytest.mark.usefixtures("no_tf32")
def test_cuda_graph_learning_steps_equal_eager_steps():
    """Sample -> update -> priorities captured as one graph after three eager steps, with rows
    appended and beta moving between steps: the same parameters and priorities as eager steps
    all along (fp32), from the same replays and random streams."""
    from population_helpers import append_random_row, make_config, population

    from sgi_lab.data.population_replay import PopulationReplay

    def run(graphs: bool) -> tuple[Population, PopulationReplay]:
        configs = [
            make_config(seed=s, device="cuda", amp=False, cuda_graphs=graphs) for s in range(2)
        ]
        pop = population(configs, [6, 6], device="cuda")
        cfg = pop.config
        replay = PopulationReplay(
            2, 300, K=cfg.spr_steps, n_step=cfg.n_step, seeds=[0, 1], device="cuda"
        )
        rng = np.random.default_rng(0)
        for t in range(60):
            append_random_row(replay, rng, first=t == 0)
        for step in range(8):  # 3 eager warm-ups, the capture, 4 replays
            learn(pop, replay, beta=0.4 + 0.05 * step)
            append_random_row(replay, rng)
        torch.cuda.synchronize()
        return pop, replay

    (graphed, graphed_replay), (eager, eager_replay) = run(True), run(False)
    assert graphed.uses_cuda_graph and not eager.uses_cuda_graph
    for i in range(2):
        for k, v in eager.agent_state(i).items():
            torch.testing.assert_close(graphed.agent_state(i)[k], v, rtol=1e-4, atol=1e-5, msg=k)
    torch.testing.assert_close(
        graphed_replay.tree.tree, eager_replay.tree.tree, rtol=1e-4, atol=1e-6
    )
    torch.testing.assert_close(graphed_replay.max_priority, eager_replay.max_priority)


def test_cuda_graph_appends_equal_eager_appends():
    """Rows appended through a graph (2 eager, then replays; the position is device state)
    leave the replay exactly as eager appends do."""
    from population_helpers import append_random_row

    from sgi_lab.data.population_replay import PopulationReplay

    replays = []
    for graphs in (True, False):
        replay = PopulationReplay(3, 64, K=2, n_step=3, device="cuda", cuda_graphs=graphs)
        assert (replay._append_graph is not None) == graphs
        rng = np.random.default_rng(0)
        for t in range(40):
            append_random_row(replay, rng, first=t == 0, first_prob=0.05, terminal_prob=0.1)
        torch.cuda.synchronize()
        replays.append(replay)
    graphed, eager = replays
    assert graphed.size == eager.size == 40 and int(graphed.position) == 40
    for name in ("frames", "actions", "rewards", "terminals", "firsts", "row_episode_start",
                 "episode_of_row", "episode_end", "episodes", "positive_leaves"):  # fmt: skip
        assert torch.equal(getattr(graphed, name), getattr(eager, name)), name
    assert torch.equal(graphed.tree.tree, eager.tree.tree)


def test_graphed_pretraining_steps_equal_eager_steps(dot_store):
    """Pretraining with cuda_graphs (three eager warm-up steps, capture, replays) gives the
    parameters eager steps give, with the same augmentation and goal random streams."""
    from sgi_lab.train.pretrain_step import GraphedStep, build_state, make_sampler
    from sgi_lab.train.pretrain_step import device_batch as _to_device
    from sgi_lab.train.pretrain_step import train_step as pretrain_step

    store = dot_store  # moving_dot_store returns the opened store
    states = []
    for graphs in (True, False):
        config = build_config(
            PretrainConfig,
            {**PRETRAIN, "device": "cuda", "amp": False, "cuda_graphs": graphs, "prefetch": 0},
        )
        state = build_state(config, store.num_actions, torch.device("cuda"))
        state.model.train()
        state.target.train()
        sampler = make_sampler(config, store)
        step = (
            GraphedStep(config, state)
            if graphs
            else functools.partial(pretrain_step, config, state)
        )
        for _ in range(7):
            step(_to_device(sampler.sample(), torch.device("cuda")))
        sampler.close()
        states.append({k: v.detach().cpu() for k, v in state.model.state_dict().items()})
    for k, v in states[1].items():
        torch.testing.assert_close(states[0][k], v, rtol=1e-4, atol=1e-5, msg=k)
