"""``sgi-lab`` command line: collect, import, info, pretrain, finetune, evaluate, report, run, sweep."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str):
    def register(fn):
        COMMANDS[name] = fn
        return fn

    return register


# -- data --------------------------------------------------------------------------------------


@command("collect")
def _collect(args: argparse.Namespace) -> int:
    from sgi_lab.data.collect import collect_random

    store = collect_random(
        args.game,
        args.steps,
        args.out,
        seed=args.seed,
        hold_p=args.hold_p,
        chunk_size=args.chunk_size,
        overwrite=args.overwrite,
        full_action_space=args.full_action_space,
        terminal_on_life_loss=args.terminal_on_life_loss,
    )
    print(json.dumps(store.summary(), indent=2))
    return 0


@command("import")
def _import(args: argparse.Namespace) -> int:
    from sgi_lab.data.dqn_replay import import_dqn_replay

    checkpoints = [int(c) for c in args.checkpoints.split(",") if c.strip()]
    store = import_dqn_replay(
        args.src,
        args.game,
        checkpoints,
        args.samples,
        args.out,
        overwrite=args.overwrite,
    )
    print(json.dumps(store.summary(), indent=2))
    return 0


@command("info")
def _info(args: argparse.Namespace) -> int:
    from sgi_lab.data import TransitionStore

    print(json.dumps(TransitionStore(args.store).summary(), indent=2))
    return 0


# -- parser ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sgi-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("collect", help="collect an offline dataset into a TransitionStore")
    p.add_argument("policy", choices=["random"], help="the paper's Random dataset policy")
    p.add_argument("--game", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--hold-p", type=float, default=1 / 3, help="Geometric hold parameter")
    p.add_argument("--chunk-size", type=int, default=100_000)
    p.add_argument("--full-action-space", action="store_true")
    p.add_argument("--terminal-on-life-loss", action="store_true")
    p.add_argument("--overwrite", action="store_true")

    p = sub.add_parser("import", help="import external data into a TransitionStore")
    p.add_argument("format", choices=["dqn-replay"])
    p.add_argument("--src", type=Path, required=True, help="folder of Dopamine checkpoint files")
    p.add_argument("--game", required=True)
    p.add_argument("--checkpoints", required=True, help="comma-separated numbers, e.g. 1,25,50")
    p.add_argument("--samples", type=int, default=None, help="transitions from each checkpoint")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--overwrite", action="store_true")

    p = sub.add_parser("info", help="print a store's summary")
    p.add_argument("store", type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args) or 0
    except (ValueError, RuntimeError, FileExistsError, FileNotFoundError) as exc:
        print(f"sgi-lab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"sgi-lab {args.command}: interrupted (re-run the same command to resume)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
