"""The published contract covers every route the app serves, and is a valid OpenAPI 3.1 document."""

import re

from openapi_spec_validator import validate

from serving.app import create_app


def _served_routes(settings, engine) -> set[tuple[str, str]]:
    app = create_app(settings, engine, issuer="http://x")
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        routes |= {(method.lower(), path) for method in rule.methods - {"HEAD", "OPTIONS"}}
    return routes


def test_every_served_route_is_documented(http, settings, engine) -> None:
    document = http.get("/v1/openapi.json").json()
    documented = {(method, path) for path, item in document["paths"].items()
                  for method in item if method != "parameters"}
    served = _served_routes(settings, engine)
    assert served - documented == set()
    assert documented - served == set()


def test_document_is_valid_openapi_31_with_both_security_schemes(http) -> None:
    document = http.get("/v1/openapi.json").json()
    validate(document)
    assert document["openapi"].startswith("3.1")
    schemes = document["components"]["securitySchemes"]
    assert schemes["OAuth2"]["flows"]["clientCredentials"]["tokenUrl"].endswith("/oauth2/token")
    assert schemes["BearerAuth"] == {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
