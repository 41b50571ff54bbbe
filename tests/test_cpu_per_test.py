"""tests.cpu_per_test, the opt-in plugin that ranks tests by the CPU they cost: run on a small suite of its own in a
pytest subprocess (with and without xdist's workers), it charges each test the CPU it spent, its own and its
children's, and ranks the costliest first."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

BURNER = """
import sys, time


def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


if __name__ == "__main__":
    burn(float(sys.argv[1]))
"""
SUITE = """
import subprocess, sys, time

from burner import burn


def test_burns_in_its_process():
    burn(0.6)


def test_burns_in_a_child():
    subprocess.run([sys.executable, "burner.py", "0.4"], check=True)


def test_sleeps():
    time.sleep(0.5)
"""


def _ranked(output: str) -> dict[str, tuple[float, float, float, float]]:
    """The plugin's table: per test name, (CPU, own, children, wall) in seconds, in the order printed."""
    rows = re.findall(r"^\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\S+::(\w+)$", output, re.MULTILINE)
    return {name: tuple(map(float, figures)) for *figures, name in rows}


@pytest.mark.parametrize("workers", ["0", "2"])
def test_each_test_is_charged_its_own_and_its_childrens_cpu_costliest_first(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    pytester.makepyfile(test_costs=SUITE, burner=BURNER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("-p", "tests.cpu_per_test", "-n", workers, "-q")
    assert result.ret == 0, result.stdout.str()
    output = result.stdout.str()
    ranked = _ranked(output)
    assert list(ranked) == ["test_burns_in_its_process", "test_burns_in_a_child", "test_sleeps"], output
    own_cpu, own, children, _ = ranked["test_burns_in_its_process"]
    assert 0.55 <= own <= own_cpu < 1.5 and children < 0.05
    child_cpu, own, children, _ = ranked["test_burns_in_a_child"]
    assert 0.35 <= children <= child_cpu < 1.5
    sleep_cpu, _, _, sleep_wall = ranked["test_sleeps"]
    assert sleep_cpu < 0.1 and sleep_wall >= 0.5
    assert re.search(r"all 3 tests: \d+ s of CPU", output)
    # The files' table: the one file charged what its three tests were, to the rounding of the printed figures.
    (file_row,) = re.findall(r"^\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+test_costs\.py$", output, re.MULTILINE)
    for column, file_figure in enumerate(map(float, file_row)):
        assert abs(file_figure - sum(figures[column] for figures in ranked.values())) <= 0.2, output
