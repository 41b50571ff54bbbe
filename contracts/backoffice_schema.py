"""The back-office document's JSON Schema, with its format definitions filled from `contracts.formats`.

`backoffice.schema.json` is the published schema. Its structure is written there by hand; its `$defs` for keys,
decimals, dates and text are generated from the format rules, so the loader and the upload check the same rules. The
schema used at run time is always filled from the rules; a test keeps the file equal to `render(schema())`, and

    uv run python -m contracts.backoffice_schema

rewrites it after a rule changes.
"""

import json
from pathlib import Path
from typing import Any

from contracts.formats import DATE, DATE_SHAPE, DECIMAL, DECIMAL_SHAPE, IMAGE_URL, KEY, MAX_KEY_LENGTH, TEXT

PATH = Path(__file__).with_name("backoffice.schema.json")
_LINE_WIDTH = 120


def format_definitions() -> dict[str, dict[str, Any]]:
    return {
        # The key pattern holds its length too, so a bad key gets one error, not one per keyword.
        "key": {"description": f"1 to {MAX_KEY_LENGTH} characters; no control character; no white space at either "
                               "end", "type": "string", "pattern": KEY.json_schema},
        "name": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": TEXT.json_schema},
        "text": {"description": "no control character", "type": "string", "pattern": TEXT.json_schema},
        "decimal": {"description": DECIMAL_SHAPE, "type": "string", "pattern": DECIMAL.json_schema},
        "date": {"description": DATE_SHAPE, "type": "string", "pattern": DATE.json_schema},
        "url": {"type": "string", "minLength": 1, "maxLength": 2000, "pattern": IMAGE_URL.json_schema},
    }


def schema() -> dict[str, Any]:
    document = json.loads(PATH.read_text("utf-8"))
    document["$defs"] = {**document["$defs"], **format_definitions()}
    return document


def render(value: Any, indent: int = 0, prefix: str = "") -> str:
    """The file's layout: a value on one line when the line fits, else one member per line."""
    line = " " * indent + prefix + json.dumps(value, ensure_ascii=False)
    if len(line) + 1 <= _LINE_WIDTH or not isinstance(value, dict | list) or not value:  # + 1: a trailing comma
        return line
    if isinstance(value, dict):
        members = [render(member, indent + 2, f"{json.dumps(name, ensure_ascii=False)}: ")
                   for name, member in value.items()]
        opening, closing = "{", "}"
    else:
        members = [render(member, indent + 2) for member in value]
        opening, closing = "[", "]"
    return " " * indent + prefix + opening + "\n" + ",\n".join(members) + "\n" + " " * indent + closing


if __name__ == "__main__":
    PATH.write_text(render(schema()) + "\n", "utf-8")
    print(f"wrote {PATH}")
