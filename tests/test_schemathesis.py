"""Schemathesis over the live server: every e-commerce and loyalty program operation, with a valid token, answers
no 5xx and nothing its OpenAPI document does not declare.

Operations are picked by their scope's tag, so routes added later are covered without touching this file. Each
gets a bounded, derandomized run (no shrinking) of valid examples, then of invalid ones (which must be refused
with a declared 4xx, never a 5xx): the same requests every run, a few seconds in CI.
"""

import time
from typing import Any

import httpx
import pytest
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as examples
from hypothesis.errors import Unsatisfiable
from pydantic import BaseModel, Field
from quart import Blueprint, Response, request
from quart_schema import document_querystring, document_response
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from contracts.openapi import SCOPES
from db.clients import update_client
from serving.demo import seed_demo_tenant
from serving.jsonio import json_response
from serving.protection import protect
from settings import Settings
from tests.conftest import LiveServer, bearer, client_of, get_token
from tests.probes import serving_with

EXAMPLES_PER_OPERATION = 25
FUZZED_SCOPES = ("ecom", "loyalty_programs")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


@pytest.fixture(scope="module")
def fuzzed_world(engine: sa.Engine, server: LiveServer) -> dict[str, Any]:
    """A tenant of its own (the run writes: customers, events), whose clients the run cannot rate-limit out."""
    world = seed_demo_tenant(engine, "schemathesis tenant", is_test=True)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for client in world["clients"]:
            update_client(engine, world["id"], client["clientId"], rate_limit_per_minute=1_000_000)
            client["token"] = get_token(http, world, client)
    return world


def _fixed_path_parameters(world: dict[str, Any]) -> dict[str, str]:
    """The token's own tenant and resources: the run explores the operations, not the 403s."""
    return {"tenantId": world["id"], "eComStoreId": client_of(world, "ecom")["resource"],
            "loyaltyProgramId": client_of(world, "loyalty_programs")["resource"]}


def _failure(operation: Any, path_parameters: dict[str, str], token: str,
             mode: GenerationMode = GenerationMode.POSITIVE) -> str | None:
    """What schemathesis found wrong with the operation (the first failing example's report), or None."""
    fixed = {name: value for name, value in path_parameters.items() if "{" + name + "}" in operation.path}

    @examples(max_examples=EXAMPLES_PER_OPERATION, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(mode, path_parameters=fixed, headers=bearer(token)))
    def exercise(case: schemathesis.Case) -> None:
        response = case.call(timeout=30)
        case.validate_response(response, checks=CHECKS)

    try:
        exercise()
    except Unsatisfiable:
        if mode is GenerationMode.NEGATIVE:
            return None  # the operation takes nothing that could be made invalid (its path is fixed)
        raise
    except (Exception, BaseExceptionGroup) as failure:  # schemathesis raises a group of its findings
        findings = "\n".join(map(str, getattr(failure, "exceptions", ())))
        return f"{operation.label} ({mode.value}):\n{failure}\n{findings}"
    return None


def test_ecom_and_loyalty_operations_hold_to_their_schemas(server: LiveServer, fuzzed_world: dict[str, Any],
                                                           backend: str) -> None:
    schema = schemathesis.openapi.from_url(f"{server.url}/v1/openapi.json")
    scope_of_tag = {SCOPES[scope]: scope for scope in FUZZED_SCOPES}
    path_parameters = _fixed_path_parameters(fuzzed_world)
    started, failures, ran = time.perf_counter(), [], []
    for result in schema.include(tag=list(scope_of_tag)).get_all_operations():
        operation = result.ok()
        scope = next(scope_of_tag[tag] for tag in operation.tags if tag in scope_of_tag)
        ran.append(operation.label)
        token = client_of(fuzzed_world, scope)["token"]
        failures += filter(None, (_failure(operation, path_parameters, token, mode) for mode in GenerationMode))
    print(f"\nschemathesis ({backend}): {len(ran)} operations × ≤{EXAMPLES_PER_OPERATION} valid and "
          f"≤{EXAMPLES_PER_OPERATION} invalid examples in {time.perf_counter() - started:.1f} s")
    assert ran, "no e-commerce or loyalty operation in the document"
    assert not failures, "\n\n".join(failures)


class Answer(BaseModel):
    count: int


class Count(BaseModel):
    count: int = Field(default=1, ge=0, le=1000)


def test_the_run_catches_a_5xx_and_a_body_that_breaks_its_schema(engine: sa.Engine, settings: Settings,
                                                                fuzzed_world: dict[str, Any]) -> None:
    """The checks are not vacuous: an eCom route that fails, one that answers another shape than it declares, and
    one that fails only on input it should refuse (the negative examples) are all reported."""
    probe = Blueprint("ecom_probe", __name__, url_prefix="/v1/tenants/<tenantId>/ecom_stores/<eComStoreId>/probe")
    protect(probe, "ecom", resource_arg="eComStoreId")

    @probe.get("/failing")
    @document_response(Answer, 200)
    async def failing(tenantId: str, eComStoreId: str) -> Response:
        raise RuntimeError("a bug")

    @probe.get("/parses_carelessly")
    @document_querystring(Count)
    @document_response(Answer, 200)
    async def parses_carelessly(tenantId: str, eComStoreId: str) -> Response:
        return json_response({"count": int(request.args.get("count", "1"))})

    @probe.get("/wrong_shape")
    @document_response(Answer, 200)
    async def wrong_shape(tenantId: str, eComStoreId: str) -> Response:
        return json_response({"count": "many"})

    with serving_with(settings, engine, probe) as live:
        with httpx.Client(base_url=live.url, timeout=30) as http:
            token = get_token(http, fuzzed_world, client_of(fuzzed_world, "ecom"))
        schema = schemathesis.openapi.from_url(f"{live.url}/v1/openapi.json").include(path_regex="/probe/")
        found = {(result.ok().path.rsplit("/", 1)[1], mode): _failure(
                     result.ok(), _fixed_path_parameters(fuzzed_world), token, mode)
                 for result in schema.get_all_operations() for mode in GenerationMode}
    positive, negative = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
    assert "Server error" in found["failing", positive]
    assert "Response violates schema" in found["wrong_shape", positive]
    assert found["parses_carelessly", positive] is None
    assert "Server error" in found["parses_carelessly", negative]
