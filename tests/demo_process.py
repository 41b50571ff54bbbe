"""A real `pia demo` process on a free port, for tests that drive it over HTTP."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.conftest import free_port

PIA = str(Path(sys.executable).parent / "pia")


class Demo:
    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        """`env`: variables on top of the test's environment (PIA_DATABASE_URL for PostgreSQL, say)."""
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # A session of its own: stop() can end the upload worker processes it spawns, whatever became of it.
        self.process = subprocess.Popen(
            [PIA, "demo", "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})},
            start_new_session=True)
        self.lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            self.lines.append(line)
            if "Running on" in line:
                # Keep reading what it prints, so a full pipe never blocks the server.
                threading.Thread(target=self.lines.extend, args=(self.process.stdout,), daemon=True).start()
                return
            if self.process.poll() is not None:
                break
        self.stop()
        raise AssertionError("pia demo did not start:\n" + "".join(self.lines))

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            # Hypercorn's graceful shutdown alone takes seconds, and many more on a loaded machine.
            self.process.wait(timeout=60)
        finally:
            # Anything of its session still running (its children, or itself after the wait) is killed.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
