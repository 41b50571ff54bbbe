"""The logs of a real `pia serve` writing JSON, after a run of every scope, the admin API and the token endpoint:
every line is a JSON object, every request has one line with what operators need, and no secret, token, request
body or query string is in any of them (nor are the destinations' secrets, while the bridge fails to deliver)."""

import base64
import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from db.engine import create_engine
from db.migrate import upgrade
from serving.demo import seed_demo_tenant
from settings import Settings
from tests.batches import body, envelope, forecast_item, new_batch_id
from tests.conftest import bearer, client_of, wait_for
from tests.served_process import clean_environment, served

PIA = Path(sys.executable).parent / "pia"
# DuckDB's bindings print leak notices of their own at interpreter exit, outside logging.
NOT_LOGGING = ("nanobind: ", "See https://nanobind")


def marker(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex}"


@dataclass
class Run:
    """What the run sent and got back, and what the server logged meanwhile."""

    world: dict[str, Any]
    answers: list[tuple[httpx.Response, str | None]]  # each answer, and the client id its token belongs to
    hidden: list[str]  # secrets, tokens, body and query values: none may be in the log
    log: str = ""

    def send(self, http: httpx.Client, method: str, path: str, client_id: str | None = None,
             **options: Any) -> httpx.Response:
        answer = http.request(method, path, **options)
        self.answers.append((answer, client_id))
        return answer

    def token(self, http: httpx.Client, client: dict[str, Any], how: str = "basic") -> str:
        form = {"grant_type": "client_credentials", "scope": client["scope"], "tenant_id": self.world["id"]}
        credentials = {"client_id": client["clientId"], "client_secret": client["clientSecret"]}
        options: dict[str, Any] = {"basic": {"data": form, "auth": (client["clientId"], client["clientSecret"])},
                                   "form": {"data": form | credentials}, "json": {"json": form | credentials}}[how]
        answer = self.send(http, "POST", "/oauth2/token", **options)
        assert answer.status_code == 200, answer.text
        token = answer.json()["access_token"]
        self.hidden.append(token)
        return token


def exercise(http: httpx.Client, run: Run) -> None:
    world, tenant = run.world, run.world["id"]
    for client in world["clients"]:
        run.hidden += [client["clientSecret"],
                       base64.b64encode(f"{client['clientId']}:{client['clientSecret']}".encode()).decode()]
    planner, admin = client_of(world, "demand_planning"), client_of(world, "admin")
    shop, program = client_of(world, "ecom"), client_of(world, "loyalty_programs")
    tokens = {c["clientId"]: run.token(http, c) for c in (planner, admin, shop, program)}
    run.token(http, shop, "form")
    run.token(http, program, "json")
    wrong = marker("wrong-secret")
    run.hidden.append(wrong)
    refused = run.send(http, "POST", "/oauth2/token", auth=(planner["clientId"], wrong),
                       data={"grant_type": "client_credentials", "tenant_id": tenant})
    assert refused.status_code == 401

    planning = f"/v1/tenants/{tenant}/demand_planning"
    query = marker("query")
    run.hidden.append(query)
    assert run.send(http, "GET", f"{planning}/limits?note={query}", planner["clientId"],
                    headers=bearer(tokens[planner["clientId"]]) | {"X-Request-Id": "trace-42.abc"}).status_code == 200
    note = marker("body")
    run.hidden.append(note)
    item = forecast_item("100001") | {"plannerNote": note}
    content, headers = body(envelope([item]), gzipped=False)
    assert run.send(http, "PUT", f"{planning}/sales_forecast_batches/{new_batch_id()}", planner["clientId"],
                    content=content, headers=headers | bearer(tokens[planner["clientId"]])).status_code == 202
    forged = marker("forged-token")
    run.hidden.append(forged)
    assert run.send(http, "GET", f"{planning}/limits", headers=bearer(forged)).status_code == 401

    store = f"/v1/tenants/{tenant}/ecom_stores/{shop['resource']}"
    assert run.send(http, "GET", f"{store}/products?limit=3", shop["clientId"],
                    headers=bearer(tokens[shop["clientId"]])).status_code == 200
    name = marker("Name")
    run.hidden.append(name)
    assert run.send(http, "PUT", f"{store}/customers/{uuid.uuid4()}", shop["clientId"],
                    json={"firstName": name, "lastName": name},
                    headers=bearer(tokens[shop["clientId"]])).status_code in (200, 201)
    assert run.send(http, "GET", f"/v1/tenants/{tenant}/loyalty_programs/{program['resource']}/retail_stores",
                    program["clientId"], headers=bearer(tokens[program["clientId"]])).status_code == 200

    # The admin API, and event destinations the bridge will fail to reach (their secrets must stay out of its logs):
    # each store's events, triggered once its destination is set, are tried and fail.
    back_office = f"/admin/v1/tenants/{tenant}/ecom_stores"
    destinations = [{"kind": "WEBHOOK", "url": "https://127.0.0.1:9/pia", "secret": marker("webhook-secret")},
                    {"kind": "SERVICE_BUS", "endpoint": "pia-test.invalid", "entityPath": "events",
                     "sharedAccessKeyName": "send", "sharedAccessKey": marker("service-bus-key")}]
    for index, destination in enumerate(destinations):
        run.hidden.append(destination.get("secret") or destination["sharedAccessKey"])
        store_client = client_of(world, "ecom", index=index)
        store_id = store_client["resource"]
        assert run.send(http, "PUT", f"{back_office}/{store_id}/event_destination", admin["clientId"],
                        json=destination, headers=bearer(tokens[admin["clientId"]])).status_code == 200
        token = tokens.get(store_client["clientId"]) or run.token(http, store_client)
        assert run.send(http, "POST", f"/v1/tenants/{tenant}/ecom_stores/{store_id}/inventory/trigger_events",
                        store_client["clientId"], headers=bearer(token)).status_code in (200, 202)

        def failed_once(store_id: str = store_id) -> bool:
            time.sleep(0.5)
            state = run.send(http, "GET", f"{back_office}/{store_id}/event_delivery", admin["clientId"],
                             headers=bearer(tokens[admin["clientId"]])).json()
            return state["consecutiveFailures"] >= 1

        wait_for(failed_once, 120, f"a failed delivery to {destination['kind']}")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    data = tmp_path_factory.mktemp("logged")
    engine = create_engine(Settings(data_dir=data))
    upgrade(engine)
    world = seed_demo_tenant(engine, "Logged Retail", is_test=True)
    engine.dispose()  # the DuckDB file is the server's now
    done = Run(world, [], [])
    output = data / "serve.log"
    with served(PIA, clean_environment(PIA_DATA_DIR=str(data), PIA_LOG_FORMAT="json"), data, output) as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        exercise(http, done)
    done.log = output.read_text()
    return done


def test_every_line_is_a_json_object_and_every_request_has_its_line(run: Run) -> None:
    lines = [json.loads(line) for line in run.log.splitlines() if line.strip() and not line.startswith(NOT_LOGGING)]
    assert all(isinstance(line, dict) and {"time", "level", "logger", "event"} <= line.keys() for line in lines)
    requests = {line["request_id"]: line for line in lines if line["logger"] == "pia.request"
                and line["event"] == "request"}
    for answer, client_id in run.answers:
        line = requests[answer.headers["X-Request-Id"]]
        assert (line["method"], line["status"]) == (answer.request.method, answer.status_code)
        assert line["route"].startswith("/") and "<" in line["route"] or line["route"] == "/oauth2/token"
        assert line["client_id"] == client_id
        assert line["tenant_id"] == (run.world["id"] if client_id else None)
        assert line["client_address"] == "127.0.0.1" and line["duration_ms"] >= 0 and line["level"] == "info"
        assert line["time"].endswith("Z")
    assert "trace-42.abc" in requests  # a caller's sane request id is the line's and the answer's


def test_no_secret_token_body_or_query_value_is_logged(run: Run) -> None:
    assert len(run.hidden) > 20
    leaked = [value for value in run.hidden if value in run.log]
    assert leaked == []


@pytest.mark.parametrize("log_format", [None, "json", "text"])
def test_pia_log_format_chooses_json_lines_or_text(log_format: str | None, tmp_path: Path) -> None:
    settings = {"PIA_DATA_DIR": str(tmp_path)} | ({"PIA_LOG_FORMAT": log_format} if log_format else {})
    done = subprocess.run([str(PIA), "db", "upgrade"], env=clean_environment(**settings), capture_output=True,
                          text=True, timeout=300, check=True)
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith(NOT_LOGGING)]
    migrations = [line for line in lines if "Running upgrade" in line]
    assert migrations, done.stderr
    if log_format == "text":
        assert not any(line.startswith("{") for line in lines)
        assert all("[info     ] Running upgrade" in line for line in migrations)
    else:  # JSON unless told otherwise (text only for pia demo on a terminal)
        assert all(json.loads(line)["logger"] == "alembic.runtime.migration" for line in migrations)
        assert all(isinstance(json.loads(line), dict) for line in lines)
