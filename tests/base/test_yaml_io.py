"""load_yaml: safe_load that names duplicate keys and refuses alias bombs fast."""

from __future__ import annotations

import textwrap
import time

import pytest

from sgi_lab.base.yaml_io import MAX_NODES, YAMLInputError, load_yaml, short_repr


def alias_bomb(levels: int = 9) -> str:
    """The "billion laughs": each level is nine aliases of the one before (9^9 strings)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_within_a_second_in_one_line():
    started = time.perf_counter()
    with pytest.raises(YAMLInputError) as info:
        load_yaml(
            "name: x\nconfig:\n  augment:\n" + textwrap.indent(alias_bomb(), "    "), "b.yaml"
        )
    assert time.perf_counter() - started < 1.0
    message = str(info.value)
    assert message.startswith("b.yaml: aliases expand to more than") and "\n" not in message
    assert len(message) < 120


def test_the_bound_counts_expanded_nodes_exactly():
    # A list of k aliases of a 3-item list: 1 + k * (1 + 3) nodes once expanded.
    def doc(k: int) -> str:
        return "a: &a [1, 2, 3]\nb: [" + ", ".join(["*a"] * k) + "]\n"

    # 1 (root) + 2 (key a, its list) + 3 + 1 (key b) + 1 (b's list) + 4k
    fits = (MAX_NODES - 8) // 4
    assert len(load_yaml(doc(fits))["b"]) == fits
    with pytest.raises(YAMLInputError, match="aliases expand"):
        load_yaml(doc(fits + 1))


def test_ordinary_anchors_and_merge_keys_still_load():
    text = "tiny: &t {steps: 4, lr: 1.0e-3}\nrun: *t\nother:\n  <<: *t\n  steps: 8\n"
    assert load_yaml(text) == {
        "tiny": {"steps": 4, "lr": 1e-3},
        "run": {"steps": 4, "lr": 1e-3},
        "other": {"steps": 8, "lr": 1e-3},
    }


def test_a_duplicate_key_is_named_with_both_lines():
    with pytest.raises(
        YAMLInputError, match=r"^p.yaml: line 4: duplicate key 'steps' \(first at line 2\)$"
    ):
        load_yaml("config:\n  steps: 1\n  lr: 1.0\n  steps: 2\n", "p.yaml")
    # the same key in two different mappings is no duplicate
    assert load_yaml("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}


def test_a_recursive_alias_and_bad_yaml_are_one_line_each(tmp_path):
    with pytest.raises(YAMLInputError, match="f.yaml: a recursive alias"):
        load_yaml("a: &x [1, *x]\n", "f.yaml")
    path = tmp_path / "bad.yaml"
    path.write_text("config: [1, 2\n")
    with pytest.raises(YAMLInputError, match=r"bad.yaml: not valid YAML \(line 2: "):
        load_yaml(path)
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(YAMLInputError, match="bad.yaml: not a text file"):
        load_yaml(path)


def test_short_repr_cuts_long_and_deep_values_at_bounded_cost():
    assert short_repr("abc") == "'abc'"
    assert len(short_repr("x" * 10_000)) <= 60
    nested: list = ["lol"] * 9
    for _ in range(8):
        nested = [nested] * 9  # 9^9 leaves if printed whole
    started = time.perf_counter()
    text = short_repr(nested)
    assert len(text) <= 60 and text.endswith("...")
    assert time.perf_counter() - started < 0.1
