"""Hints for a name a person typed: the closest spellings, else what an alias stands for."""

from __future__ import annotations

from sgi_lab.base.paths import name_hint


def test_a_close_spelling_wins_over_an_alias():
    methods = ["minatar_none", "minatar_reduced_lr@minatar_sgi"]
    assert name_hint("minatar_nnoe", methods) == "did you mean minatar_none? "
    aliases = {"from scratch": ["minatar_none"], "none": ["minatar_none"]}
    assert name_hint("minatar_nnoe", methods, aliases) == "did you mean minatar_none? "


def test_a_word_for_the_runs_from_scratch_names_them():
    """The demo says "from scratch"; the method is called minatar_none: `scrtch` finds it."""
    methods = ["minatar_none", "minatar_reduced_lr", "minatar_naive", "copy"]
    scratch = ["minatar_none", "copy", "minatar_none"]
    aliases = {"from scratch": scratch, "none": scratch}
    for typed in ("scrtch", "scratch", "from scratch", "none"):
        hint = name_hint(typed, methods, aliases)
        assert hint.startswith("did you mean minatar_none or copy ("), typed
    assert name_hint("scrtch", methods, {"from scratch": []}) == ""  # no run from scratch
    assert name_hint("zzz", methods, aliases) == ""
