"""Child processes that end when their parent does, however it ends, even by `kill -9`.

A lifeline is a pipe whose write end only the parent holds: a spawned child inherits only the descriptors passed to
it, so when the parent ends the kernel closes the last write end, and a child watching the read end sees
end-of-file at once, whatever killed the parent. Unlike prctl(PR_SET_PDEATHSIG) it needs no package, works beyond
Linux, and does not fire when merely the thread that started the child ends.

multiprocessing's resource tracker needs no lifeline of its own: it exits once every holder of its pipe, the parent
and each child spawned by it, has gone.
"""

import os
import threading
from contextlib import suppress
from multiprocessing import Pipe
from multiprocessing.connection import Connection


class Lifeline:
    """Give `child_end` to each child (as a spawned process's argument); `close()` or the parent's death ends them."""

    def __init__(self) -> None:
        self.child_end, self._parent_end = Pipe(duplex=False)

    def close(self) -> None:
        """Let go of the lifeline: children still watching it exit."""
        self._parent_end.close()
        self.child_end.close()


def exit_with_parent(child_end: Connection) -> None:
    """In a child: exit as soon as the parent's end of the lifeline closes, whatever the child is doing then."""
    threading.Thread(target=_exit_at_end_of_file, args=(child_end,), name="exit-with-parent", daemon=True).start()


def _exit_at_end_of_file(child_end: Connection) -> None:
    with suppress(EOFError):
        child_end.recv_bytes()  # nothing is ever sent: this returns only at end-of-file
    os._exit(1)  # at once: the work in hand has no one to answer to, and no one waits for this process
