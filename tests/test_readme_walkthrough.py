"""The README's "An order's life" walkthrough, run as written against a fresh `pia demo` (issue 8 point 8): the
block a newcomer pastes must work, and each step must show in GET /orders/{id}."""

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
PIA = str(Path(sys.executable).parent / "pia")


def _walkthrough() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### An order's life, against `pia demo`"):]
    return re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)  # type: ignore[union-attr]


def _outside_python() -> str:
    """The PATH a newcomer's shell has: `python3` is the interpreter pip installed uv into, not this venv's."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(entry for entry in os.environ["PATH"].split(os.pathsep) if entry != venv_bin)
    python = shutil.which("python3", path=path)
    if python is None or subprocess.run([python, "-m", "uv", "--version"], capture_output=True).returncode != 0:
        pytest.skip("the walkthrough runs `python3 -m uv`: no python3 with uv outside the venv")
    if shutil.which("curl", path=path) is None:
        pytest.skip("the walkthrough uses curl, which this machine lacks")
    return path


@pytest.fixture
def demo(tmp_path: Path):
    """`pia demo` on a free port and a fresh data dir, as the README's first command starts it."""
    port = free_port()
    process = subprocess.Popen([PIA, "demo", "--port", str(port), "--data-dir", str(tmp_path / "pia-data")],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        lines.append(process.stdout.readline())  # type: ignore[union-attr]
        if "Running on" in lines[-1]:
            threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()  # type: ignore[arg-type]
            break
    else:
        process.kill()
        raise AssertionError("pia demo did not start:\n" + "".join(lines))
    yield tmp_path / "pia-data"
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


def test_the_readme_walkthrough_takes_an_order_through_its_life(demo: Path) -> None:
    script = _walkthrough().replace("C=pia-data/demo-credentials.json", f"C={demo / 'demo-credentials.json'}", 1)
    assert f"C={demo}" in script, "the walkthrough no longer starts from pia-data/demo-credentials.json"
    env = {**os.environ, "PATH": _outside_python()}
    env.pop("VIRTUAL_ENV", None)
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    # Each `state` prints the status, then the document lists: "OPEN {'captures': [], ...}".
    states = [line.split(" ", 1) for line in run.stdout.splitlines() if " {'captures'" in line]
    documents = [{name: values for name, values in ast.literal_eval(lists).items() if values} for _, lists in states]
    assert [status for status, _ in states] == ["OPEN", "OPEN", "DELIVERED", "DELIVERED", "DELIVERED", "DELIVERED"]
    assert documents[0] == {}
    assert documents[1] == {"captures": ["PENDING"]}
    assert documents[2].keys() == {"captures", "receipts", "invoices"} and documents[2]["captures"] == ["CONFIRMED"]
    assert documents[3]["shipments"] == documents[3]["receipts"] == documents[3]["invoices"]
    assert documents[4]["refunds"] == ["OPEN"] and len(documents[4]["returnInvoices"]) == 1
    assert documents[5]["refunds"] == ["CONFIRMED"]
