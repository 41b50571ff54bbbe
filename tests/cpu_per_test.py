"""Which tests cost the suite its CPU: an opt-in pytest plugin, `pytest -p tests.cpu_per_test`.

pytest's --durations gives wall time, which on two cores shared by three test processes says more about what ran
beside a test than about the test. This counts, for each test's setup, call and teardown, the CPU of its test
process (every thread: DuckDB's and Polars' included) and of the child processes it waited for (servers, CLI
commands, kernels stopped in the test; a session fixture's server is counted where it is stopped), and prints the
tests that cost the most at the end, across xdist's workers (each report carries its figures to the controller).
PostgreSQL's own processes are not counted: they are the system's.
"""

import resource
import time
from collections import defaultdict
from collections.abc import Generator, Sequence

import pytest

SHOWN = 30
_STARTED = pytest.StashKey[tuple[float, float, float]]()
_PROPERTY = "cpu_per_test"


def _now() -> tuple[float, float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, time.monotonic())


# Each phase starts its count before any other implementation of its hook (fixtures are set up and torn down in
# pytest's own) and ends it in the phase's report.
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STARTED] = _now()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    item.stash[_STARTED] = _now()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    item.stash[_STARTED] = _now()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    started = item.stash.get(_STARTED, None)
    if started is not None:
        spent = tuple(end - start for start, end in zip(started, _now(), strict=True))
        report.user_properties.append((_PROPERTY, spent))
    return report


class _Totals:
    """Per test: its process's CPU, its children's, its wall time (seconds), summed over its phases."""

    def __init__(self) -> None:
        self.by_test: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, figures in report.user_properties:
            if name == _PROPERTY:
                _add(self.by_test[report.nodeid], figures)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.by_test:
            return
        own, children, wall = (sum(totals[index] for totals in self.by_test.values()) for index in range(3))
        by_file: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for nodeid, figures in self.by_test.items():
            _add(by_file[nodeid.split("::", 1)[0]], figures)
        _costliest(terminalreporter, "test", self.by_test, f"all {len(self.by_test)} tests: {own + children:,.0f} s "
                   f"of CPU ({own:,.0f} s in the test processes, {children:,.0f} s in their children), {wall:,.0f} s "
                   "of wall time")
        _costliest(terminalreporter, "test file", by_file)


def _add(totals: list[float], figures: Sequence[float]) -> None:
    for index, figure in enumerate(figures):
        totals[index] += figure


def _costliest(terminalreporter: pytest.TerminalReporter, kind: str, figures: dict[str, list[float]],
               summary: str | None = None) -> None:
    """A section of the SHOWN entries (tests or files) that cost the most CPU, their own and their children's."""
    terminalreporter.section(f"CPU per {kind}, the costliest {SHOWN} (tests.cpu_per_test)")
    if summary:
        terminalreporter.line(summary)
    terminalreporter.line(f"{'CPU s':>8} {'own':>8} {'children':>8} {'wall s':>8}  {kind}")
    ranked = sorted(figures.items(), key=lambda entry: entry[1][0] + entry[1][1], reverse=True)
    for name, (own, children, wall) in ranked[:SHOWN]:
        terminalreporter.line(f"{own + children:8.1f} {own:8.1f} {children:8.1f} {wall:8.1f}  {name}")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) gathers the figures
        config.pluginmanager.register(_Totals(), "cpu_per_test_totals")
