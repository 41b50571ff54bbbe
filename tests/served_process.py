"""`pia serve` (or another `pia` command) as a process of its own, for tests of what only a real process shows: an
installed wheel's server, the logs it writes. Its output goes to a file; stopping it stops its children too (the
upload workers)."""

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

from tests.conftest import TLS, free_port, wait_for


def clean_environment(**settings: str) -> dict[str, str]:
    """This process's environment without its virtual environment, Python or pia settings, plus `settings`
    (uv's own, such as its cache, stay)."""
    kept = {name: value for name, value in os.environ.items()
            if not name.startswith(("PIA_", "PYTHON", "VIRTUAL_ENV"))}
    return kept | settings


def _answers(url: str, process: subprocess.Popen) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"{process.args} exited with {process.returncode} before {url} answered")
    try:
        return httpx.get(url, timeout=2, verify=TLS).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def running(command: list[str], environment: dict[str, str], cwd: Path, output: Path, ready: str) -> Iterator[None]:
    """Run `command` until the block ends, from when `ready` (a URL) answers 200; its output goes to `output`."""
    with output.open("wb") as sink:
        # A session of its own: the process group holds the process and every child it starts.
        process = subprocess.Popen(command, cwd=cwd, env=environment, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        try:
            wait_for(lambda: _answers(ready, process), 120, f"{ready} to answer")
        except BaseException:
            print(output.read_text())
            raise
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)  # a graceful stop: work in hand ends, the upload workers are closed
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever is left of the group


@contextmanager
def served(pia: Path, environment: dict[str, str], cwd: Path, output: Path) -> Iterator[str]:
    """Run `pia serve` on a free port until the block ends; yields its base URL once /healthcheck answers 200."""
    url = f"http://127.0.0.1:{(port := free_port())}"
    with running([str(pia), "serve", "--host", "127.0.0.1", "--port", str(port)], environment, cwd, output,
                 f"{url}/healthcheck"):
        yield url
