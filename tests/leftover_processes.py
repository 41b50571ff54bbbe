"""The processes a test run starts, read from /proc: every one must be stopped by the test that started it.

A process whose parent dies is adopted by the nearest "child subreaper" among its ancestors, else by init, where
it would leave the test run's tree unseen. The pytest process makes itself a subreaper, so whatever any test started,
however deep and whatever became of its parent, stays among pytest's descendants until it ends.
"""

import ctypes
import os
import signal
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


@dataclass(frozen=True)
class Process:
    pid: int
    parent: int
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} (parent {self.parent}): {self.command}"


def adopt_orphans() -> None:
    """Make this process the one that adopts its descendants' orphans (Linux), instead of init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(error)}")


def running_processes() -> dict[int, Process]:
    """Every process running now; an ended one not yet waited for (a zombie) holds nothing and is left out."""
    found = {}
    for folder in Path("/proc").glob("[0-9]*"):
        try:
            # The command name, in parentheses, may hold spaces and parentheses itself: the fields follow the last ")".
            state, parent = (folder / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            command = (folder / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            continue
        if state not in ("Z", "X"):
            found[int(folder.name)] = Process(int(folder.name), int(parent), command)
    return found


def descendants(pid: int) -> dict[int, Process]:
    """The running processes below `pid`: its children, theirs, and so on."""
    everyone, found = running_processes(), {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for process in everyone.values():
            if process.parent == parent and process.pid not in found:
                found[process.pid] = process
                frontier.append(process.pid)
    return found


def still_running(pids: set[int]) -> list[Process]:
    everyone = running_processes()
    return [everyone[pid] for pid in sorted(pids) if pid in everyone]


def left_behind(ignored: set[int], grace_seconds: float) -> list[Process]:
    """The descendants of this process, `ignored` aside, still running after up to `grace_seconds` (processes
    being stopped, or ending with their parent, get that long); each one found is killed, so none outlives the run."""
    deadline = time.monotonic() + grace_seconds
    while (left := [p for pid, p in descendants(os.getpid()).items() if pid not in ignored]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in left:
        with suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    return left
