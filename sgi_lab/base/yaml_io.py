"""Reading YAML a person wrote (params files, experiment files): safe, strict and bounded.

`load_yaml` is ``yaml.safe_load`` with two refusals a hand-written file needs:

- a **duplicate key** in a mapping (PyYAML silently keeps the last one) is named with its line;
- a document whose **aliases expand** past `MAX_NODES` nodes (a "billion laughs" bomb: nine
  anchors of nine aliases each are 10^9 strings once expanded) is refused while it is still a
  graph of shared nodes, in microseconds, instead of hanging whatever walks or prints it later.
  Ordinary anchors (``set: &tiny {...}`` then ``set: *tiny``) stay allowed.

`short_repr` cuts a value quoted in a message to a few dozen characters, at bounded cost.

`front_matter` writes the other way: a card's YAML header (a model's or a dataset's README.md).

Low in the house: nothing of sgi_lab imported.
"""

from __future__ import annotations

import os
import reprlib
from pathlib import Path
from typing import Any

import yaml

from sgi_lab.base.errors import SgiLabError

__all__ = ["MAX_NODES", "YAMLInputError", "load_yaml", "short_repr"]

MAX_NODES = 100_000
"""Most nodes a document may hold with its aliases expanded (params files hold a few hundred)."""

SHOWN_CHARS = 60
"""Longest value quoted in a message."""


class YAMLInputError(SgiLabError, ValueError):
    """A YAML text is malformed, has a duplicate key, or expands past `MAX_NODES` nodes."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = SHOWN_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3


def short_repr(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters; the work is bounded too (nested
    containers are elided, `reprlib`), so a huge value costs no more than a small one."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class StrictSafeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses duplicate mapping keys and alias bombs (`load_yaml`)."""

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        _check_expanded_size(node, self.name)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            _check_duplicate_keys(self, node)
        return super().construct_mapping(node, deep=deep)


def _check_duplicate_keys(loader: StrictSafeLoader, node: yaml.MappingNode) -> None:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # '<<: *base' merges keys that explicit ones may override, by design
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node.start_mark.line + 1)
        except TypeError:
            continue  # an unhashable key: SafeConstructor names it itself
        if first != key_node.start_mark.line + 1:
            raise YAMLInputError(
                f"{loader.name}: line {key_node.start_mark.line + 1}: duplicate key "
                f"{short_repr(key)} (first at line {first})"
            )


def _check_expanded_size(root: yaml.Node | None, source: str) -> None:
    """Refuse a node graph whose tree (aliases expanded) has more than `MAX_NODES` nodes, or
    that holds itself (a recursive alias). Each shared node is sized once: linear time."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise YAMLInputError(f"{source}: a recursive alias (a value that contains itself)")
        in_progress.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        in_progress.discard(key)
        sizes[key] = total
        if total > MAX_NODES:
            raise YAMLInputError(
                f"{source}: aliases expand to more than {MAX_NODES:,} values (an alias bomb?); "
                "refused"
            )
        return total

    if root is not None:
        size(root)


def load_yaml(text_or_path: str | os.PathLike, source: str | None = None) -> Any:
    """Parse YAML like ``yaml.safe_load``, refusing duplicate keys and alias bombs.

    Args:
        text_or_path: the YAML text, or the path of a file holding it (a `pathlib.Path` or
            other ``os.PathLike``; a ``str`` is always text).
        source: what to call the input in messages (default: the path, or ``"<yaml>"``).

    Raises:
        YAMLInputError: one line naming ``source``: not valid YAML (with the line), a duplicate
            key (with both lines), aliases expanding past `MAX_NODES`, or a file that is not
            text.
    """
    if isinstance(text_or_path, os.PathLike):
        path = Path(text_or_path)
        source = source or str(path)
        try:
            text = path.read_text()
        except UnicodeDecodeError as exc:
            raise YAMLInputError(f"{source}: not a text file ({exc})") from None
    else:
        text = text_or_path
    source = source or "<yaml>"
    loader = StrictSafeLoader(text)
    loader.name = source
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise YAMLInputError(f"{source}: not valid YAML ({where}{exc.problem})") from None
    except yaml.YAMLError as exc:
        raise YAMLInputError(f"{source}: not valid YAML ({exc})") from None
    except RecursionError:
        raise YAMLInputError(f"{source}: nested too deeply") from None
    finally:
        loader.dispose()


def front_matter(fields: dict[str, Any]) -> str:
    """The YAML front matter a Hub card (a model's or a dataset's ``README.md``) opens with:
    ``fields`` between two ``---`` lines, in their order, no newline after the last line.

    >>> print(front_matter({"license": "mit", "tags": ["rl"]}))
    ---
    license: mit
    tags:
    - rl
    ---
    """
    return "---\n" + yaml.safe_dump(fields, sort_keys=False).strip() + "\n---"
