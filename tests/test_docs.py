"""The docs say only what is true of the tree: a doc-check of README.md and the guides.

Every ``sgi-lab ...`` command line in a code block parses with the CLI's own parser (parsed,
never run), and every one in running text names a sub-command and options that exist; every
``make X`` names a Makefile target; every ``papermill`` line names a notebook and params files
that exist; every ``python -m sgi_lab...`` names a module; every repository path written in
backticks (``sgi_lab/...``, ``params/...``, ``notebooks/...``, ``benchmarks/...``,
``tests/...``, ``docs/...``) exists; every relative markdown link resolves. README.md stays one
page: under 250 lines, with ``make demo`` and ``make test`` in its first 15 lines. The project's
text (docs, benchmarks, code, tests, params, notebooks) names no working session and none of
its own issue numbers, but the date, commit or reason they stood for. Each package's docstring
and its docs/layout.md row name every module in it (the packages not brought to it yet are
listed, a list that may only shrink).
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from pathlib import Path

import pytest

from sgi_lab.launch.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PATH_PREFIXES = ("sgi_lab/", "params/", "notebooks/", "benchmarks/", "tests/", "docs/")
# A path with one of these is a pattern or a placeholder (tests/<package>/test_*.py), not a file.
PLACEHOLDER = re.compile(r"[<>*{}]|\.\.\.|NAME|\bN\b")
COMMAND_WORDS = ("sgi-lab", "make", "papermill", "python", "pytest", ".venv/bin/sgi-lab")
FENCE = re.compile(r"^```(\w*)\s*$")
INLINE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def documents(root: Path = ROOT) -> list[Path]:
    """README.md, outputs/README.md and the guides (docs/results/ holds measured results)."""
    docs = sorted((root / "docs").glob("*.md")) if (root / "docs").is_dir() else []
    extra = [root / "outputs" / "README.md"]
    return [root / "README.md", *docs, *(p for p in extra if p.is_file())]


def split_text(text: str) -> tuple[list[str], list[str]]:
    """The doc's code-block lines (continuations joined, blank and comment lines dropped) and
    its running-text lines (inline code spans are read from these)."""
    blocks: list[str] = []
    prose: list[str] = []
    fenced = False
    pending = ""
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            prose.append(line)
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined = (pending + line).strip()
        pending = ""
        if joined and not joined.startswith("#"):
            blocks.append(joined)
    return blocks, prose


def command_words(line: str) -> list[str] | None:
    """A code-block line as shell words (comments dropped) when it is a command this check
    knows, else None (trees, listings, YAML)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if words and words[0] in COMMAND_WORDS:
        return words
    return None


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The CLI's sub-commands by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parse_error(words: list[str], parser: argparse.ArgumentParser) -> str | None:
    """Why ``sgi-lab WORDS`` does not parse (argparse's own message), or None."""
    messages: list[str] = []

    def refuse(message: str) -> None:
        messages.append(message)
        raise SystemExit(2)

    for p in [parser, *subparsers(parser).values()]:
        p.error = refuse  # type: ignore[method-assign]
    try:
        parser.parse_args(words)
    except SystemExit:
        return messages[0] if messages else "exits while parsing (--help?)"
    return None


def inline_command_error(words: list[str], parser: argparse.ArgumentParser) -> str | None:
    """A command named in running text (``sgi-lab run``, ``sgi-lab info --verify``): its
    sub-command and every option it names exist (arguments may be left out or be words)."""
    commands = subparsers(parser)
    if words and words[0].rstrip(":").isupper():  # a placeholder: `sgi-lab COMMAND -h`
        return None
    if not words or words[0] not in commands:
        return f"no sub-command {words[0] if words else ''!r}"
    options = commands[words[0]]._option_string_actions
    for word in words[1:]:
        option = word.split("=", 1)[0]
        if option.startswith("--") and option not in options:
            return f"sgi-lab {words[0]} has no option {option}"
    return None


def makefile_targets(root: Path = ROOT) -> set[str]:
    text = (root / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.MULTILINE))


def path_problem(token: str, root: Path) -> str | None:
    """A repository path that does not exist (patterns and placeholders are not checked)."""
    token = token.rstrip(".,;:)")
    if not token.startswith(PATH_PREFIXES) or PLACEHOLDER.search(token):
        return None
    target = token.split("::", 1)[0].split("#", 1)[0]
    return None if (root / target).exists() else f"no such path: {token}"


def module_problem(name: str, root: Path) -> str | None:
    """A ``python -m`` module of sgi_lab or benchmarks that has no file."""
    if not name.startswith(("sgi_lab", "benchmarks")):
        return None
    base = root / name.replace(".", "/")
    found = base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
    return None if found else f"no module {name}"


def command_problems(words: list[str], parser: argparse.ArgumentParser, root: Path) -> list[str]:
    """What is wrong with one code-block command line."""
    problems = [p for w in words for p in [path_problem(w, root)] if p]
    head, args = words[0], words[1:]
    if head.endswith("sgi-lab") and ("-h" in args or "--help" in args):
        problems += [p for p in [inline_command_error(args, parser)] if p]
    elif head.endswith("sgi-lab"):
        error = parse_error(args, parser)
        if error:
            problems.append(f"does not parse: {error}")
    elif head == "make":
        problems += [f"no make target {t}" for t in args if t not in makefile_targets(root)]
    elif head == "papermill":
        # Said once: a path the check above already refused is not refused again.
        notebook = args[0] if args else ""
        if not (root / notebook).is_file() and not path_problem(notebook, root):
            problems.append(f"no notebook {notebook}")
        for flag, value in zip(args, args[1:]):
            if flag == "-f" and not (root / value).is_file() and not path_problem(value, root):
                problems.append(f"no params file {value}")
    elif head == "python" and args[:1] == ["-m"] and len(args) > 1:
        problems += [p for p in [module_problem(args[1], root)] if p]
    return problems


def inline_problems(span: str, parser: argparse.ArgumentParser, root: Path) -> list[str]:
    """What is wrong with one code span of running text."""
    try:
        words = shlex.split(span)
    except ValueError:
        words = span.split()
    if not words:
        return []
    if words[0] == "sgi-lab" and len(words) > 1:
        error = inline_command_error(words[1:], parser)
        return [error] if error else []
    if words[0] == "make" and len(words) > 1:
        return [f"no make target {t}" for t in words[1:2] if t not in makefile_targets(root)]
    if words[0] == "python" and words[1:2] == ["-m"] and len(words) > 2:
        return [p for p in [module_problem(words[2], root)] if p]
    return [p for w in words for p in [path_problem(w, root)] if p]


def link_problems(text: str, doc: Path) -> list[str]:
    """Relative markdown links that resolve to nothing."""
    problems = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path and not (doc.parent / path).exists():
            problems.append(f"broken link: {target}")
    return problems


def doc_problems(doc: Path, root: Path = ROOT) -> list[str]:
    """Every false reference in one markdown file, as ``file:problem``."""
    parser = build_parser(complete=True)
    blocks, prose = split_text(doc.read_text())
    problems: list[str] = []
    for line in blocks:
        words = command_words(line)
        if words:
            problems += [f"{line}: {p}" for p in command_problems(words, parser, root)]
    # A code span or a link may wrap onto the next line of its paragraph.
    text = "\n".join(prose)
    for span in INLINE.findall(text):
        span = " ".join(span.split())
        problems += [f"`{span}`: {p}" for p in inline_problems(span, parser, root)]
    problems += link_problems(text, doc)
    name = doc.relative_to(root) if doc.is_relative_to(root) else doc
    return [f"{name}: {p}" for p in problems]


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_reference_in_the_docs_is_true_of_the_tree(doc):
    assert doc_problems(doc) == []


def test_the_readme_is_one_page_with_the_two_commands_first():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; move detail into docs/"
    head = "\n".join(lines[:15])
    assert "make demo" in head and "make test" in head


def test_the_readme_links_a_guide_per_topic():
    readme = (ROOT / "README.md").read_text()
    linked = {Path(target.split("#")[0]).name for target in LINK.findall(readme)}
    guides = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert guides - linked == set(), "every guide under docs/ is linked from README.md"


def _fake_repo(tmp_path: Path, doc_text: str) -> Path:
    """A repository with a Makefile (targets demo, test), one notebook, one params file and a
    guide holding ``doc_text``."""
    (tmp_path / "Makefile").write_text("demo:\n\techo\ntest: x\n\techo\nX := 1\n")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "pretrain.ipynb").write_text("{}")
    (tmp_path / "params" / "pretrain").mkdir(parents=True)
    (tmp_path / "params" / "pretrain" / "sgi_m.yaml").write_text("{}")
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "guide.md"
    doc.write_text(doc_text)
    return doc


def test_the_check_passes_a_true_doc(tmp_path):
    doc = _fake_repo(
        tmp_path,
        "Run `make demo` and read `params/pretrain/sgi_m.yaml` ([guide](guide.md)).\n\n"
        "```bash\n"
        "papermill notebooks/pretrain.ipynb out.ipynb -f params/pretrain/sgi_m.yaml \\\n"
        "    -p game Pong   # a comment\n"
        "sgi-lab pretrain --params params/pretrain/sgi_m.yaml --data D --out O\n"
        "make test\n"
        "```\n"
        "`sgi-lab info --verify` and `tests/<package>/test_*.py` are fine.\n",
    )
    assert doc_problems(doc, tmp_path) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("See `sgi_lab/nets/runtime.py`.\n", "no such path: sgi_lab/nets/runtime.py"),
        ("See `params/pretrain/sgi_x.yaml`.\n", "no such path: params/pretrain/sgi_x.yaml"),
        ("See [the guide](missing.md).\n", "broken link: missing.md"),
        ("Run `make deploy`.\n", "no make target deploy"),
        ("```\nmake demo lab\n```\n", "no make target lab"),
        ("```\nsgi-lab pretrain --params P --out O\n```\n", "the following arguments are required"),
        (
            "```\nsgi-lab pretrain --params P --data D --out O --steps 5\n```\n",
            "unrecognized arguments",
        ),
        ("```\nsgi-lab train --data D\n```\n", "invalid choice"),
        ("`sgi-lab info --check` reads it.\n", "sgi-lab info has no option --check"),
        ("`sgi-lab deploy` runs it.\n", "no sub-command 'deploy'"),
        (
            "```\npapermill notebooks/finetune.ipynb o.ipynb -f params/pretrain/sgi_m.yaml\n```\n",
            "no such path: notebooks/finetune.ipynb",
        ),
        ("```\npapermill pretrain.ipynb o.ipynb\n```\n", "no notebook pretrain.ipynb"),
        (
            "```\npapermill notebooks/pretrain.ipynb o.ipynb -f p.yaml\n```\n",
            "no params file p.yaml",
        ),
        (
            "```\npapermill notebooks/pretrain.ipynb o.ipynb -f params/x.yaml\n```\n",
            "no such path: params/x.yaml",
        ),
        ("```\npython -m sgi_lab.launch.nothing\n```\n", "no module sgi_lab.launch.nothing"),
    ],
)
def test_the_check_catches_a_false_reference(tmp_path, text, problem):
    doc = _fake_repo(tmp_path, text)
    problems = doc_problems(doc, tmp_path)
    assert len(problems) == 1 and problem in problems[0], problems


# -- text that speaks of the project, not of its history --------------------------------------

# "session N", "sessions N-M", "issue N", "Issue #N": this project's own working history, which
# says nothing to a reader of the tree (a date, a commit or a reason does). Another project's
# tracker is allowed when its owner/repo is written just before ("pytorch/rl issue N");
# "pytorch/rl #N" never matches, having no word before the number.
HISTORY = re.compile(r"\b(?:session|issue)s? #?\d+", re.IGNORECASE)
OTHER_TRACKER = re.compile(r"[\w.-]+/[\w.-]+ $")
HISTORY_PLACES = (
    "docs",
    "benchmarks",
    "sgi_lab",
    "tests",
    "params",
    "notebooks",
    "README.md",
    "Makefile",
)
SKIPPED_DIRS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}


def history_mentions(text: str) -> list[tuple[int, str]]:
    """``(line number, the mention)`` for each "session N" / "issue N" in ``text`` that is not
    another project's ``owner/repo issue N``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in HISTORY.finditer(line):
            if not OTHER_TRACKER.search(line[: m.start()]):
                found.append((number, m.group(0)))
    return found


def history_files(root: Path = ROOT) -> list[Path]:
    """Every file under the places the project's text lives (archived studies included)."""
    files = []
    for place in HISTORY_PLACES:
        path = root / place
        if path.is_file():
            files.append(path)
            continue
        for p in sorted(path.rglob("*")):
            if p.is_file() and not SKIPPED_DIRS & set(p.relative_to(root).parts):
                files.append(p)
    return files


def test_the_text_speaks_of_the_project_not_of_its_working_sessions_or_issues():
    found = []
    for path in history_files():
        raw = path.read_bytes()
        if b"\0" in raw[:8192]:
            continue  # binary (an image, a checkpoint fixture)
        text = raw.decode("utf-8", errors="replace")
        found += [f"{path.relative_to(ROOT)}:{n}: {m!r}" for n, m in history_mentions(text)]
    assert not found, (
        "say the date, the commit or the reason instead of a working session or an issue "
        "number:\n" + "\n".join(found)
    )


def test_the_history_check_finds_sessions_and_issues_and_allows_other_trackers():
    # the words are built so that this file holds none of what it looks for
    session, issue = "sess" + "ion", "iss" + "ue"
    lines = [
        f"measured in {session} 16, idle",  # a session
        f"the runs of {session.title()}s 13-20 were lost",  # plural, capitalised
        f"fixed ({issue} 33 item 9)",  # an issue
        f"see {issue.title()} #34",  # with a hash
        f"vmap needs pytorch/rl {issue} 3113",  # another project's tracker: allowed
        "vmap needs pytorch/rl #3113",  # no word before the number: allowed
        f"a {session} of its own, {issue}s of the past, {session}s13",  # no number after a space
    ]
    found = history_mentions("\n".join(lines))
    assert [n for n, _ in found] == [1, 2, 3, 4]
    assert found[1][1] == f"{session.title()}s 13"


# -- every module named where its package is described ---------------------------------------


def package_modules(package: Path) -> list[str]:
    """The modules of one package folder (file stems, ``__init__`` and ``__main__`` left out)."""
    return sorted(p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__"))


def layout_rows(text: str) -> dict[str, str]:
    """docs/layout.md's table rows by package folder (``sgi_lab/runs``): the row's text."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*\d+\s*\|\s*`(sgi_lab/[\w/]+?)/?`\s*\|(.*)", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def code_names(text: str) -> set[str]:
    """The names written in ``text``'s inline code: each dotted or slashed part of a span
    (`sgi_lab.metrics.minatar`, `probe_data`, `svg.py`), a ``.py`` file by its stem."""
    names = set()
    for span in INLINE.findall(text.replace("``", "`")):
        for part in re.split(r"[./\s:(),]+", span.removesuffix(".py")):
            names.add(part)
        names.update(p.removesuffix(".py") for p in re.findall(r"[\w]+\.py", span))
    return names


def unnamed_modules(root: Path = ROOT) -> list[str]:
    """Every module its package's docstring or its docs/layout.md row does not name (in inline
    code: `name`, `sgi_lab.pkg.name`, `name.py`)."""
    rows = layout_rows((root / "docs" / "layout.md").read_text())
    problems = []
    for init in sorted((root / "sgi_lab").glob("*/__init__.py")):
        package = init.parent
        rel = package.relative_to(root).as_posix()
        docstring = code_names(ast.get_docstring(ast.parse(init.read_text())) or "")
        row = rows.get(rel)
        if row is None:
            problems.append(f"{rel}: no row in docs/layout.md")
            continue
        for name in package_modules(package):
            if name not in docstring:
                problems.append(f"{rel}/__init__.py: its docstring does not name {name}")
            if f"`{name}.py`" not in row:
                problems.append(f"docs/layout.md: the {rel} row does not name `{name}.py`")
    return problems


def test_every_module_is_named_by_its_package_and_the_layout():
    problems = unnamed_modules()
    assert not problems, "\n".join(problems)


def test_the_module_check_finds_an_unnamed_module(tmp_path):
    package = tmp_path / "sgi_lab" / "things"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Things: `alpha` reads; beta does not count."""\n')
    (package / "alpha.py").write_text("")
    (package / "beta.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "layout.md").write_text(
        "| layer | package | what |\n|---|---|---|\n| 0 | `sgi_lab/things/` | reading (`alpha.py`) |\n"
    )
    assert unnamed_modules(tmp_path) == [
        "sgi_lab/things/__init__.py: its docstring does not name beta",
        "docs/layout.md: the sgi_lab/things row does not name `beta.py`",
    ]
