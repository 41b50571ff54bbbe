"""Hypothesis strategies shared by the property tests: values of each format rule, and values near its edges."""

from collections.abc import Callable
from typing import Any

from hypothesis import example
from hypothesis import strategies as st

from contracts import formats

# Characters at the edge of some rule: control characters, white space of several kinds, characters that are
# neither, and the characters decimals, dates and timestamps are made of.
EDGE_CHARACTERS = ("\x00\x01\x08\t\n\r\x1f\x7f\x85\x9f\xa0 \u1680\u2000\u200a\u200b\u2028\u2029\u202f\u205f"
                   "\u3000\ufeff" "0159.-+eE:TZ,xé店😀")


def near(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Valid values and values one step from them: a character inserted, removed or replaced, the value doubled."""
    edge = st.sampled_from(EDGE_CHARACTERS)

    def insert(case: tuple[str, int, str]) -> str:
        text, at, character = case
        at %= len(text) + 1
        return text[:at] + character + text[at:]

    def remove(case: tuple[str, int]) -> str:
        text, at = case
        return text if not text else text[:at % len(text)] + text[at % len(text) + 1:]

    def replace(case: tuple[str, int, str]) -> str:
        text, at, character = case
        return character if not text else text[:at % len(text)] + character + text[at % len(text) + 1:]

    position = st.integers(min_value=0, max_value=100)
    return st.one_of(valid, st.tuples(valid, position, edge).map(insert), st.tuples(valid, position).map(remove),
                     st.tuples(valid, position, edge).map(replace), valid.map(lambda text: text * 2),
                     st.text(alphabet=EDGE_CHARACTERS, max_size=70))


def valid(rule: formats.TextFormat) -> st.SearchStrategy[str]:
    return st.from_regex(rule.core, fullmatch=True)


def examples(*values: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """@example for each value: cases a property must always cover, whatever Hypothesis draws."""
    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        for value in values:
            test = example(value)(test)
        return test

    return decorate


KEYS = near(st.one_of(valid(formats.KEY), st.sampled_from(["1001", "a b", "x" * 63, "x" * 64, "x" * 65])))
DECIMALS = near(st.one_of(valid(formats.DECIMAL), st.from_regex(r"[0-9]{0,16}(\.[0-9]{0,6})?", fullmatch=True)))
TEXTS = near(st.text(max_size=20))
