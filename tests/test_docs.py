"""Every code block of README.md and docs/: Python blocks run, and every `keras-vit` command line
and benchmark invocation of a shell block names options that exist.

A block preceded by `<!-- needs: network -->` (or `gpu`) is skipped with that reason. The blocks
of one page run in order in one process, so a page's later blocks use its earlier names. They
run under one backend only (`backend_independent`, tests/conftest.py): the docs are the same on
every backend.
"""

import os
import re
import shlex
import subprocess
import sys

import pytest

from keras_vit.cli import build_parser
from tests.support.docs import PAGES, REPO, blocks

pytestmark = pytest.mark.backend_independent

def shown_files(page):
    """Files a page shows as a Python block whose first line is `# NAME.py`."""
    return {code.splitlines()[0][2:] for _, code in blocks(page, "python") if re.fullmatch(r"# \S+\.py", code.splitlines()[0])}


def shell_lines():
    for page in PAGES:
        shown = shown_files(page)
        for needs, code in blocks(page, "bash"):
            for line in code.replace("\\\n", " ").splitlines():  # continued lines joined
                line = line.split(" #")[0].strip()
                shows = any(line.endswith(f" {name}") for name in shown)
                if line and not line.startswith(("#", "export ")) and not shows:
                    yield pytest.param(line, marks=_skip(needs), id=f"{page.name}: {line[:60]}")


def _skip(needs):
    return [pytest.mark.skip(reason=f"needs {needs}")] if needs else []


def test_every_page_has_runnable_blocks():
    assert all(page.exists() for page in PAGES) and len(PAGES) >= 7
    assert sum(len(blocks(page, "python")) for page in PAGES) >= 3


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: p.name)
def test_python_blocks_run(page, tmp_path):
    runnable = [code for needs, code in blocks(page, "python") if not needs]
    if not runnable:
        pytest.skip("every Python block of this page needs the network or a GPU")
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", "\n".join(runnable)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("line", list(shell_lines()))
def test_shell_lines_name_what_exists(line):
    words = shlex.split(line.replace("$(which keras-vit)", "keras-vit"))
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value prefixes
        words.pop(0)
    if any(w.endswith("keras-vit") for w in words):
        args = words[[w.endswith("keras-vit") for w in words].index(True) + 1 :]
        try:
            build_parser().parse_args(args)
        except SystemExit as exit_:
            pytest.fail(f"keras-vit rejects {args}: exit {exit_.code}")
        return
    scripts = [w for w in words if w.endswith((".py", ".sh"))]
    for script in scripts:
        path = REPO / script
        assert path.is_file(), f"{script} does not exist"
        source = path.read_text()
        for option in (w.split("=")[0] for w in words if w.startswith("--")):
            assert f'"{option}"' in source, f"{script} has no option {option}"


NAMED = re.compile(r"`(keras_vit(?:\.[A-Za-z_]\w*)+)")  # a `keras_vit.x.y` the prose or a block names


def resolves(name):
    """Whether the dotted `name` is a module of keras_vit or an attribute of one."""
    import importlib

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                found = getattr(found, part)
        except AttributeError:
            return False
        return True
    return False


def test_every_name_the_docs_give_exists():
    """`keras_vit.load_model` was named in docs/weights.md and never existed."""
    named = {(page.name, name) for page in PAGES for name in NAMED.findall(page.read_text())}
    assert len(named) > 40
    assert not [(page, name) for page, name in sorted(named) if not resolves(name)]
    assert not resolves("keras_vit.load_model")


def test_the_field_table_is_current():
    sys.path.insert(0, str(REPO / "scripts"))
    from update_docs import FAMILIES_PAGE, PAGE, updated

    for page, region in ((PAGE, "fields"), (FAMILIES_PAGE, "models")):
        text = page.read_text()
        assert f"<!-- {region}:start -->" in text and updated(text) == text, "stale: run python scripts/update_docs.py"
