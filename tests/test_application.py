"""serving.application.Application keeps each blueprint's hooks instead of looking them up per request: it must call
the same hooks in the same order as Quart, with the same results, for every kind of request."""

from collections.abc import Awaitable, Callable

import pytest
from quart import Blueprint, Quart, Response, request
from quart.signals import request_finished, request_started, request_tearing_down

from serving.application import Application

PATHS = ("/app", "/parent/here", "/parent/child/here", "/parent/child/stop", "/parent/child/boom", "/nowhere",
         "/parent/child/values/7")


def recording_app(app_class: type[Quart], calls: list[str]) -> Quart:
    """An app with hooks of every kind on itself, a blueprint and a blueprint nested in it, each recording its call;
    the child's before-request hook answers /stop itself, and /boom raises in the view."""
    app = app_class("recording")
    parent, child = Blueprint("parent", __name__), Blueprint("child", __name__)

    def record(name: str, scope: Quart | Blueprint) -> None:
        async def before() -> Response | None:
            calls.append(f"before {name}")
            return Response("stopped", 299) if name == "child" and request.path.endswith("/stop") else None

        async def after(response: Response) -> Response:
            calls.append(f"after {name}")
            response.headers.add("X-After", name)
            return response

        async def teardown(error: BaseException | None) -> None:
            calls.append(f"teardown {name} {type(error).__name__ if error else None}")

        def preprocess(endpoint: str | None, values: dict | None) -> None:
            calls.append(f"preprocess {name} {endpoint} {sorted(values or {})}")

        scope.before_request(before)
        scope.after_request(after)
        scope.teardown_request(teardown)
        scope.url_value_preprocessor(preprocess)

    for name, scope in (("app", app), ("parent", parent), ("child", child)):
        record(name, scope)

    def view(name: str) -> Callable[[], Awaitable[str]]:
        async def answer() -> str:
            calls.append(f"view {name}")
            return name
        return answer

    app.add_url_rule("/app", "at_app", view("app"))
    parent.add_url_rule("/here", "at_parent", view("parent"))
    child.add_url_rule("/here", "at_child", view("child"))
    child.add_url_rule("/stop", "not_reached", view("stop"))

    @child.get("/boom")
    async def boom() -> str:
        raise RuntimeError("boom")

    @child.get("/values/<int:number>")
    async def with_values(number: int) -> str:
        return str(number)

    @app.errorhandler(RuntimeError)
    async def failed(error: RuntimeError) -> Response:
        calls.append(f"handled {error}")
        return Response("failed", 500)

    @child.after_app_request  # an app-wide hook registered through a blueprint
    async def after_everything(response: Response) -> Response:
        calls.append("after app-wide")
        return response

    parent.register_blueprint(child, url_prefix="/child")
    app.register_blueprint(parent, url_prefix="/parent")
    return app


async def answers(app: Quart, calls: list[str]) -> list[tuple[str, int, list[str], bytes, list[str]]]:
    """Each path's status, X-After headers, body and the calls it made, twice over (the second from kept chains)."""
    client = app.test_client()
    seen = []
    for path in PATHS * 2:
        calls.clear()
        response = await client.get(path)
        seen.append((path, response.status_code, response.headers.getlist("X-After"), await response.get_data(),
                     list(calls)))
    return seen


async def test_every_hook_is_called_as_quart_calls_it() -> None:
    quart_calls: list[str] = []
    pia_calls: list[str] = []
    expected = await answers(recording_app(Quart, quart_calls), quart_calls)
    assert await answers(recording_app(Application, pia_calls), pia_calls) == expected
    # The comparison covers what it should: nested blueprints' hooks, a short cut, an error, an unmatched path.
    by_path = {path: calls for path, _, _, _, calls in expected}
    assert by_path["/parent/child/here"][:6] == [
        "preprocess app parent.child.at_child []", "preprocess parent parent.child.at_child []",
        "preprocess child parent.child.at_child []", "before app", "before parent", "before child"]
    assert "view stop" not in by_path["/parent/child/stop"]
    assert "handled boom" in by_path["/parent/child/boom"]
    assert by_path["/nowhere"][:2] == ["preprocess app None []", "before app"]


@pytest.mark.parametrize("signal", [request_started, request_finished, request_tearing_down],
                         ids=["started", "finished", "tearing_down"])
async def test_a_request_signal_with_a_receiver_is_still_sent(signal) -> None:
    app = Application("signals")

    @app.get("/")
    async def index() -> str:
        return "ok"

    received: list[object] = []

    def receiver(sender: object, **extra: object) -> None:
        received.append(sender)

    signal.connect(receiver, app)
    try:
        assert (await app.test_client().get("/")).status_code == 200
    finally:
        signal.disconnect(receiver, app)
    assert received == [app]
