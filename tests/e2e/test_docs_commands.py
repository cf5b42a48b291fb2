"""The benchmark commands that README.md and experiments/*.md tell a reader to run take the options they
are shown with (a renamed option otherwise leaves a command that fails as written).

Here: the benchmark scripts' options, read from their --help; tests/unit/test_docs_commands.py has the rest."""

import functools
import re

import pytest

from helpers.docs import DOCS
from helpers.runs import run_script

COMMAND = re.compile(r"python (benchmarks/\w+\.py)([^`#\n]*)")


def shown_commands() -> list[tuple[str, str, str]]:
    """(doc, script, option) for every option written after a benchmark script in the docs."""
    found = []
    for doc in DOCS:
        for script, rest in COMMAND.findall(doc.read_text()):
            found += [(doc.name, script, option) for option in re.findall(r"(--[\w-]+)", rest)]
    return found


@functools.cache
def usage(script: str) -> str:
    result = run_script(script, "--help")
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_docs_show_benchmark_commands():
    scripts = {script for _, script, _ in shown_commands()}
    assert {"benchmarks/preset_vs_loop.py", "benchmarks/plain_loop.py", "benchmarks/gpu.py"} <= scripts


@pytest.mark.parametrize(("doc", "script", "option"), sorted(set(shown_commands())))
def test_a_shown_option_exists(doc, script, option):
    assert re.search(rf"{re.escape(option)}\b", usage(script)), f"{doc}: {script} has no option {option}"
