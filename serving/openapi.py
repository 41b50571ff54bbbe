"""The OpenAPI 3.1 document at /v1/openapi.json, generated from the routes by quart-schema.

Routes declare their shapes with quart-schema's decorators (`document_response`, `document_request`,
`document_querystring`, `document_headers`) and pydantic models in `contracts/`. This provider adds what holds
for whole groups of routes, so nobody writes it per route:

- a blueprint guarded by `protect` gets both security schemes with its scope, its scope's tag and the 401, 403 and
  429 answers; where `protect` checks requests, a route with a JSON body may answer 415 and one with path parameters
  beyond those the token names 400 (serving.validation.check_request); every operation may answer 500; all of
  these with the Error body (400: InvalidRequestError);
- all models go through ONE pydantic schema generation, so a model several routes share is one component, and
  two different models of one name get distinct names instead of one silently replacing the other;
- path parameters are described, operation ids are unique (the endpoint's name), response headers sit where
  OpenAPI wants them (quart-schema puts them under `content`), and the headers the app adds to whole groups of
  answers are declared (X-Request-Id on all, the rate-limit headers on protected ones, Retry-After on 429).

Responses stay plain dicts rendered by orjson: the models only document them (no validate_response).
"""

import copy
import inspect
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any, TypeVar

import orjson
from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema
from quart import Quart
from quart_schema import QuartSchema
from quart_schema.openapi import QUART_SCHEMA_OPERATION_ID_ATTRIBUTE, OpenAPIProvider
from quart_schema.validation import QUART_SCHEMA_REQUEST_ATTRIBUTE, QUART_SCHEMA_RESPONSE_ATTRIBUTE, DataSource
from werkzeug.routing import Rule

from contracts import openapi as words
from contracts.formats import TEXT
from contracts.models import UUID, Error, InvalidRequestError, absent_or_given
from serving.protection import authorized_parameters, checks_requests, protected_scope
from serving.request_checks import OPTIONAL_BODY

T = TypeVar("T", bound=Callable[..., Any])
_MEDIA_TYPES_ATTRIBUTE = "_pia_request_media_types"
_ALSO_ANSWERS_ATTRIBUTE = "_pia_also_answers"
# A response model with this class attribute set is sent as that media type instead of JSON (the metrics text).
RESPONSE_MEDIA_TYPE = "response_media_type"
# A response model with this class attribute set answers no body (a 204): its docstring describes the answer.
NO_BODY = "no_body"
_REF_TEMPLATE = "#/components/schemas/{model}"
# Blueprints of pages for a browser (HTML, cookies and forms), not routes of the API contract.
BROWSER_BLUEPRINTS = ("console",)


def _header(description: str, required: bool = True, kind: str = "string") -> dict[str, Any]:
    return {"description": description, "required": required, "schema": {"type": kind}}


_REQUEST_ID = {"X-Request-Id": _header("The caller's X-Request-Id when 1-64 characters of [A-Za-z0-9._-], "
                                       "else one the service made; quote it when reporting a problem.")}
_RATE_LIMIT = {  # on every answer to a valid token; without the Redis store the count is skipped (fail open)
    "X-RateLimit-Limit": _header("Requests allowed per rolling 60 s.", kind="integer"),
    "X-RateLimit-Remaining": _header("Requests left in the window.", required=False, kind="integer"),
    "X-RateLimit-Reset": _header("Seconds until the oldest request leaves the window.", required=False,
                                 kind="integer")}
_RETRY_AFTER = {"Retry-After": _header("Seconds to wait before retrying.", kind="integer")}
_WWW_AUTHENTICATE = {"WWW-Authenticate": _header("Bearer challenge (RFC 6750).")}


def also_accepts(*media_types: str) -> Callable[[T], T]:
    """The documented request body (`document_request`) may also come as these media types."""

    def decorator(func: T) -> T:
        setattr(func, _MEDIA_TYPES_ATTRIBUTE, media_types)
        return func

    return decorator


def also_answers(*media_types: str, headers: dict[str, str] | None = None,
                 description: str = "") -> Callable[[T], T]:
    """The 200 answer may also come as these binary media types (Arrow, Parquet), chosen by the Accept header,
    with these optional headers (name → description). Without a documented 200, this is the 200."""

    def decorator(func: T) -> T:
        setattr(func, _ALSO_ANSWERS_ATTRIBUTE, (media_types, headers or {}, description))
        return func

    return decorator


def attach_openapi(app: Quart, issuer: str) -> None:
    """Set up quart-schema for the app. No Swagger UI or Redoc: the document is the contract, any viewer reads
    /v1/openapi.json, and an API server should not serve pages that load scripts from third-party CDNs."""
    make_response = app.make_response
    QuartSchema(app, openapi_path=None, redoc_ui_path=None, scalar_ui_path=None, swagger_ui_path=None,
                info={"title": words.TITLE, "version": "latest", "description": words.DESCRIPTION},
                tags=[{"name": name, "description": text} for name, text in words.tags().items()],
                servers=[{"url": issuer}], security_schemes=words.security_schemes(issuer),
                openapi_provider_class=ContractProvider)
    # quart-schema wraps make_response to turn returned models into JSON (13 µs on every response); the routes
    # return Responses rendered by orjson, so the wrapper only costs time.
    app.make_response = make_response  # type: ignore[method-assign]

    @app.before_serving
    async def generate_document() -> None:
        # At start, so a model that cannot be documented stops the server, not the first reader.
        openapi_json(app)


def openapi_json(app: Quart) -> bytes:
    """The document as sent; generated once per app (the routes do not change while it serves)."""
    provider: ContractProvider = app.extensions["QUART_SCHEMA"].openapi_provider
    return provider.document_json()


class ContractProvider(OpenAPIProvider):
    def __init__(self, app: Quart, extension: QuartSchema) -> None:
        super().__init__(app, extension)
        self._json: bytes | None = None
        self._schemas: dict[tuple[Any, str], dict[str, Any]] = {}

    def document_json(self) -> bytes:
        if self._json is None:
            self._json = orjson.dumps(self.schema())
        return self._json

    def schema(self) -> dict[str, Any]:
        self._schemas, definitions = _generate_schemas(self._declared_models())
        document = super().schema()
        schemas = document["components"]["schemas"]
        for name, schema in definitions.items():
            if schemas.setdefault(name, schema) != schema:
                raise ValueError(f"two different schemas are named {name}; rename one of the models")
        document["paths"] = dict(document["paths"])
        return document

    def generate_rules(self) -> Iterable[Rule]:
        return (rule for rule in super().generate_rules()
                if rule.endpoint.partition(".")[0] not in BROWSER_BLUEPRINTS)

    def _declared_models(self) -> set[tuple[Any, str]]:
        """Every (model, mode) a route declares for a request or response body, and the shared Error."""
        found: set[tuple[Any, str]] = {(Error, "serialization"), (InvalidRequestError, "serialization")}
        for rule in self.generate_rules():
            func = self._app.view_functions[rule.endpoint]
            if request := getattr(func, QUART_SCHEMA_REQUEST_ATTRIBUTE, None):
                found.add((request[0], "validation"))
            for model, _ in getattr(func, QUART_SCHEMA_RESPONSE_ATTRIBUTE, {}).values():
                if not getattr(model, NO_BODY, False):
                    found.add((model, "serialization"))
        return found

    # quart-schema's hooks, answered from the one generation

    def build_request_body(self, model: Any, source: DataSource) -> tuple[dict[str, Any], dict[str, Any]]:
        media_type = {DataSource.JSON: "application/json", DataSource.FORM_MULTIPART: "multipart/form-data"}.get(
            source, "application/x-www-form-urlencoded")
        schema = self._schemas[(model, "validation")]
        # A model whose every field is optional may say the body itself may be left out (OPTIONAL_BODY).
        required = not getattr(model, OPTIONAL_BODY, False)
        return {"required": required, "content": {media_type: {"schema": schema}}}, {}

    def build_response_object(self, model: Any, headers_model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        if getattr(model, NO_BODY, False):
            return {"description": _own_docstring(model)}, {}
        schema = self._schemas[(model, "serialization")]
        media_type = getattr(model, RESPONSE_MEDIA_TYPE, "application/json")
        response: dict[str, Any] = {"description": _own_docstring(model), "content": {media_type: {"schema": schema}}}
        if headers_model is not None:
            headers = TypeAdapter(headers_model).json_schema()
            response["headers"] = {
                name: {"description": field.get("description", ""), "required": name in headers.get("required", ()),
                       "schema": {k: v for k, v in field.items() if k not in ("title", "description")}}
                for name, field in headers["properties"].items()}
        return response, {}

    def build_querystring_parameters(self, model: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        parameters, definitions = super().build_querystring_parameters(model)
        for parameter in parameters:
            parameter["schema"] = _not_null(parameter["schema"])
        return parameters, definitions

    def build_headers_parameters(self, model: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        parameters, definitions = super().build_headers_parameters(model)
        for parameter in parameters:
            parameter["schema"] = _not_null(parameter["schema"])
        return parameters, definitions

    def build_path_parameter(self, name: str, converter: Any) -> dict[str, Any]:
        parameter = super().build_path_parameter(name, converter)
        if name in words.PATH_PARAMETERS:
            parameter["description"] = words.PATH_PARAMETERS[name]
        if name in words.UUID_PATH_PARAMETERS:
            parameter["schema"] = {**parameter["schema"], "format": "uuid", "pattern": UUID.json_schema}
        return parameter

    def build_paths(self, rule: Rule) -> tuple[dict, dict]:
        paths, components = super().build_paths(rule)
        func = self._app.view_functions[rule.endpoint]
        blueprint = self._app.blueprints.get(rule.endpoint.rpartition(".")[0])
        checked = set(rule.arguments) - authorized_parameters(blueprint) if checks_requests(blueprint) else None
        for item in paths.values():
            for method, operation in item.items():
                item[method] = self._complete(copy.deepcopy(operation), method, rule.endpoint, func,
                                              protected_scope(blueprint), checked)
        return paths, components

    def _complete(self, operation: dict[str, Any], method: str, endpoint: str, func: Callable[..., Any],
                  scope: str | None, checked_parameters: set[str] | None) -> dict[str, Any]:
        """`checked_parameters`: the path parameters check_request looks at (None: it does not run)."""
        if not operation["parameters"]:
            del operation["parameters"]
        if not operation.get("description", "").strip():
            operation.pop("description", None)
        else:
            operation["description"] = operation["description"].strip()
        if not getattr(func, QUART_SCHEMA_OPERATION_ID_ATTRIBUTE, None):
            blueprint, _, name = endpoint.rpartition(".")
            # Unique across blueprints (three scopes have a retail_stores); no "put_…_put_…" when the name says it.
            operation["operationId"] = "_".join(filter(None, (method, blueprint, name.removeprefix(f"{method}_"))))
        if (media_types := getattr(func, _MEDIA_TYPES_ATTRIBUTE, ())) and "requestBody" in operation:
            content = operation["requestBody"]["content"]
            schema = next(iter(content.values()))["schema"]
            content.update({media_type: {"schema": schema} for media_type in media_types})
        responses: dict[str, Any] = {str(status): answer for status, answer in operation["responses"].items()}
        if also := getattr(func, _ALSO_ANSWERS_ATTRIBUTE, None):
            media_types, headers, description = also
            success = responses.setdefault("200", {"description": description, "content": {}})
            # A binary body: no JSON Schema describes it (OpenAPI 3.1 leaves the schema out).
            success["content"].update({media_type: {} for media_type in media_types})
            success.setdefault("headers", {}).update(
                {name: _header(text, required=False) for name, text in headers.items()})
        errors = dict(words.PROTECTED_ERRORS) if scope else {}
        if checked_parameters is not None and "requestBody" in operation:
            errors[415] = words.UNSUPPORTED_MEDIA_TYPE
        errors[500] = words.SERVER_ERROR
        for status, description in errors.items():
            responses.setdefault(str(status), {"description": description, "content": {
                "application/json": {"schema": self._schemas[(Error, "serialization")]}}})
        if checked_parameters:
            for parameter in operation.get("parameters", ()):
                if parameter["in"] == "path" and parameter["name"] in checked_parameters:
                    # check_request refuses control characters in these (400 INVALID_PATH_PARAMETER).
                    parameter["schema"].setdefault("pattern", TEXT.json_schema)
            responses.setdefault("400", {"description": words.INVALID_PATH_PARAMETER, "content": {
                "application/json": {"schema": self._schemas[(InvalidRequestError, "serialization")]}}})
        for status, answer in responses.items():
            answer["description"] = answer["description"] or HTTPStatus(int(status)).phrase
            headers = answer.setdefault("headers", {})
            headers.update(_REQUEST_ID)
            if status == "429":
                headers.update(_RETRY_AFTER)
            if scope and status == "401":
                headers.update(_WWW_AUTHENTICATE)
            elif scope:
                headers.update(_RATE_LIMIT)
        operation["responses"] = dict(sorted(responses.items()))
        if scope:
            operation["security"] = words.security_of(scope)
            operation["tags"] = [words.SCOPES.get(scope, scope)]
        else:
            operation["security"] = []  # open: no token needed
        return operation


def _generate_schemas(models: set[tuple[Any, str]]) -> tuple[dict[tuple[Any, str], dict[str, Any]], dict]:
    """One pydantic generation for all models: shared definitions, distinct names for distinct models."""
    ordered = sorted(models, key=lambda pair: (repr(pair[0]), pair[1]))  # stable names and order run to run
    schemas, definitions = TypeAdapter.json_schemas(
        [(pair, pair[1], TypeAdapter(pair[0])) for pair in ordered], ref_template=_REF_TEMPLATE,
        union_format="primitive_type_array", schema_generator=_WithoutFieldTitles)
    return {key: schema for (key, _), schema in schemas.items()}, definitions.get("$defs", {})


class _WithoutFieldTitles(GenerateJsonSchema):
    """Models keep their titles; fields do not get pydantic's "Batchid"-style ones (the name says it)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A query or header parameter is absent or has a value: drop the null of a `str | None` field, and the
    title."""
    schema = {key: value for key, value in schema.items() if key != "title"}
    absent_or_given(schema)
    return schema


def _own_docstring(model: Any) -> str:
    """The model's own docstring (not one inherited from a base model), or "" for the status phrase."""
    return inspect.cleandoc(model.__dict__.get("__doc__") or "") if isinstance(model, type) else ""
