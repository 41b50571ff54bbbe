"""Logging of every `pia` process: one JSON object a line (PIA_LOG_FORMAT=json) or a readable line (text).

Our modules and the libraries (Hypercorn, SQLAlchemy, aiokafka) all log through the standard library; structlog's
ProcessorFormatter renders each record at the one handler, on stderr. A record's `extra` fields become keys of its
line, and so do the fields bound to the request being answered (`request_context`), so every line logged while a
request is handled carries its request id.

What never goes into a log: secrets, tokens, request bodies and query strings. Request lines carry the route
template, not the path (ids in paths are not secret, but templates keep lines and metrics comparable).
"""

import logging
import sys
from typing import Literal

import orjson
import structlog

LogFormat = Literal["json", "text"]


def _json(event: dict, **_: object) -> str:
    return orjson.dumps(event, default=str).decode()


def configure_logging(log_format: LogFormat, level: int = logging.INFO) -> None:
    """Route every log record of the process through one stderr handler in the chosen format, unless logging is
    configured already (as `logging.basicConfig` does): a test runner's capture, a program calling `pia`'s commands."""
    stamped: list = [structlog.contextvars.merge_contextvars, structlog.stdlib.add_log_level,
                     structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder(),
                     structlog.processors.TimeStamper(fmt="iso", utc=True, key="time")]
    rendering: list = ([structlog.processors.format_exc_info, structlog.processors.JSONRenderer(serializer=_json)]
                       if log_format == "json" else
                       # Plain tracebacks: the default rich one prints each frame's local variables, secrets included.
                       [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), timestamp_key="time",
                                                      exception_formatter=structlog.dev.plain_traceback)])
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=stamped,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering]))
    logging.basicConfig(level=level, handlers=[handler])


def request_context(**fields: object) -> None:
    """Bind fields (the request id) to every line logged while the current request is answered. Each request runs
    in a task of its own, whose bindings end with it, and binds the same keys, so nothing is cleared first (that
    copies the whole context, on every request)."""
    structlog.contextvars.bind_contextvars(**fields)
