"""`front_matter`: the one writer of a card's YAML header, read back as written."""

from __future__ import annotations

from sgi_lab.base.yaml_io import front_matter, load_yaml


def test_front_matter_is_the_fields_between_two_rules_in_their_order():
    text = front_matter({"license": "mit", "tags": ["rl", "sgi"], "pretty_name": "a: b"})
    assert text == "---\nlicense: mit\ntags:\n- rl\n- sgi\npretty_name: 'a: b'\n---"


def test_front_matter_reads_back_as_the_same_mapping():
    fields = {"license": "other", "tags": ["--- not a rule", "x"], "pretty_name": "1.0e-4"}
    lines = front_matter(fields).splitlines()
    assert lines[0] == lines[-1] == "---"
    assert load_yaml("\n".join(lines[1:-1])) == fields
    assert list(load_yaml("\n".join(lines[1:-1]))) == list(fields)  # the order kept


def test_the_dataset_card_opens_with_it(tmp_path):
    # The dataset card and the model card share the writer: the Hub reads both headers alike.
    from conftest import build_store

    from sgi_lab.data.dataset_card import dataset_card

    store = build_store(tmp_path / "s", [{"length": 5, "terminal": True}, {"length": 4}])
    lines = dataset_card(store, "sgi-lab/pong/synthetic-v0").splitlines()
    end = lines.index("---", 1)
    assert lines[0] == "---" and lines[end + 1] == ""
    header = load_yaml("\n".join(lines[1:end]))
    assert header["pretty_name"] == "sgi-lab/pong/synthetic-v0"
    assert header["tags"][-1] == "atari"
