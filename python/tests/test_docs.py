"""The quick starts of the book's Python page and of the README, run as they are written."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def first_python_block(path: Path, after: str) -> str:
    text = path.read_text()
    start = text.index(after)
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match, f"no python block after {after!r} in {path}"
    return match.group(1)


def run(code: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_books_first_run(tmp_path):
    code = first_python_block(ROOT / "docs/python.md", "## A first run")
    assert run(code, tmp_path) == "echo: hi 4\n"


def test_the_readmes_python_example(tmp_path):
    code = first_python_block(ROOT / "README.md", "## From Python")
    assert run(code, tmp_path) == "echo: hi\n"
    assert (tmp_path / "runs.db").exists()
