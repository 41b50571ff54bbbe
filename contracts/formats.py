"""The format rules of the values clients and operators send, each defined once for every checker.

Three checkers apply them: the upload's exact path (Python's `re`, value by value, saying what is wrong), the
upload's fast path (RE2 through pyarrow, over whole columns) and the back-office document's JSON Schema, whose
format definitions are filled from here (`contracts/backoffice_schema.py`). A rule is one pattern, written in the
syntax Python's `re` and ECMA-262 (JSON Schema) share; RE2 differs only in how it escapes a code point, which
`TextFormat` translates.

Decisions:
- Decimals are plain digits, optionally a point and 1 to 4 digits, with at most 14 digits before the point
  (DECIMAL(18,4)): no sign, exponent, spaces, or leading or trailing point. Leading zeros are allowed ("007.5"
  is 7.5): they are harmless and exact, uploads have always taken them, and refusing them would tighten the
  published API's validation without notice (SPEC "Versioning"). The back-office document, which refused them,
  takes them too.
- Business keys (store and SKU numbers, codes) are 1 to 64 characters, with no control character (Unicode
  category Cc, NUL included) anywhere and no white space (`str.isspace`) at either end. PostgreSQL cannot store
  a NUL, and no held key has surrounding spaces (the back office never took one), so such a key could only
  fail later; it is refused where it is sent, with its path.
- Names and other free text of the back office have no control characters either (a NUL cannot be stored).
- Ids, keys and codes of the e-commerce and admin APIs, and every path parameter, have no control characters either
  (`control_problem`): a NUL cannot be stored by PostgreSQL, and no held value has one, so such a value is refused
  where it is sent (400 with its path), never passed on to a query.
- Free JSON a client stores (a customer's `ext`) is an object nested at most MAX_FREE_JSON_DEPTH levels deep and at
  most MAX_FREE_JSON_BYTES long as compact JSON (`free_json_problem`), so that every answer carrying it stays within
  what orjson writes (255 levels) and a record stays small.
- A JSON request body comes as `application/json`, with at most a UTF-8 charset (`json_media_type_problem`).
- Dates are YYYY-MM-DD and a real calendar day; the pattern says so itself (month lengths, leap years), so the
  published JSON Schema states the whole rule. Timestamps are YYYY-MM-DDTHH:MM[:SS[.fraction]] with Z or ±HH:MM,
  and their instant in UTC lies within years 1 to 9999 (what Python and the store hold).
"""

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import cached_property

import orjson

from contracts.limits import MAX_DECIMAL_PLACES, MAX_FREE_JSON_BYTES, MAX_FREE_JSON_DEPTH

MAX_KEY_LENGTH = 64  # String(64) in the store
DECIMAL_PRECISION = 18  # DECIMAL(18,4) in the store
DECIMAL_INTEGER_DIGITS = DECIMAL_PRECISION - MAX_DECIMAL_PLACES
MAX_INTEGER = 2**31 - 1  # INTEGER columns (batchIndex, batchTotal, itemCount)

# Code point ranges, inclusive.
CONTROL = ((0x00, 0x1F), (0x7F, 0x9F))  # Unicode category Cc
SPACE = ((0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F),
         (0x205F, 0x205F), (0x3000, 0x3000))  # white space (str.isspace) that is not a control character


def _none_of(*ranges: tuple[int, int]) -> str:
    """A character class of every code point outside `ranges`, escaped as \\uXXXX (read by Python and ECMA-262)."""
    members = "".join(f"\\u{low:04X}" if low == high else f"\\u{low:04X}-\\u{high:04X}" for low, high in ranges)
    return f"[^{members}]"


_EDGE, _INNER = _none_of(*CONTROL, *SPACE), _none_of(*CONTROL)
_RE2_ESCAPE = re.compile(r"\\u([0-9A-F]{4})")


@dataclass(frozen=True)
class TextFormat:
    """A whole-string pattern. `core` is unanchored, in the syntax Python's re and ECMA-262 share."""

    core: str

    @cached_property
    def _python(self) -> re.Pattern[str]:
        return re.compile(self.core)

    def matches(self, text: str) -> bool:
        return self._python.fullmatch(text) is not None

    @cached_property
    def re2_core(self) -> str:
        """The core for RE2, which writes a code point as \\x{XXXX}."""
        return _RE2_ESCAPE.sub(r"\\x{\1}", self.core)

    @cached_property
    def re2(self) -> str:
        return f"^(?:{self.re2_core})$"  # RE2's $ is the end of the text

    @cached_property
    def json_schema(self) -> str:
        # Python's `$` also matches before a final newline, and jsonschema checks patterns with Python's re;
        # "no character follows" means the end in both engines.
        return f"^(?:{self.core})(?![\\s\\S])"


def _calendar_day(years: str) -> str:
    """YYYY-MM-DD of a real day (February 29 in leap years only) in the years `years` matches; no look-around, so
    RE2 takes it too."""
    month_day = ("(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
                 "|02-(?:0[1-9]|1[0-9]|2[0-8])")
    leap_years = "[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00"
    return f"(?:(?:{years})-(?:{month_day})|(?:{leap_years})-02-29)"


def _timestamp(years: str) -> str:
    time = r"(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]+)?)?"
    return rf"{_calendar_day(years)}T{time}(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"


_YEARS = "000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3}"  # 1 to 9999: what Python and the store hold
# 2 to 9998: no offset takes such an instant out of years 1 to 9999 in UTC.
_INNER_YEARS = "000[2-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8]"

KEY = TextFormat(f"{_EDGE}(?:{_INNER}{{0,{MAX_KEY_LENGTH - 2}}}{_EDGE})?")
TEXT = TextFormat(f"{_INNER}*")
# Free text that is more than white space: a name, an address line.
NAME = TextFormat(f"{_INNER}*{_EDGE}{_INNER}*")
# An http(s) address of a product image: no control character or white space in it.
IMAGE_URL = TextFormat(f"https?://{_EDGE}+")
DECIMAL = TextFormat(rf"[0-9]{{1,{DECIMAL_INTEGER_DIGITS}}}(?:\.[0-9]{{1,{MAX_DECIMAL_PLACES}}})?")
DATE = TextFormat(_calendar_day(_YEARS))
TIMESTAMP = TextFormat(_timestamp(_YEARS))
# What the published schemas state for a timestamp: a little narrower than TIMESTAMP with its check of the instant
# in UTC (years 1 and 9999 with some offsets), which JSON Schema could state only at great length.
SAFE_TIMESTAMP = TextFormat(_timestamp(_INNER_YEARS))

DECIMAL_SHAPE = (f"a non-negative decimal with at most {DECIMAL_INTEGER_DIGITS} digits before the point and "
                 f'{MAX_DECIMAL_PLACES} after it, such as "12.5"')
DATE_SHAPE = "a calendar date YYYY-MM-DD"
TIMESTAMP_SHAPE = "an ISO 8601 timestamp with an offset, in years 1 to 9999 in UTC, such as 2026-11-21T02:00:00Z"


def control_problem(text: str) -> str | None:
    """None for text without control characters, else what is wrong, completing a sentence that starts with the
    field's name."""
    if TEXT.matches(text):
        return None
    control = next(character for character in text if not TEXT.matches(character))
    return f"must not contain control characters such as U+{ord(control):04X}."


def key_problem(text: str) -> str | None:
    """None for a valid key, else what is wrong, completing a sentence that starts with the field's name."""
    if KEY.matches(text):
        return None
    if not 1 <= len(text) <= MAX_KEY_LENGTH:
        return f"must be 1 to {MAX_KEY_LENGTH} characters long, not {len(text)}."
    return control_problem(text) or "must not start or end with white space."


def free_json_problem(value: object) -> tuple[str, str] | None:
    """None for free JSON within the bounds, else the code (JSON_TOO_DEEP, JSON_TOO_LARGE) and what is wrong,
    completing a sentence that starts with its name. `{}` is one level deep, `{"a": {}}` two."""
    depth, level = 0, [value]
    while level:  # level by level, so a deep value costs no recursion
        depth += 1
        if depth > MAX_FREE_JSON_DEPTH:
            return "JSON_TOO_DEEP", f"must be nested at most {MAX_FREE_JSON_DEPTH} levels deep."
        level = [child for node in level if isinstance(node, dict | list)
                 for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, dict | list)]
    size = len(orjson.dumps(value))
    if size > MAX_FREE_JSON_BYTES:
        return "JSON_TOO_LARGE", f"must be at most {MAX_FREE_JSON_BYTES} bytes long as compact JSON, not {size}."
    return None


def json_media_type_problem(content_type: str | None) -> str | None:
    """None for a Content-Type that announces JSON in UTF-8 (`application/json`, any parameters, a charset only
    of utf-8), else what is wrong."""
    media_type, *parameters = (content_type or "").split(";")
    if media_type.strip().lower() != "application/json":
        return f"Content-Type must be application/json, not {content_type or 'absent'}."
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() != "utf-8":
            return f"The body must be UTF-8, not {value.strip()}."
    return None


def decimal_value(text: str) -> Decimal | None:
    return Decimal(text) if DECIMAL.matches(text) else None


def date_value(text: str) -> date | None:
    if not DATE.matches(text):
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:  # not a calendar day, such as 2026-02-30
        return None


def timestamp_value(text: str) -> datetime | None:
    if not TIMESTAMP.matches(text):
        return None
    try:
        value = datetime.fromisoformat(text)
        value.astimezone(UTC)  # OverflowError when the instant in UTC falls outside years 1 to 9999
    except (ValueError, OverflowError):
        return None
    return value
