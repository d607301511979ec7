"""The one writer of the project's standalone SVG figures (they sit beside a study's Markdown in
git and render on GitHub): each figure carries its kind's mark, and a file is written, atomically,
only where nothing is or where a figure of that kind was: a user's file of the same name is never
replaced."""

from __future__ import annotations

import os
from pathlib import Path

from sgi_lab.base.files import atomic_write_text, check_ours

__all__ = ["write_svg"]


def write_svg(path: str | os.PathLike, text: str, mark: str, what: str) -> Path:
    """``text`` (an SVG holding ``mark``) written to ``path`` atomically, only over a file that
    holds ``mark`` too.

    Raises:
        FileExistsError: ``path`` holds something else, ``what`` named (it is left as it is).
    """
    path = Path(path)
    check_ours(path, mark, what)
    atomic_write_text(path, text)
    return path
