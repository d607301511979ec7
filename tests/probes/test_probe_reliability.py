"""Issue 35 on probes: concurrent writers keep every entry (item 2), stale and unfinished
results (item 3), stores verified before probing (item 4), the probe store's identity (item 5),
one line naming the input (items 7, 9), a model from another run (item 10)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sgi_lab.probes.results import read_probes

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sgi_lab.probes.results import write_probes

    path, tag, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    while not go.exists():
        time.sleep(0.01)
    for i in range(count):
        write_probes(path, {"store": {"fingerprint": f"{tag}-{i}"}, "settings": {"k": 1}})
    """
)


def test_two_processes_writing_one_probes_file_keep_every_entry(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    go = tmp_path / "go"
    count = 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(run / "probes.json"), tag, str(count), str(go)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    time.sleep(0.5)
    go.touch()  # both start writing at once
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    entries = read_probes(run)
    fingerprints = sorted(e["store"]["fingerprint"] for e in entries)
    assert fingerprints == sorted(f"{t}-{i}" for t in "ab" for i in range(count))
    assert json.loads((run / "probes.json").read_text())["format"] == 1
