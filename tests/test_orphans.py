"""`kill -9` of `pia serve` while it checks uploads leaves nothing of it running (issue 17): its upload worker
processes, their fork server and multiprocessing's resource tracker end within 5 s of it, on both backends, as /proc
shows."""

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

import httpx

from db.clients import DEMAND_PLANNING_PERMISSION
from db.tenants import create_tenant
from serving.admin import issue_client
from tests.batches import body, envelope, forecast_item, new_batch_id
from tests.conftest import TLS, bearer, free_port, wait_for
from tests.leftover_processes import descendants, left_behind, still_running

PIA = str(Path(sys.executable).parent / "pia")
# The bound issue 17 states: a process of pia serve still running this long after it was killed is an orphan.
ORPHAN_SECONDS = 5.0


class Uploader(threading.Thread):
    """Uploads the same batch under new ids, back to back, until the server goes away."""

    def __init__(self, url: str, path: str, token: str) -> None:
        super().__init__(daemon=True)
        self.url, self.path = url, path
        # Big enough to keep a worker process busy for a while (decompress, parse, check, stage).
        self.body, headers = body(envelope([forecast_item(str(100_000 + n)) for n in range(3_000)]))
        self.headers = {**bearer(token), **headers}
        self.accepted = threading.Event()
        self.refused: list[str] = []  # answers other than 202: none expected
        self.cut_off = False  # an upload was in flight when the server died

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            while True:
                try:
                    response = http.put(f"{self.path}/{new_batch_id()}", content=self.body, headers=self.headers)
                except httpx.TransportError:
                    self.cut_off = True
                    return
                if response.status_code != 202:
                    self.refused.append(f"{response.status_code} {response.text}")
                    return
                self.accepted.set()


def _answers(url: str, process: subprocess.Popen) -> bool:
    assert process.poll() is None, f"pia serve exited with {process.returncode}"
    try:
        return httpx.get(f"{url}/healthcheck", timeout=2, verify=TLS).status_code == 200
    except httpx.TransportError:
        return False


def test_kill_9_of_pia_serve_during_uploads_leaves_none_of_its_processes(own_store) -> None:
    settings, engine = own_store
    tenant_id = create_tenant(engine, "orphans", is_test=True)
    client_id, secret = issue_client(engine, tenant_id, "planner", "demand_planning", None,
                                     (DEMAND_PLANNING_PERMISSION,))
    engine.dispose()  # on DuckDB the server process owns the file from here
    environment = {**os.environ, "PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
                   "PIA_SECRET_KEY": settings.secret_key.get_secret_value(), "PIA_UPLOAD_PROCESSES": "2"}
    url = f"http://127.0.0.1:{(port := free_port())}"
    before = set(descendants(os.getpid()))
    # A session of its own: whatever the test's outcome, the finally below ends the whole group.
    server = subprocess.Popen([PIA, "serve", "--host", "127.0.0.1", "--port", str(port)], env=environment,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: _answers(url, server), 120, "pia serve to answer")
        token = httpx.post(f"{url}/oauth2/token", auth=(client_id, secret), data={
            "grant_type": "client_credentials", "scope": "demand_planning", "tenant_id": tenant_id}).json()
        uploaders = [Uploader(url, f"/v1/tenants/{tenant_id}/demand_planning/sales_forecast_batches",
                              token["access_token"]) for _ in range(2)]
        for uploader in uploaders:
            uploader.start()
        for uploader in uploaders:
            assert uploader.accepted.wait(120), f"no upload was accepted: {uploader.refused}"
        family = descendants(server.pid)
        commands = [process.command for process in family.values()]
        # The upload workers, forked from the server's fork server, and multiprocessing's resource tracker.
        (fork_server,) = [process for process in family.values()
                          if process.parent == server.pid and "multiprocessing.forkserver" in process.command]
        assert sum(process.parent == fork_server.pid for process in family.values()) == 2, commands
        assert sum("multiprocessing.resource_tracker" in command for command in commands) == 1, commands

        server.kill()  # SIGKILL, in the middle of the uploads
        killed = time.monotonic()
        server.wait(timeout=10)
        for uploader in uploaders:
            uploader.join(timeout=60)
        assert [uploader.refused for uploader in uploaders] == [[], []]
        assert any(uploader.cut_off for uploader in uploaders)  # the server died with an upload in hand

        def its_processes_running() -> list:
            # Those it had, and any it started since: with pytest adopting orphans, those are pytest's now.
            since = set(descendants(os.getpid())) - before
            return still_running(set(family) | since)

        while (left := its_processes_running()) and time.monotonic() - killed < ORPHAN_SECONDS:
            time.sleep(0.05)
        print(f"last process of pia serve ended {time.monotonic() - killed:.2f} s after kill -9")
        assert left == [], f"still running {ORPHAN_SECONDS} s after kill -9 of pia serve: " + "; ".join(map(str, left))
    finally:
        with suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # the group outlives its leader: anything left of it
        server.wait(timeout=10)


def test_the_session_check_finds_what_outlived_its_parent_and_ends_it() -> None:
    """What conftest's check at the end of the run relies on: pytest adopts a process whose parent ended, so it is
    still found among pytest's descendants, named, and killed."""
    before = set(descendants(os.getpid()))
    subprocess.run(["sh", "-c", "sleep 600 &"], check=True)  # sh ends at once, its child goes on
    left = left_behind(ignored=before, grace_seconds=0)
    assert [process.command for process in left] == ["sleep 600"]
    assert left[0].parent == os.getpid()  # adopted
    wait_for(lambda: not still_running({left[0].pid}), 10, "the leftover to be killed")
