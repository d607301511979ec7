"""How a config's fields are declared, and how values reach them checked: the machinery every
config of `sgi_lab.config` shares, knowing no stage.

A field is declared with `F` (default, one-line doc, range rule) or `stage_default`; a value is
type-checked against its annotation (`check_value`), a key against the class (`check_known_keys`)
and a number against its field's range rule (`check_range`); params files and command-line
values are read as YAML (`read_params`, `parse_value`, `parse_overrides`). Every name here is
also importable from `sgi_lab.config`, where the configs are.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.paths import close_names, did_you_mean
from sgi_lab.base.yaml_io import YAMLInputError, load_yaml, short_repr


class ConfigError(SgiLabError, ValueError):
    """A params file or override is malformed: unknown key, wrong type or bad value."""


RangeCheck = Callable[[Any], "str | None"]
"""A field's own range rule: the problem with a value (``"must be positive"``), or None."""


def F(  # noqa: N802 - reads like a declaration
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    positive: bool = False,
    non_negative: bool = False,
    check: RangeCheck | None = None,
) -> Any:
    """A dataclass field with a default, a one-line doc and its range rule: ``positive`` (a
    count, interval or step size), ``non_negative`` (0 means none/off, negative is a typo) or
    any ``check`` (a value -> the problem, or None). No default: each stage gives its own
    (`stage_default`)."""
    rules: list[RangeCheck] = []
    if positive:
        rules.append(lambda v: None if v > 0 else "must be positive")
    if non_negative:
        rules.append(lambda v: None if v >= 0 else "must be >= 0")
    if check is not None:
        rules.append(check)
    return field(default=default, metadata={"doc": doc, "rules": tuple(rules)})


def stage_default(base: type, name: str, default: Any, doc: str | None = None) -> Any:
    """A stage's default for a field its base declares (type, doc and range rule stay the
    base's; ``doc`` adds what the value means in this stage)."""
    declared = base.__dataclass_fields__[name]
    metadata = dict(declared.metadata)
    if doc:
        metadata["doc"] = f"{metadata['doc']}; {doc}" if metadata["doc"] else doc
    return field(default=default, metadata=metadata)


TOP_LEVEL_KEYS = {"name", "description", "config", "game", "seed", "data", "pretrained", "stage"}
"""The keys a params file may hold at its top level (`read_params`)."""


# -- checking values ---------------------------------------------------------------------------


def check_value(
    key: str,
    value: Any,
    annotation: Any,
    nested: Callable[[type, Any, str], Any] | None = None,
) -> Any:
    """Type-check one value against its annotation (naming ``key`` in the error); returns it
    converted (ints to float where a float is asked for). Lists, mappings and ``Any`` are
    checked element-wise; a dataclass annotation is built by ``nested(cls, value, key)``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {short_repr(value)} is not one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return check_value(key, value, arg, nested)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {short_repr(value)}")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {short_repr(value)}")
        return [check_value(f"{key}[{i}]", v, args[0], nested) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {short_repr(value)}")
        return {str(k): check_value(f"{key}.{k}", v, args[1], nested) for k, v in value.items()}
    if nested is not None and dataclasses.is_dataclass(annotation):
        return nested(annotation, value, key)
    if annotation is Any:
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {short_repr(value)}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {short_repr(value)}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint = " (write floats with a dot, e.g. 1.0e-4)" if isinstance(value, str) else ""
            raise ConfigError(f"{key}: expected a number, got {short_repr(value)}{hint}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {short_repr(value)}")
        return value
    raise ConfigError(f"{key}: unsupported annotation {annotation!r}")


def check_known_keys(cls: type, values: dict[str, Any]) -> None:
    """Refuse keys ``cls`` does not have, naming them with the closest known key of each
    (``unknown key(s) ['stepz'] for PretrainConfig; did you mean steps?``)."""
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(str(k) for k in set(values) - set(known))
    if not unknown:
        return
    shown = [short_repr(k, 40) for k in unknown[:5]] + (["..."] if len(unknown) > 5 else [])
    message = f"unknown key(s) [{', '.join(shown)}] for {cls.__name__}"
    close = [c for k in unknown[:5] for c in close_names(k, known, n=1)]
    if close:
        message += f"; did you mean {' or '.join(dict.fromkeys(close))}?"
    raise ConfigError(message)


def check_key_value(cls: type, key: str, value: Any) -> Any:
    """One key of config class ``cls`` on its own: its type and range, not the checks across
    keys (which need the whole config); returns the converted value."""
    value = check_value(key, value, typing.get_type_hints(cls)[key])
    check_range(cls.__dataclass_fields__[key], value)
    return value


def check_range(f: dataclasses.Field, value: Any) -> None:
    """Refuse a number that is not finite or breaks a rule of its field ``f`` (`F`)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{f.name}: must be a finite number, got {short_repr(value)}")
    for rule in f.metadata.get("rules", ()):
        problem = rule(value)
        if problem:
            raise ConfigError(f"{f.name}: {problem}, got {short_repr(value)}")


def load_yaml_mapping(path: Path, what: str = "a mapping at the top level") -> dict[str, Any]:
    """An existing YAML file that must hold a mapping (empty file: {}), read by
    `sgi_lab.base.yaml_io.load_yaml`: safe, duplicate keys and alias bombs refused."""
    try:
        payload = load_yaml(Path(path)) or {}
    except YAMLInputError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(payload, dict):
        raise ConfigError(f"{path}: expected {what}")
    return payload


def read_params(path: str | os.PathLike) -> dict[str, Any]:
    """Read a params YAML file (`load_yaml_mapping`) and check its top-level keys."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(did_you_mean(path, "params file"))
    if not path.is_file():
        raise ConfigError(f"{path}: is a folder, not a params file (name a .yaml file)")
    payload = load_yaml_mapping(path)
    unknown = sorted(str(k) for k in set(payload) - TOP_LEVEL_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: unknown top-level key(s) {unknown}; valid: {sorted(TOP_LEVEL_KEYS)}"
        )
    if not isinstance(payload.get("config", {}), dict):
        raise ConfigError(f"{path}: 'config' must be a mapping")
    return payload


def parse_value(raw: str) -> Any:
    """A command-line value as YAML: ``3`` -> 3, ``true`` -> True, ``1e-4`` -> 0.0001; a
    ConfigError for what is not a YAML value (quoted, cut short)."""
    try:
        value = load_yaml(raw, "value") if raw != "" else ""
    except YAMLInputError as exc:
        raise ConfigError(f"{short_repr(raw)}: {str(exc).removeprefix('value: ')}") from None
    # '1e-4' is a string to PyYAML; accept it as a number where the user clearly meant one.
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            pass  # not a number: the string it is ('adam', 'cuda:0', ...)
    return value


def parse_overrides(pairs: list[str] | None, source: str = "--set") -> dict[str, Any]:
    """``["lr=3.0e-4", "augment=false"]`` -> ``{"lr": 0.0003, "augment": False}`` (YAML values);
    a malformed pair is named with ``source``."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ConfigError(f"{source}: override {short_repr(pair)} must look like key=value")
        key, raw = pair.split("=", 1)
        try:
            out[key.strip()] = parse_value(raw)
        except ConfigError as exc:
            raise ConfigError(f"{source} {key.strip()}: {exc}") from None
    return out
