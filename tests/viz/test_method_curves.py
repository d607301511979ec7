"""The study's learning-curve SVG: every method its own look, the y axis titled."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pandas as pd

from sgi_lab.viz.method_curves import PALETTE, method_curves_svg, method_style

SVG = "{http://www.w3.org/2000/svg}"


def test_no_two_methods_share_a_look_and_the_y_axis_has_a_title():
    """The objective study draws 10 methods and more (none, s, g, i, s_g, s_i, g_i, sgi and
    naive variants): a 7-colour cycle drew none = i and sgi = s_i alike."""
    methods = [f"m{i}" for i in range(12)]
    rows = [
        {"game": game, "method": m, "step": step, "return": 1.0 + i + step / 1000}
        for game in ("minatar/breakout", "minatar/asterix")
        for i, m in enumerate(methods)
        for step in (1000, 2000)
    ]
    root = ET.fromstring(method_curves_svg(pd.DataFrame(rows), methods, mark="mine"))
    lines = [e for e in root.iter(f"{SVG}polyline") if e.get("stroke") != "#888"]
    assert len(lines) == 2 * len(methods)
    looks = {(e.get("stroke"), e.get("stroke-dasharray")) for e in lines}
    assert len(looks) == len(methods)  # each method one look, the same in both panels
    legend = [(e.get("stroke"), e.get("stroke-dasharray")) for e in root.iter(f"{SVG}line")]
    assert len(set(legend)) == len(methods) and set(legend) == looks
    texts = [e.text for e in root.iter(f"{SVG}text")]
    assert "training return (mean over seeds)" in texts
    assert [e for e in root.iter(f"{SVG}text") if e.get("transform") == "rotate(-90)"]
    assert "mine" in root.find(f"{SVG}desc").text
    assert len(PALETTE) == len(set(PALETTE)) == 10
    assert method_style(10) == f'stroke="{PALETTE[0]}" stroke-dasharray="5 3"'
