"""`pia demo` end to end: a real process, its credentials file, the printed curl, and a second run."""

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import free_port

PIA = str(Path(sys.executable).parent / "pia")


class Demo:
    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [PIA, "demo", "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            self.lines.append(line)
            if "Running on" in line:
                return
            if self.process.poll() is not None:
                break
        self.stop()
        raise AssertionError("pia demo did not start:\n" + "".join(self.lines))

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=20)


def test_first_run_seeds_writes_credentials_and_prints_a_working_curl(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    demo = Demo(data_dir)
    try:
        credentials = json.loads((data_dir / "demo-credentials.json").read_text())
        assert credentials["baseUrl"] == demo.url and credentials["tokenUrl"] == f"{demo.url}/oauth2/token"
        tenants = credentials["tenants"]
        assert sorted(t["test"] for t in tenants) == [False, True]
        for tenant in tenants:
            assert len(tenant["ecomStores"]) >= 2 and not all(s["released"] for s in tenant["ecomStores"])
            assert tenant["loyaltyPrograms"] and tenant["loyaltyPrograms"][0]["name"]
            by_scope = [(c["scope"], c["resource"], tuple(c["permissions"])) for c in tenant["clients"]]
            assert {r for s, r, _ in by_scope if s == "ecom"} == {s["id"] for s in tenant["ecomStores"]}
            assert ("loyalty_programs", tenant["loyaltyPrograms"][0]["id"], ()) in by_scope
            assert ("demand_planning", None, ("demand_planning",)) in by_scope
            assert ("demand_planning", None, ()) in by_scope

        curl = next(line.strip() for line in demo.lines if line.strip().startswith("curl "))
        token = json.loads(subprocess.run(shlex.split(curl), capture_output=True, text=True,
                                          check=True).stdout)["access_token"]
        tenant = next(t for t in tenants if not t["test"])
        stores = httpx.get(f"{demo.url}/v1/tenants/{tenant['id']}/demand_planning/retail_stores",
                           headers={"Authorization": f"Bearer {token}"}).json()["items"]
        assert len(stores) >= 3 and {"RELEASED", "NOT_RELEASED"} <= {s["status"] for s in stores}
    finally:
        demo.stop()


def test_second_run_reuses_tenants_and_secrets(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    Demo(data_dir).stop()  # the first run, which seeds; this test must not rely on another test's run
    before = json.loads((data_dir / "demo-credentials.json").read_text())
    demo = Demo(data_dir)
    try:
        assert any("reusing" in line for line in demo.lines)
        after = json.loads((data_dir / "demo-credentials.json").read_text())
        assert [t["id"] for t in after["tenants"]] == [t["id"] for t in before["tenants"]]
        assert after["baseUrl"] == demo.url
        tenant = after["tenants"][0]
        client = next(c for c in tenant["clients"] if c["scope"] == "ecom")
        response = httpx.post(f"{demo.url}/oauth2/token", auth=(client["clientId"], client["clientSecret"]),
                              data={"grant_type": "client_credentials", "scope": "ecom",
                                    "resource": client["resource"], "tenant_id": tenant["id"]})
        assert response.status_code == 200
    finally:
        demo.stop()
