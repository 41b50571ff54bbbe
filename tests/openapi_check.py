"""Check a real HTTP response against the OpenAPI document: any test may call `assert_response_matches`.

The operation is found the way the app finds its route: the document's paths become a werkzeug URL map, matched
with the request's method and path. Then the status must be declared for that operation, the declared required
headers present, and the JSON body valid against the declared schema (JSON Schema 2020-12, formats checked);
a binary body (no schema declared) must not be empty.
Requests no route answers (404 NOT_FOUND, 405 METHOD_NOT_ALLOWED) are checked against the document's Error body.
"""

import re
from functools import cache
from typing import Any

import httpx
import orjson
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule

_DOCUMENT_URI = "urn:pia:openapi"
_METHODS = ("get", "put", "post", "delete", "patch")


def assert_response_matches(document: dict[str, Any], response: httpx.Response) -> None:
    """Fail unless the document declares this response: status, required headers, body schema."""
    request = response.request
    where = f"{request.method} {request.url.path} → {response.status_code}"
    routes = _routes(orjson.dumps(document))
    try:
        path, _ = routes.match(request.url.path, method=request.method)
    except (NotFound, MethodNotAllowed):
        assert response.status_code in (404, 405), f"{where}: no documented route, yet not 404/405"
        _assert_valid(document, "#/components/schemas/Error", response, where)
        return
    answers = document["paths"][path][request.method.lower()]["responses"]
    status = str(response.status_code)
    assert status in answers, f"{where}: status not documented for {path} (documented: {sorted(answers)})"
    answer = answers[status]
    for name, header in answer.get("headers", {}).items():
        if header.get("required"):
            assert name in response.headers, f"{where}: required header {name} missing"
    content = answer.get("content")
    if not content:
        assert not response.content, f"{where}: a body where the document declares none"
        return
    media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
    assert media_type in content, f"{where}: Content-Type {media_type!r} not documented ({sorted(content)})"
    if "schema" not in content[media_type]:  # a binary body (Arrow, Parquet): its own tests read it
        assert response.content, f"{where}: an empty {media_type} body"
        return
    pointer = "/".join(part.replace("~", "~0").replace("/", "~1") for part in
                       ("paths", path, request.method.lower(), "responses", status, "content", media_type, "schema"))
    _assert_valid(document, f"#/{pointer}", response, where)


def _assert_valid(document: dict[str, Any], pointer: str, response: httpx.Response, where: str) -> None:
    validator = _validator(orjson.dumps(document), pointer)
    problems = [f"{'/'.join(map(str, error.absolute_path)) or '(body)'}: {error.message}"
                for error in validator.iter_errors(response.json())]
    assert not problems, f"{where}: the body breaks the documented schema:\n" + "\n".join(problems[:20])


@cache
def _routes(document_json: bytes) -> Any:
    """A URL map of the documented paths, each rule's endpoint being its document path."""
    document = orjson.loads(document_json)
    rules = [Rule(re.sub(r"\{([^}]+)\}", r"<\1>", path), endpoint=path,
                  methods=[method.upper() for method in item if method in _METHODS])
             for path, item in document["paths"].items()]
    return Map(rules, strict_slashes=False).bind("localhost")


@cache
def _validator(document_json: bytes, pointer: str) -> Draft202012Validator:
    registry = Registry().with_resource(_DOCUMENT_URI, Resource(orjson.loads(document_json), DRAFT202012))
    return Draft202012Validator({"$ref": f"{_DOCUMENT_URI}{pointer}"}, registry=registry,
                                format_checker=FormatChecker())
