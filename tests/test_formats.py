"""One rule set: every checker of a format rule (Python's re, RE2 in pyarrow, the back-office JSON Schema) agrees."""

import sys
import unicodedata
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings

from contracts import backoffice_schema, formats
from db.backoffice import _schema_errors
from tests.strategies import DECIMALS, KEYS, TEXTS, examples


def re2_accepts(rule: formats.TextFormat, text: str) -> bool:
    return pc.match_substring_regex(pa.array([text]), rule.re2)[0].as_py()


def loader_accepts(document: dict[str, Any]) -> bool:
    return not list(_schema_errors(document))


@given(KEYS)
@settings(max_examples=400)
@examples("007", " 1001", "1001\n", "10\x0001", "\u3000x", "x" * 65)
def test_every_checker_reads_keys_alike(text: str) -> None:
    verdict = formats.KEY.matches(text)
    assert re2_accepts(formats.KEY, text) is verdict
    assert loader_accepts({"skus": [{"number": text, "name": "SKU"}]}) is verdict
    assert (formats.key_problem(text) is None) is verdict


@given(DECIMALS)
@settings(max_examples=400)
@examples("007.5", "7\n", "99999999999999.9999", "999999999999999", "1.00000")
def test_every_checker_reads_decimals_alike(text: str) -> None:
    verdict = formats.DECIMAL.matches(text)
    assert re2_accepts(formats.DECIMAL, text) is verdict
    line = {"skuNumber": "1", "replenishmentType": "AUTO", "maximumInventory": text}
    assert loader_accepts({"assortments": [{"code": "A", "kind": "BASE", "name": "A", "lines": [line]}]}) is verdict
    assert (formats.decimal_value(text) is not None) is verdict


@given(TEXTS)
@settings(max_examples=200)
def test_every_checker_reads_free_text_alike(text: str) -> None:
    verdict = formats.TEXT.matches(text)
    assert re2_accepts(formats.TEXT, text) is verdict
    assert loader_accepts({"retailStores": [{"number": "1", "name": "S", "companyNumber": "C", "released": True,
                                             "visitAddress": {"city": text[:100]}}]}) is formats.TEXT.matches(
        text[:100])


def test_the_character_tables_are_pythons_own() -> None:
    def code_points(ranges: tuple[tuple[int, int], ...]) -> set[int]:
        return {point for low, high in ranges for point in range(low, high + 1)}

    everything = range(sys.maxunicode + 1)
    assert code_points(formats.CONTROL) == {point for point in everything if unicodedata.category(chr(point)) == "Cc"}
    assert code_points(formats.SPACE) == {point for point in everything if chr(point).isspace()} - code_points(
        formats.CONTROL)


def test_the_published_schema_file_is_generated_from_the_rules() -> None:
    """After a rule changes: uv run python -m contracts.backoffice_schema"""
    assert backoffice_schema.PATH.read_text("utf-8") == backoffice_schema.render(backoffice_schema.schema()) + "\n"


def test_the_loader_says_what_is_wrong_with_a_key_in_the_rule_s_words() -> None:
    errors = list(_schema_errors({"skus": [{"number": " 1001", "name": "A"}, {"number": "10\x0001", "name": "B"}]}))
    assert [(error.path, error.message) for error in errors] == [
        ("skus[0].number", "' 1001' must not start or end with white space."),
        ("skus[1].number", "'10\\x0001' must not contain control characters such as U+0000.")]
