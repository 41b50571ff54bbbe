"""serving.heap: what a long-running process holds after start-up is frozen, later garbage is still collected, and the
heap is thawed at exit."""

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import atexit, gc
    import sqlalchemy  # a start-up's worth of objects
    from serving.heap import freeze_startup_heap

    # atexit calls the last registered first: this one runs after the thaw freeze_startup_heap registers.
    atexit.register(lambda: print("frozen at exit", gc.get_freeze_count()))
    freeze_startup_heap()
    print("frozen", gc.get_freeze_count())
    cycle = []
    cycle.append(cycle)
    del cycle
    print("collected later", gc.collect())
""")


def test_startup_objects_are_frozen_later_garbage_collected_and_the_heap_thawed_at_exit() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True)
    figures = {name: int(value) for name, value in (line.rsplit(" ", 1) for line in done.stdout.splitlines())}
    assert figures["frozen"] > 10_000
    assert figures["collected later"] >= 1
    assert figures["frozen at exit"] == 0
