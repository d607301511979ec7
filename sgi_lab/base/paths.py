"""Messages about paths a person typed: a missing file or folder with the closest names beside it.

Low in the house (nothing of sgi_lab imported) so that configs, stores and the command line can
all say "did you mean".
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["close_names", "did_you_mean", "name_hint"]


def close_names(name: str, candidates: list[str], n: int = 3) -> list[str]:
    """The candidates closest to ``name`` (difflib, case-insensitive), best first."""
    lowered = {c.lower(): c for c in candidates}
    return [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), n, 0.6)]


def name_hint(
    name: str, candidates: Sequence[str], aliases: Mapping[str, Sequence[str]] | None = None
) -> str:
    """``"did you mean A or B? "`` for a ``name`` that is none of ``candidates``: those spelled
    closest (`close_names`), else those an alias spelled close to it stands for (``aliases``:
    ``{"from scratch": [...]}``, said in brackets: ``scrtch`` -> ``minatar_none (from
    scratch)``); empty when neither."""
    close = close_names(name, list(candidates))
    if close:
        return f"did you mean {' or '.join(close)}? "
    for alias in close_names(name, [a for a, meant in (aliases or {}).items() if meant]):
        meant = list(dict.fromkeys(aliases[alias]))
        return f"did you mean {' or '.join(meant)} ({alias})? "
    return ""


def did_you_mean(path: str | os.PathLike, what: str = "folder") -> str:
    """``"<path>: no such <what>"``, with the closest existing names where it was looked for
    (``"; did you mean outputs/runs/pretrain__sgi_m__Pong__s0?"``): the first missing part of
    the path is matched against its parent's entries."""
    path = Path(path)
    message = f"{path}: no such {what}"
    parent, missing = path.parent, path.name
    while not parent.is_dir():
        if parent == parent.parent:
            return message
        parent, missing = parent.parent, parent.name
    try:
        names = sorted(p.name for p in parent.iterdir() if not p.name.startswith("."))
    except OSError:
        return message
    close = close_names(missing, names)
    if close:
        return message + f"; did you mean {' or '.join(str(parent / c) for c in close)}?"
    return message
