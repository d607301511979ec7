"""`sgi-lab --help`, a mistyped command and a wrong option answer without importing torch, scipy,
pandas or plotly.

Importing torch costs ~3.5 s of CPU (more on a loaded machine) before the CLI can say anything,
scipy, pandas and plotly together ~1.3 s more; each case runs in a fresh interpreter and reports
the heavy packages it ended up importing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sgi_lab.launch.cli import DEFERRED, build_parser

PROBE = """
import json, sys
from sgi_lab.launch.cli import build_parser, main
code = None
try:
    code = main(sys.argv[1:]) if sys.argv[1:] else build_parser() and 0
except SystemExit as exc:
    code = exc.code
heavy = [m for m in ("torch", "scipy", "pandas", "plotly") if m in sys.modules]
print(json.dumps({"code": code, "heavy": heavy}))
"""


def cli_imports(*argv: str) -> tuple[int, list[str], str]:
    """Exit status, heavy packages imported and stderr of ``sgi-lab ARGV`` in a fresh Python."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], report["heavy"], done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        (),  # the parser alone
        ("--help",),
        ("pretrian",),  # a mistyped command
        ("pretrain", "--help"),
        ("pretrain", "--device", "cuda"),  # an option the command does not have
        ("finetune", "--help"),
        ("collect", "--help"),
        ("status", "--help"),
        ("run", "--help"),
        ("sweep", "--help"),
        ("probe", "--help"),
        ("experiment", "--help"),
    ],
    ids=lambda argv: " ".join(argv) or "build_parser",
)
def test_help_and_mistakes_import_no_heavy_package(argv):
    code, heavy, stderr = cli_imports(*argv)
    assert code in (0, 2), stderr[-2000:]
    assert heavy == [], f"sgi-lab {' '.join(argv)} imported {', '.join(heavy)}"
    if argv == ("pretrian",):
        assert "invalid choice: 'pretrian'" in stderr


def test_help_lists_every_deferred_command_before_loading_it():
    parser = build_parser()
    listing = parser.format_help()
    for name, line in DEFERRED.items():
        assert name in listing and line[:40] in " ".join(listing.split())


def test_a_deferred_command_gets_its_options_when_named():
    # what its own module defines (here `status --state`), and its handler
    args = build_parser().parse_args(["status", "outputs", "--state", "running"])
    assert args.state == "running" and args.folder == "outputs"
    assert args.handler.__module__ == "sgi_lab.launch.status_command"
    complete = build_parser(complete=True)
    status = complete._subparsers._group_actions[0].choices["status"]
    assert "--state" in status._option_string_actions  # filled without parsing


def test_one_module_is_named_cli():
    # `sgi_lab/launch/cli.py` is the command line; a command's own module is named after what
    # it does (`experiments/command.py`), so a search for "cli.py" finds one file
    package = Path(__file__).resolve().parents[2] / "sgi_lab"
    found = sorted(str(p.relative_to(package)) for p in package.rglob("cli.py"))
    assert found == ["launch/cli.py"]


def test_probe_options_name_what_the_probes_and_encoders_take():
    # the options are read from torch-free constants; they must match what the probes run
    from sgi_lab.launch.probe import ENCODERS
    from sgi_lab.nets.encoders import ENCODERS as BUILT
    from sgi_lab.probes import linear

    assert ENCODERS == BUILT
    probe = build_parser(complete=True)._subparsers._group_actions[0].choices["probe"]
    options = probe._option_string_actions
    assert tuple(options["--random-init"].choices) == BUILT
    assert tuple(options["--readout"].choices) == linear.READOUTS == ("lstsq", "logistic")
    assert tuple(options["--features"].choices) == linear.FEATURES
    linear.ProbeSettings(readout="logistic", features="projection")  # both accepted


def test_the_probes_package_loads_its_modules_when_a_name_is_used():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sgi_lab.probes as p; a = 'torch' in sys.modules; "
            "p.probe_run; print(a, 'torch' in sys.modules, sorted(set(p.__all__) - set(dir(p))))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["False", "True", "[]"], done.stderr[-2000:]


def test_the_experiments_package_loads_its_modules_when_a_name_is_used():
    # the experiment command's options read the spec alone; its handler loads the task graph
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sgi_lab.experiments as e; from sgi_lab.experiments.options import "
            "add_experiment_parser; a = 'torch' in sys.modules; e.run_graph; "
            "print(a, 'torch' in sys.modules, sorted(set(e.__all__) - set(dir(e))))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["False", "True", "[]"], done.stderr[-2000:]


def test_the_experiment_command_runs_its_handler(tmp_path, capsys):
    # the options' handler hands the arguments to the command's own (a dry run: the plan)
    from sgi_lab.launch.cli import main

    root = Path(__file__).resolve().parents[2]
    file = root / "params/experiments/minatar_objectives.yaml"
    args = build_parser().parse_args(["experiment", str(file), "--dry-run"])
    assert args.handler.__module__ == "sgi_lab.experiments.options"
    assert main(["experiment", str(file), "--out", str(tmp_path / "x"), "--dry-run"]) == 0
    assert "pretrain/" in capsys.readouterr().out and not (tmp_path / "x").exists()
