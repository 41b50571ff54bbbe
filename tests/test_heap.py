"""serving.heap: what a long-running process holds after start-up is frozen, young garbage is collected less often but
still collected, and the heap is thawed at exit."""

import subprocess
import sys
import textwrap

from serving.heap import YOUNG_GENERATION_THRESHOLD

CYCLES = 120_000
PROBE = textwrap.dedent(f"""
    import atexit, gc
    import sqlalchemy  # a start-up's worth of objects
    from serving.heap import collect_young_garbage_less_often, freeze_startup_heap

    # atexit calls the last registered first: this one runs after the thaw freeze_startup_heap registers.
    atexit.register(lambda: print("frozen at exit", gc.get_freeze_count()))
    freeze_startup_heap()
    print("frozen", gc.get_freeze_count())
    collect_young_garbage_less_often()  # the API server's
    print("young threshold", gc.get_threshold()[0])
    young_before = gc.get_stats()[0]["collections"]
    for _ in range({CYCLES}):  # each a container no reference count frees: only the collector does
        cycle = []
        cycle.append(cycle)
    print("automatic young collections", gc.get_stats()[0]["collections"] - young_before)
    cycle = []
    cycle.append(cycle)
    del cycle
    print("collected later", gc.collect())
""")


def test_startup_objects_are_frozen_later_garbage_collected_less_often_and_the_heap_thawed_at_exit() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True)
    figures = {name: int(value) for name, value in (line.rsplit(" ", 1) for line in done.stdout.splitlines())}
    assert figures["frozen"] > 10_000
    assert figures["young threshold"] == YOUNG_GENERATION_THRESHOLD > 700  # Python's default
    # Young garbage is still collected without being asked, once per threshold's worth rather than per 700.
    assert 1 <= figures["automatic young collections"] <= CYCLES // YOUNG_GENERATION_THRESHOLD
    assert figures["collected later"] >= 1
    assert figures["frozen at exit"] == 0
