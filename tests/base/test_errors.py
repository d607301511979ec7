"""One base exception for what sgi-lab refuses: every error class sgi-lab defines derives from
`SgiLabError` (keeping its builtin base), and the CLI prints it as one line with its exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import sgi_lab
from sgi_lab.base.errors import SgiLabError
from sgi_lab.launch import cli


def sgi_lab_error_classes() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(sgi_lab.__path__, "sgi_lab."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, Exception)
                and obj.__module__ == info.name
                and name.endswith("Error")
            ):
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_error_sgi_lab_defines_derives_from_the_one_base():
    classes = sgi_lab_error_classes()
    assert len(classes) >= 15
    stray = sorted(name for name, cls in classes.items() if not issubclass(cls, SgiLabError))
    assert not stray, f"derive these from sgi_lab.base.errors.SgiLabError: {stray}"


def test_the_builtin_bases_are_kept():
    from sgi_lab.base.files import DiskFullError, RunFolderError
    from sgi_lab.data.store_format import StoreError

    assert issubclass(StoreError, RuntimeError) and issubclass(RunFolderError, FileExistsError)
    assert issubclass(DiskFullError, OSError)


def test_the_cli_prints_one_line_and_exits_with_the_errors_code(monkeypatch, capsys):
    class Refused(SgiLabError):
        exit_code = 7

    def handler(args):
        raise Refused("params/x.yaml: steps must be positive")

    monkeypatch.setitem(cli.COMMANDS, "info", handler)
    assert cli.main(["info", "somewhere"]) == 7
    err = capsys.readouterr().err
    assert err == "sgi-lab info: error: params/x.yaml: steps must be positive\n"


@pytest.mark.parametrize("exc", [ValueError("bad"), OSError("disk")])
def test_foreign_errors_still_exit_2(monkeypatch, capsys, exc):
    def handler(args):
        raise exc

    monkeypatch.setitem(cli.COMMANDS, "info", handler)
    assert cli.main(["info", "x"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
