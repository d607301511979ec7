"""The GPU command's first shared population, measured (run.sh minatar_shared).

``agents ROOT``: expand ``params/experiments/minatar_objectives_full.yaml`` (share_populations)
and write its first shared population's agents file (Asterix + Breakout: every reduced-lr
objective, SGI naive and from scratch, 5 seeds: 110 agents) to ``ROOT/agents.yaml``, each
pretrained agent pointed at a stand-in SGI run of its game (``ROOT/pre__<game>``: speed does not
depend on which weights are loaded) and each run folder under ``ROOT/ft``. ``--agents N`` keeps
one agent of each of N configs (the CPU rehearsal).

``project ROOT JSON``: each agent's last logged agent steps/s, and the whole study's finetuning
projected from it: every shared population of the experiment (its agent-steps over the measured
population's agent-steps/s, all agents together), one after another on one GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "params" / "experiments" / "minatar_objectives_full.yaml"


def _graph(out: Path):
    # lazy: main() puts the tree on sys.path first (the device runs it from a bare checkout)
    from sgi_lab import experiments as ex

    return ex.expand(ex.load_experiment(EXPERIMENT), out)


def _shared_tasks(graph) -> list:
    return [t for t in graph.tasks if t.id.startswith("finetune/shared/")]


def write_agents(root: Path, keep: int | None) -> Path:
    """The first shared population's agents file, pointed at stand-in pretrained runs."""
    # lazy: main() puts the tree on sys.path first (the device runs it from a bare checkout)
    from sgi_lab.runs.folder import run_name, slug

    graph = _graph(root / "experiment")
    task = _shared_tasks(graph)[0]
    argv = list(task.argv)
    agents = graph.params_files[argv[argv.index("--agents") + 1]]["agents"]
    params_dir = root / "params"
    params_dir.mkdir(parents=True, exist_ok=True)
    for path, payload in graph.params_files.items():
        if Path(path).name.startswith("finetune__"):
            (params_dir / Path(path).name).write_text(yaml.safe_dump(payload, sort_keys=False))
    if keep is not None:  # the rehearsal: one agent of each of a few configs, scratch and naive too
        firsts = list({a["label"]: a for a in reversed(agents)}.values())[::-1]
        agents = (firsts[:1] + firsts[1 - keep :]) if keep > 1 else firsts[:1]
    rows = []
    for agent in agents:
        game = slug(agent["game"])
        rows.append(
            {
                **agent,
                "params": str(params_dir / Path(agent["params"]).name),
                "pretrained": None if agent["pretrained"] is None else str(root / f"pre__{game}"),
                "out": str(root / "ft" / agent["label"] / run_name(game, f"s{agent['seed']}")),
            }
        )
    path = root / "agents.yaml"
    path.write_text(yaml.safe_dump({"agents": rows}, sort_keys=False))
    labels = sorted({a["label"] for a in rows})
    games = sorted({a["game"] for a in rows})
    print(f"minatar_shared: {len(rows)} agents ({len(labels)} configs x {', '.join(games)})")
    return path


def project(root: Path, json_path: Path) -> dict:
    """Agent steps/s of the measured population and the projected study."""
    rows = {}
    for metrics in sorted((root / "ft").rglob("metrics.jsonl")):
        logged = [json.loads(line) for line in metrics.open() if "charts/sps" in line]
        if logged:
            last = logged[-1]
            rows[str(metrics.parent.relative_to(root))] = {
                k: last.get(k) for k in ("step", "charts/sps", "charts/ups")
            }
    result: dict = {"agents": rows}
    if rows:
        per_agent = statistics.median(r["charts/sps"] for r in rows.values())
        throughput = per_agent * len(rows)  # agent-steps/s of the whole population
        graph = _graph(root / "experiment")
        tasks = _shared_tasks(graph)
        total_steps = sum(t.steps for t in tasks)
        seconds = total_steps / throughput
        result.update(
            measured_agents=len(rows),
            agent_steps_per_s=per_agent,
            population_agent_steps_per_s=throughput,
            study_populations=len(tasks),
            study_agents=sum(len(t.agents) for t in tasks),
            study_agent_steps=total_steps,
            projected_minutes=seconds / 60,
        )
        print(
            f"minatar_shared: {len(rows)} agents, median {per_agent:.1f} agent steps/s "
            f"({throughput:.0f} agent-steps/s together); the study's finetuning "
            f"({result['study_agents']} agents, {len(tasks)} shared populations, "
            f"{total_steps / 1e6:.0f}M agent steps) projected at {seconds / 60:.1f} min on "
            "this device, populations one after another at this throughput (goal: 9 min)"
        )
    Path(json_path).write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("agents")
    p.add_argument("root", type=Path)
    p.add_argument("--agents", type=int, default=None)
    p = sub.add_parser("project")
    p.add_argument("root", type=Path)
    p.add_argument("json", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.what == "agents":
        write_agents(args.root, args.agents)
    else:
        project(args.root, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
