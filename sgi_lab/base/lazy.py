"""A package that imports each public name's module on first use (PEP 562).

Three packages (`sgi_lab.experiments`, `sgi_lab.probes`, `sgi_lab.viz`) re-export names whose
modules import torch, scipy, pandas or plotly; importing them all at package import made every
``--help`` pay for them. Each package keeps a ``{name: module}`` table and takes its module
``__getattr__`` and ``__dir__`` from `lazy_exports`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any


def lazy_exports(
    package: str,
    homes: Mapping[str, str],
    namespace: MutableMapping[str, Any],
    public: Sequence[str],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``NAME`` is imported from
    ``package.homes[NAME]`` when first asked for, then kept in ``namespace`` (the package's
    globals), so later lookups never reach ``__getattr__``."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__
