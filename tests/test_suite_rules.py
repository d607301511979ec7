"""The test suite's own rules: every test runs under a hang guard."""

from __future__ import annotations


def test_every_test_has_a_hang_guard(request):
    """pyproject.toml sets pytest-timeout's per-test limit: a test that hangs fails with its
    stack printed instead of holding CI until its 90-minute limit."""
    assert request.config.pluginmanager.hasplugin("timeout")
    limit = float(request.config.getini("timeout"))
    assert 0 < limit <= 1800
