"""``sgi-lab collect exploratory``: the Exploratory dataset (SGI-E) from the command line.

    sgi-lab collect exploratory --game breakout --steps 6000000 --envs 32 --seed 0 --out DIR

Settings come from ``--params`` (default ``params/collect/exploratory.yaml``, Burda et al.'s;
for a MinAtar game ``params/collect/exploratory_minatar.yaml``, the same with its envs in process),
then ``--set KEY=VALUE``, then ``--envs`` and the collect flags given explicitly. Re-running the
same command resumes an interrupted collection.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from pathlib import Path

from sgi_lab.config import ExploreConfig, load_config, parse_overrides
from sgi_lab.envs import is_minatar
from sgi_lab.launch import collect_agent

DEFAULT_PARAMS = Path("params/collect/exploratory.yaml")
MINATAR_PARAMS = Path("params/collect/exploratory_minatar.yaml")


def add_arguments(parser: argparse.ArgumentParser, random_handler: Callable[..., int]) -> None:
    """Add the exploratory options (and `collect_agent`'s) to the ``collect`` parser and route
    it through `collect`; ``random_handler`` (the CLI's own) collects the Random policy."""
    collect_agent.add_arguments(parser)
    parser.add_argument("--envs", type=int, default=None, help="exploratory: parallel envs")
    parser.add_argument(
        "--params", type=Path, default=None, help=f"exploratory: settings ({DEFAULT_PARAMS})"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="exploratory: override"
    )
    parser.set_defaults(handler=functools.partial(collect, random_handler=random_handler))


def explore_config(args: argparse.Namespace):
    """The ExploreConfig the command line asks for (params file < --set < explicit flags)."""

    overrides = parse_overrides(args.set)
    if args.envs is not None:
        overrides["num_envs"] = args.envs
    if getattr(args, "chunk_size", 100_000) != 100_000:
        overrides["chunk_size"] = args.chunk_size
    if getattr(args, "full_action_space", False):
        overrides["full_action_space"] = True
    if getattr(args, "terminal_on_life_loss", False):
        overrides["terminal_on_life_loss"] = True
    default = MINATAR_PARAMS if is_minatar(getattr(args, "game", "")) else DEFAULT_PARAMS
    params = args.params or default
    return load_config(ExploreConfig, params, overrides)


def collect(args: argparse.Namespace, random_handler: Callable[..., int]) -> int:
    """``sgi-lab collect POLICY``: ``exploratory`` here, ``agent`` by `collect_agent`,
    ``random`` by the CLI's own handler."""
    if args.policy == "agent":
        return collect_agent.collect(args)
    collect_agent.refuse_agent_options(args)
    if args.policy != "exploratory":
        return random_handler(args)
    if getattr(args, "env_protocol", "dopamine") != "dopamine":  # refused, never ignored
        raise ValueError(
            f"--env-protocol {args.env_protocol}: only `collect random` plays the authors' "
            f"env; `collect {args.policy}` plays gymnasium's (dopamine)"
        )

    # lazy: the agent's module imports torch, which `--help` and the parser must not pay for
    from sgi_lab.exploratory.collector import collect_exploratory

    store = collect_exploratory(
        args.game,
        args.steps,
        args.out,
        seed=args.seed,
        config=explore_config(args),
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    print(json.dumps(store.summary(), indent=2))
    return 0
