"""The OpenAPI document is generated from the routes, valid OpenAPI 3.1, covers exactly the served routes, and
real responses of real HTTP requests match the schemas it declares."""

import gzip
import re

import httpx
import orjson
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from pydantic import BaseModel, EmailStr
from quart import Blueprint, Quart
from quart_schema import document_request, document_response

from contracts.errors import InvalidRequest
from contracts.held_datasets import ARROW_STREAM, NEXT_CURSOR_HEADER, PARQUET
from contracts.models import Error, InvalidRequestError
from db.clients import SCOPES
from serving.app import create_app
from serving.openapi import BROWSER_BLUEPRINTS, attach_openapi, openapi_json
from serving.protection import authorized_parameters, checks_requests, protect, protected_scope
from serving.validation import validated
from settings import Settings
from tests.batches import body, envelope, forecast_item, new_batch_id, replenishment_item
from tests.conftest import bearer, client_of, wait_for
from tests.openapi_check import assert_response_matches

SHARED_ERRORS = {"401", "403", "429", "500"}


@pytest.fixture(scope="module")
def app() -> Quart:
    return create_app(Settings(data_dir="/nonexistent"), engine=None, issuer="http://x")  # type: ignore[arg-type]


@pytest.fixture
def document(http: httpx.Client) -> dict:
    response = http.get("/v1/openapi.json")
    assert_response_matches(response.json(), response)
    return response.json()


def _operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _served(app: Quart) -> dict[tuple[str, str], str]:
    """(method, path) → endpoint, for every route of the URL map but the console's pages for a browser."""
    served = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint.partition(".")[0] in BROWSER_BLUEPRINTS:
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        served |= {(method.lower(), path): rule.endpoint for method in rule.methods - {"HEAD", "OPTIONS"}}
    return served


def test_document_is_valid_openapi_31_with_both_security_schemes(document: dict, server) -> None:
    validate(document)
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": server.url}]
    schemes = document["components"]["securitySchemes"]
    assert schemes["OAuth2"]["flows"]["clientCredentials"]["tokenUrl"] == f"{server.url}/oauth2/token"
    assert set(schemes["OAuth2"]["flows"]["clientCredentials"]["scopes"]) == {
        "ecom", "loyalty_programs", "demand_planning", "admin"}
    assert schemes["BearerAuth"] == {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    operation_ids = [operation["operationId"] for _, _, operation in _operations(document)]
    assert len(operation_ids) == len(set(operation_ids))


def test_every_served_route_is_documented_and_nothing_else(document: dict, app: Quart) -> None:
    documented = {(method, path) for method, path, _ in _operations(document)}
    assert set(_served(app)) == documented


def test_every_operation_declares_a_success_answer(document: dict) -> None:
    """With its body, except a 204, which has none."""
    undeclared = {(method, path) for method, path, operation in _operations(document)
                  if not any(status.startswith("2") and ("content" in answer) != (status == "204")
                             for status, answer in operation["responses"].items())}
    assert undeclared == set()


def test_protected_routes_carry_their_scope_and_the_shared_errors(document: dict, app: Quart) -> None:
    """Security, tag and 401/403/429 come from the blueprint `protect` guards; open routes say so."""
    served = _served(app)
    scopes = set()
    for method, path, operation in _operations(document):
        endpoint = served[(method, path)]
        scope = protected_scope(app.blueprints.get(endpoint.rpartition(".")[0]))
        assert "500" in operation["responses"]
        if scope is None:
            assert operation["security"] == [], (method, path)
            continue
        scopes.add(scope)
        assert operation["security"] == [{"OAuth2": [scope]}, {"BearerAuth": []}], (method, path)
        assert len(operation["tags"]) == 1
        assert set(operation["responses"]) >= SHARED_ERRORS, (method, path)
        assert operation["responses"]["401"]["headers"]["WWW-Authenticate"]["required"]
        assert operation["responses"]["429"]["headers"]["Retry-After"]["required"]
    assert scopes == set(SCOPES)


def test_checked_routes_declare_their_415_and_the_400_of_their_path_parameters(document: dict, app: Quart) -> None:
    """Where `protect` has requests checked before the route (serving.validation.check_request), a JSON body may be
    refused with 415 and a path parameter the token does not name with 400; demand planning declares its own."""
    served = _served(app)
    checked = 0
    for method, path, operation in _operations(document):
        blueprint = app.blueprints.get(served[(method, path)].rpartition(".")[0])
        if not checks_requests(blueprint):
            continue
        checked += 1
        if "requestBody" in operation:
            assert "415" in operation["responses"], (method, path)
        named = {parameter["name"] for parameter in operation.get("parameters", ()) if parameter["in"] == "path"}
        if named - authorized_parameters(blueprint):
            assert "400" in operation["responses"], (method, path)
    assert checked > 30


def test_token_endpoints_take_form_and_json_and_uploads_declare_their_envelope(document: dict) -> None:
    for path in ("/oauth2/token", "/v1/tenants/{tenantId}/oauth2/v2.0/token"):
        content = document["paths"][path]["post"]["requestBody"]["content"]
        assert set(content) == {"application/x-www-form-urlencoded", "application/json"}
    upload = document["paths"]["/v1/tenants/{tenantId}/demand_planning/sales_forecast_batches/{batchId}"]["put"]
    assert upload["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SalesForecastBatch"}
    assert {"name": "content-encoding", "in": "header", "schema": {"enum": ["gzip", "identity"], "type": "string"},
            "description": "gzip when compressed."} in upload["parameters"]
    assert upload["responses"]["202"]["headers"]["Location"]["required"]
    schemas = document["components"]["schemas"]
    assert schemas["SalesForecastItem"]["properties"]["quantities"]["maxItems"] == 62
    assert set(schemas["Limits"]["required"]) >= {"maxItemsPerBatch", "rateLimitPerMinute"}


class Thing(BaseModel):
    name: str


def test_models_sharing_a_name_stay_distinct_components() -> None:
    """Two helpers' `Thing`s must not overwrite each other (quart-schema alone would keep the last one)."""
    other = type("Thing", (BaseModel,), {"__annotations__": {"count": int}, "__module__": "elsewhere"})
    app = Quart("sample", static_folder=None)
    first = Blueprint("first", __name__, url_prefix="/v1/tenants/<tenantId>/first")
    second = Blueprint("second", __name__)
    protect(first, "ecom")

    @first.put("/things")
    @document_request(Thing)
    @document_response(Thing, 200)
    @document_response(Error, 404)
    async def put_thing(tenantId: str) -> dict:
        return {}

    @second.get("/others")
    @document_response(other, 200)
    async def get_other() -> dict:
        return {}

    app.register_blueprint(first)
    app.register_blueprint(second)
    attach_openapi(app, "http://x")
    document = orjson.loads(openapi_json(app))
    validate(document)
    schemas = document["components"]["schemas"]
    mine = document["paths"]["/v1/tenants/{tenantId}/first/things"]["put"]
    theirs = document["paths"]["/others"]["get"]
    mine_ref = mine["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    theirs_ref = theirs["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert mine_ref != theirs_ref
    assert set(schemas[mine_ref.rsplit("/", 1)[1]]["properties"]) == {"name"}
    assert set(schemas[theirs_ref.rsplit("/", 1)[1]]["properties"]) == {"count"}
    request_ref = mine["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert set(schemas[request_ref.rsplit("/", 1)[1]]["properties"]) == {"name"}
    assert mine["security"] == [{"OAuth2": ["ecom"]}, {"BearerAuth": []}] and theirs["security"] == []


# Real responses against the document


def _token_data(world: dict, client: dict) -> dict[str, str]:
    return {"grant_type": "client_credentials", "tenant_id": world["id"], "client_id": client["clientId"],
            "client_secret": client["clientSecret"]}


def test_open_routes_answer_as_documented(http: httpx.Client, document: dict, shared_world: dict) -> None:
    client = client_of(shared_world, "demand_planning")
    responses = [http.get(path) for path in ("/healthcheck", "/.well-known/jwks.json",
                                              "/.well-known/oauth-authorization-server",
                                              "/.well-known/openid-configuration")]
    responses += [
        http.post("/oauth2/token", data=_token_data(shared_world, client)),
        http.post("/oauth2/token", json=_token_data(shared_world, client)),
        http.post(f"/v1/tenants/{shared_world['id']}/oauth2/v2.0/token",
                  data={**_token_data(shared_world, client), "tenant_id": shared_world["id"]}),
        http.post("/oauth2/token", data={**_token_data(shared_world, client), "grant_type": "password"}),
        http.post("/oauth2/token", data={**_token_data(shared_world, client), "client_secret": "wrong"}),
    ]
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 200, 200, 200, 400, 401]
    for response in responses:
        assert_response_matches(document, response)


def test_protected_reads_and_errors_answer_as_documented(http: httpx.Client, document: dict, shared_world: dict,
                                                        cached_token) -> None:
    planning = f"/v1/tenants/{shared_world['id']}/demand_planning"
    token = bearer(cached_token(shared_world, client_of(shared_world, "demand_planning")))
    ecom_token = bearer(cached_token(shared_world, client_of(shared_world, "ecom")))
    expected = {
        (f"{planning}/limits", "GET", "token"): 200,
        (f"{planning}/retail_stores", "GET", "token"): 200,
        (f"{planning}/ecom_stores", "GET", "token"): 200,
        (f"{planning}/sales_forecasts?limit=2", "GET", "token"): 200,
        (f"{planning}/replenishment_parameters?limit=2", "GET", "token"): 200,
        (f"{planning}/sales_forecasts?limit=0", "GET", "token"): 400,
        (f"{planning}/replenishment_parameters?modifiedSince=yesterday", "GET", "token"): 400,
        (f"{planning}/sales_forecast_batches/{new_batch_id()}", "GET", "token"): 404,
        (f"{planning}/limits", "GET", "none"): 401,
        (f"{planning}/limits", "GET", "ecom"): 403,
        (f"{planning}/limits", "POST", "token"): 405,
        ("/v1/tenants/nobody/nothing", "GET", "token"): 404,
    }
    headers = {"token": token, "ecom": ecom_token, "none": {}}
    for (path, method, who), status in expected.items():
        response = http.request(method, path, headers=headers[who])
        assert response.status_code == status, (path, method, response.text)
        assert_response_matches(document, response)


def test_columnar_answers_are_documented_and_answer_as_documented(http: httpx.Client, document: dict,
                                                                 shared_world: dict, cached_token) -> None:
    planning = f"/v1/tenants/{shared_world['id']}/demand_planning"
    paths = document["paths"]
    prefix = "/v1/tenants/{tenantId}/demand_planning"
    for collection in ("sales_forecasts", "replenishment_parameters"):
        success = paths[f"{prefix}/{collection}"]["get"]["responses"]["200"]
        assert set(success["content"]) == {"application/json", ARROW_STREAM}
        assert success["headers"][NEXT_CURSOR_HEADER]["required"] is False
        export = paths[f"{prefix}/{collection}/export"]["get"]
        assert set(export["responses"]["200"]["content"]) == {ARROW_STREAM, PARQUET}
        assert export["security"] == [{"OAuth2": ["demand_planning"]}, {"BearerAuth": []}]
    layout = next(parameter for parameter in paths[f"{prefix}/sales_forecasts/export"]["get"]["parameters"]
                  if parameter["name"] == "layout")
    assert layout["in"] == "query" and layout["schema"]["enum"] == ["horizon", "daily"]

    token = bearer(cached_token(shared_world, client_of(shared_world, "demand_planning")))
    arrow, parquet = {**token, "Accept": ARROW_STREAM}, {**token, "Accept": PARQUET}
    expected = [(f"{planning}/sales_forecasts?limit=2", arrow, 200),
                (f"{planning}/replenishment_parameters?limit=2", arrow, 200),
                (f"{planning}/sales_forecasts/export?layout=daily", arrow, 200),
                (f"{planning}/sales_forecasts/export", parquet, 200),
                (f"{planning}/replenishment_parameters/export", parquet, 200),
                (f"{planning}/sales_forecasts/export?layout=wide", arrow, 400),
                (f"{planning}/replenishment_parameters/export", {}, 401)]
    for path, headers, status in expected:
        response = http.get(path, headers=headers)
        assert response.status_code == status, (path, response.text)
        assert_response_matches(document, response)


def test_uploads_and_batch_status_answer_as_documented(http: httpx.Client, document: dict, world: dict,
                                                       cached_token) -> None:
    planning = f"/v1/tenants/{world['id']}/demand_planning"
    token = bearer(cached_token(world, client_of(world, "demand_planning")))
    batch_id = new_batch_id()
    forecast, headers = body(envelope([forecast_item("100001"), forecast_item("100002", retail="9999")]))
    url = f"{planning}/sales_forecast_batches/{batch_id}"
    checked = [http.put(url, content=forecast, headers={**token, **headers}),
               http.put(url, content=forecast, headers={**token, **headers})]
    other, _ = body(envelope([forecast_item("100003")]))
    not_json, _ = body({"generatedAt": 1}, gzipped=False)
    bomb = gzip.compress(b" " * 2_000_000)  # decompresses to over 100 times its size
    checked += [
        http.put(url, content=other, headers={**token, **headers}),
        http.put(f"{planning}/sales_forecast_batches/{new_batch_id()}", content=b"{", headers={
            **token, "Content-Type": "application/json"}),
        http.put(f"{planning}/sales_forecast_batches/{new_batch_id()}", content=not_json, headers={
            **token, "Content-Type": "application/json"}),
        http.put(f"{planning}/sales_forecast_batches/{new_batch_id()}", content=bomb, headers={**token, **headers}),
        http.put(f"{planning}/sales_forecast_batches/{new_batch_id()}", content=forecast, headers={
            **token, "Content-Type": "text/plain"}),
    ]
    parameters, _ = body(envelope([replenishment_item("100001")]))
    checked.append(http.put(f"{planning}/replenishment_parameter_batches/{new_batch_id()}", content=parameters,
                            headers={**token, **headers}))
    assert [r.status_code for r in checked] == [202, 200, 409, 400, 400, 413, 415, 202]
    finished = wait_for(lambda: (r := http.get(url, headers=token)).json()["progress"] not in ("PENDING",
                                                                                             "PROCESSING") and r,
                        30, "the batch to finish")
    assert finished.json()["counts"] is not None
    for response in [*checked, finished]:
        assert_response_matches(document, response)


def test_the_checker_catches_a_response_the_document_does_not_declare(http: httpx.Client,
                                                                      document: dict) -> None:
    """The checker itself: a body that breaks the schema, an undeclared status, or a missing header, fails."""
    response = http.get("/healthcheck")
    assert_response_matches(document, response)
    broken = httpx.Response(200, json={"status": "fine"}, headers=response.headers, request=response.request)
    with pytest.raises(AssertionError, match="breaks the documented schema"):
        assert_response_matches(document, broken)
    teapot = httpx.Response(418, json={}, headers=response.headers, request=response.request)
    with pytest.raises(AssertionError, match="status not documented"):
        assert_response_matches(document, teapot)
    anonymous = httpx.Response(200, json=response.json(), request=response.request)
    with pytest.raises(AssertionError, match="required header X-Request-Id missing"):
        assert_response_matches(document, anonymous)


def test_the_shared_invalid_request_model_describes_what_request_validation_answers() -> None:
    """Routes that check bodies with serving.validation declare their 400 with InvalidRequestError."""

    class Person(BaseModel):
        email: EmailStr
        age: int

    with pytest.raises(InvalidRequest) as refused:
        validated(Person, {"email": "not an address", "age": "old"})
    body = refused.value.body()
    assert [problem["path"] for problem in body["details"]["errors"]] == ["email", "age"]
    Draft202012Validator(InvalidRequestError.model_json_schema(mode="serialization")).validate(body)
