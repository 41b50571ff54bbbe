"""Loading the back-office document (`pia admin load`): check it whole, then upsert it in one transaction.

The document is keyed on business keys. Ids are generated on first insert only and a row is written only
when one of its values differs, so loading the same document twice changes nothing.
"""

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from jsonschema import Draft202012Validator

from contracts import backoffice_schema
from contracts.formats import DECIMAL, DECIMAL_SHAPE, KEY, TEXT, decimal_value, key_problem
from store.ids import new_id, utc_now
from store.schema import (
    assortment_lines,
    assortments,
    companies,
    ecom_stores,
    loyalty_program_stores,
    loyalty_programs,
    retail_stores,
    skus,
    store_assortment_lines,
)

_VALIDATOR = Draft202012Validator(backoffice_schema.schema())
# A format rule's own words instead of jsonschema's, which quote the whole pattern.
_PATTERN_PROBLEMS = {
    KEY.json_schema: key_problem,
    TEXT.json_schema: lambda text: "must not contain control characters.",
    DECIMAL.json_schema: lambda text: f"must be {DECIMAL_SHAPE}.",
}

Parts = tuple[str | int, ...]
Entry = tuple[Parts, dict[str, Any]]
Row = dict[str, Any]

# Business keys of the top-level lists; assortment lines are keyed on skuNumber within their assortment.
_KEYS: dict[str, tuple[str, ...]] = {
    "companies": ("number",),
    "skus": ("number",),
    "assortments": ("code",),
    "retailStores": ("number",),
    "ecomStores": ("number",),
    "loyaltyPrograms": ("code",),
    "storeAssortmentLines": ("retailStoreNumber", "skuNumber"),
}


@dataclass(frozen=True)
class DocumentError:
    path: str
    message: str


class DocumentInvalid(ValueError):
    """The document breaks the schema or its references; every problem is listed and nothing is written."""

    def __init__(self, errors: list[DocumentError]) -> None:
        self.errors = errors
        super().__init__(f"the back-office document has {len(errors)} problem(s); nothing was loaded")


@dataclass(frozen=True)
class _Outcome:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0


@dataclass
class LoadReport:
    """Per entity: rows created, updated and unchanged; deleted only for the lists a document owns whole."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return (any(count["created"] or count["updated"] for count in self.counts.values())
                or any(self.deleted.values()))

    def record(self, entity: str, outcome: _Outcome, owns_whole_list: bool = False) -> None:
        self.counts[entity] = {"created": outcome.created, "updated": outcome.updated,
                               "unchanged": outcome.unchanged}
        if owns_whole_list:
            self.deleted[entity] = outcome.deleted


def load_document(engine: sa.Engine, tenant_id: str, document: dict[str, Any]) -> LoadReport:
    # Checked inside the transaction, so the references it relies on cannot change before the writes.
    with engine.begin() as conn:
        errors = sorted(set(_document_errors(conn, tenant_id, document)), key=_error_order)
        if errors:
            raise DocumentInvalid(errors)
        return _apply(conn, tenant_id, document)


# --- checking -------------------------------------------------------------------------------------------

def _document_errors(conn: sa.Connection, tenant_id: str, document: Any) -> Iterator[DocumentError]:
    # The later checks read defensively, so a schema-invalid document still gets every problem reported.
    yield from _schema_errors(document)
    yield from _duplicate_errors(document)
    yield from _reference_errors(document, _known_keys(conn, tenant_id, document))
    yield from _threshold_errors(document)


def _path(parts: Iterable[str | int]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text or "$"


def _error_order(error: DocumentError) -> tuple[list[str | int], str]:
    # Natural order, so retailStores[10] comes after retailStores[9].
    pieces = re.split(r"\[(\d+)\]", error.path)
    return [int(piece) if i % 2 else piece for i, piece in enumerate(pieces)], error.message


def _schema_errors(document: Any) -> Iterator[DocumentError]:
    for error in _VALIDATOR.iter_errors(document):
        parts = tuple(error.absolute_path)
        # Point at the missing or unknown field itself rather than at the object holding it.
        if error.validator == "required":
            for name in error.validator_value:
                if name not in error.instance:
                    yield DocumentError(_path((*parts, name)), "required field is missing")
        elif error.validator == "additionalProperties":
            for name in sorted(set(error.instance) - set(error.schema.get("properties", {}))):
                yield DocumentError(_path((*parts, name)), "unknown field")
        elif error.validator == "pattern" and error.validator_value in _PATTERN_PROBLEMS:
            problem = _PATTERN_PROBLEMS[error.validator_value](error.instance)
            yield DocumentError(_path(parts), f"{error.instance!r} {problem}")
        else:
            yield DocumentError(_path(parts), error.message)


def _entries(container: Any, name: str, parts: Parts = ()) -> list[Entry]:
    items = container.get(name) if isinstance(container, dict) else None
    if not isinstance(items, list):
        return []
    return [((*parts, name, i), item) for i, item in enumerate(items) if isinstance(item, dict)]


def _assortment_lines(document: Any) -> list[Entry]:
    return [line for parts, assortment in _entries(document, "assortments")
            for line in _entries(assortment, "lines", parts)]


def _keyed_lists(document: Any) -> Iterator[tuple[list[Entry], tuple[str, ...]]]:
    for name, key in _KEYS.items():
        yield _entries(document, name), key
    for parts, assortment in _entries(document, "assortments"):
        yield _entries(assortment, "lines", parts), ("skuNumber",)


def _duplicate_errors(document: Any) -> Iterator[DocumentError]:
    for entries, key in _keyed_lists(document):
        first: dict[tuple[Any, ...], Parts] = {}
        for parts, item in entries:
            values = tuple(item.get(name) for name in key)
            if not all(isinstance(value, str) for value in values):
                continue
            if values in first:
                yield DocumentError(_path((*parts, key[-1])),
                                    f"duplicate key {', '.join(values)}; first at {_path(first[values])}")
            else:
                first[values] = parts


def _references(document: Any) -> Iterator[tuple[Parts, Any, str]]:
    """Every reference in the document: where it is, the key it holds, and what that key must name."""
    for name in ("retailStores", "ecomStores"):
        for parts, store in _entries(document, name):
            yield (*parts, "companyNumber"), store.get("companyNumber"), "company"
    for parts, store in _entries(document, "retailStores"):
        yield (*parts, "baseAssortmentCode"), store.get("baseAssortmentCode"), "BASE assortment"
        yield (*parts, "localAssortmentCode"), store.get("localAssortmentCode"), "LOCAL assortment"
    for parts, line in _assortment_lines(document):
        yield (*parts, "skuNumber"), line.get("skuNumber"), "SKU"
    for parts, line in _entries(document, "storeAssortmentLines"):
        yield (*parts, "retailStoreNumber"), line.get("retailStoreNumber"), "retail store"
        yield (*parts, "skuNumber"), line.get("skuNumber"), "SKU"
    for parts, program in _entries(document, "loyaltyPrograms"):
        numbers = program.get("retailStoreNumbers")
        for i, number in enumerate(numbers if isinstance(numbers, list) else []):
            yield (*parts, "retailStoreNumbers", i), number, "retail store"


def _reference_errors(document: Any, known: dict[str, set[str]]) -> Iterator[DocumentError]:
    for parts, key, kind in _references(document):
        # Absent or non-string keys are the schema check's to report.
        if isinstance(key, str) and key not in known[kind]:
            yield DocumentError(_path(parts), f"{key!r} names no {kind} in the document or the tenant")


def _document_keys(document: Any, name: str, key: str) -> dict[str, dict[str, Any]]:
    return {item[key]: item for _, item in _entries(document, name) if isinstance(item.get(key), str)}


def _known_keys(conn: sa.Connection, tenant_id: str, document: Any) -> dict[str, set[str]]:
    """The keys references may name: those in the document and those already held for the tenant."""
    def numbers(table: sa.Table, name: str) -> set[str]:
        held = conn.scalars(sa.select(table.c.number).where(table.c.tenant_id == tenant_id))
        return set(held) | _document_keys(document, name, "number").keys()

    # The document's kind wins: loading it changes the held kind.
    kinds = dict(conn.execute(sa.select(assortments.c.code, assortments.c.kind)
                              .where(assortments.c.tenant_id == tenant_id)).all())
    document_assortments = _document_keys(document, "assortments", "code")
    kinds |= {code: item.get("kind") for code, item in document_assortments.items()}
    return {
        "company": numbers(companies, "companies"),
        "SKU": numbers(skus, "skus"),
        "retail store": numbers(retail_stores, "retailStores"),
        "BASE assortment": {code for code, kind in kinds.items() if kind == "BASE"},
        "LOCAL assortment": {code for code, kind in kinds.items() if kind == "LOCAL"},
    }


def _decimal(value: Any) -> Decimal | None:
    return decimal_value(value) if isinstance(value, str) else None


def _threshold_errors(document: Any) -> Iterator[DocumentError]:
    for parts, line in _assortment_lines(document) + _entries(document, "storeAssortmentLines"):
        low, high = _decimal(line.get("reorderPoint")), _decimal(line.get("maximumInventory"))
        if low is not None and high is not None and low >= high:
            yield DocumentError(_path((*parts, "reorderPoint")),
                                f"reorderPoint {low} must be less than maximumInventory {high}")


# --- applying -------------------------------------------------------------------------------------------

def _apply(conn: sa.Connection, tenant_id: str, document: dict[str, Any]) -> LoadReport:
    now = utc_now()
    report = LoadReport()

    def sync(entity: str, table: sa.Table, key: tuple[str, ...], rows: list[Row],
             scope: sa.ColumnElement[bool] | None = None) -> None:
        # A scope marks the lists the document owns whole: held rows in it that are absent get deleted.
        report.record(entity, _sync(conn, tenant_id, now, table, key, rows, scope), scope is not None)

    def ids(table: sa.Table, key: str) -> dict[str, str]:
        return dict(conn.execute(sa.select(table.c[key], table.c.id)
                                 .where(table.c.tenant_id == tenant_id)).all())

    items = {name: document.get(name, []) for name in _KEYS}
    sync("companies", companies, ("number",), [{"number": item["number"], "name": item["name"],
                                                 "currency_iso_code": item["currencyIsoCode"]}
                                                for item in items["companies"]])
    sync("skus", skus, ("number",), [{"number": item["number"], "name": item["name"]}
                                     for item in items["skus"]])
    sync("assortments", assortments, ("code",), [{"code": item["code"], "kind": item["kind"],
                                                  "name": item["name"]} for item in items["assortments"]])
    company_ids, sku_ids = ids(companies, "number"), ids(skus, "number")
    assortment_ids = ids(assortments, "code")

    named_assortments = [assortment_ids[item["code"]] for item in items["assortments"]]
    sync("assortmentLines", assortment_lines, ("assortment_id", "sku_id"),
         [{"assortment_id": assortment_ids[item["code"]], "sku_id": sku_ids[line["skuNumber"]],
           **_line_values(line)} for item in items["assortments"] for line in item["lines"]],
         scope=assortment_lines.c.assortment_id.in_(named_assortments))

    sync("retailStores", retail_stores, ("number",),
         [_retail_store_row(item, company_ids, assortment_ids) for item in items["retailStores"]])
    sync("ecomStores", ecom_stores, ("number",),
         [{"number": item["number"], "name": item["name"], "company_id": company_ids[item["companyNumber"]],
           "released": item["released"]} for item in items["ecomStores"]])
    sync("loyaltyPrograms", loyalty_programs, ("code",),
         [{"code": item["code"], "name": item["name"]} for item in items["loyaltyPrograms"]])
    store_ids, program_ids = ids(retail_stores, "number"), ids(loyalty_programs, "code")

    named_programs = [program_ids[item["code"]] for item in items["loyaltyPrograms"]]
    sync("loyaltyProgramStores", loyalty_program_stores, ("loyalty_program_id", "retail_store_id"),
         [{"loyalty_program_id": program_ids[item["code"]], "retail_store_id": store_ids[number]}
          for item in items["loyaltyPrograms"] for number in item["retailStoreNumbers"]],
         scope=loyalty_program_stores.c.loyalty_program_id.in_(named_programs))

    sync("storeAssortmentLines", store_assortment_lines, ("retail_store_id", "sku_id"),
         [{"retail_store_id": store_ids[line["retailStoreNumber"]], "sku_id": sku_ids[line["skuNumber"]],
           **_line_values(line), "locked": line["locked"]} for line in items["storeAssortmentLines"]])
    return report


def _retail_store_row(item: dict[str, Any], company_ids: dict[str, str],
                      assortment_ids: dict[str, str]) -> Row:
    # A named store is described whole: an absent address or assortment becomes null.
    address = item.get("visitAddress", {})
    return {
        "number": item["number"], "name": item["name"], "company_id": company_ids[item["companyNumber"]],
        "released": item["released"], "street": address.get("street"), "post_code": address.get("postCode"),
        "city": address.get("city"), "country_iso_code": address.get("countryIsoCode"),
        "base_assortment_id": _lookup(assortment_ids, item.get("baseAssortmentCode")),
        "local_assortment_id": _lookup(assortment_ids, item.get("localAssortmentCode")),
    }


def _line_values(line: dict[str, Any]) -> Row:
    return {"replenishment_type": line["replenishmentType"],
            "reorder_point": _decimal(line.get("reorderPoint")),
            "maximum_inventory": _decimal(line.get("maximumInventory"))}


def _lookup(ids: dict[str, str], key: str | None) -> str | None:
    return None if key is None else ids[key]


def _sync(conn: sa.Connection, tenant_id: str, now: datetime, table: sa.Table, key: tuple[str, ...],
          rows: list[Row], scope: sa.ColumnElement[bool] | None) -> _Outcome:
    """Upserts rows (column values without tenant, id or stamp) keyed on `key` within the tenant.

    Only rows whose values differ are updated. With a scope, held rows in it that `rows` does not name
    are deleted. Key columns are never updated: DuckDB refuses updates of indexed columns.
    """
    if not rows and scope is None:
        return _Outcome()
    query = sa.select(table).where(table.c.tenant_id == tenant_id)
    held = {tuple(row[name] for name in key): row
            for row in conn.execute(query if scope is None else query.where(scope)).mappings()}
    created: list[Row] = []
    changed: list[Row] = []
    for row in rows:
        current = held.pop(tuple(row[name] for name in key), None)
        if current is None:
            created.append(_stamped(table, now, {"tenant_id": tenant_id, **row}, new=True))
        elif any(current[name] != value for name, value in row.items()):
            changed.append(_stamped(table, now, {**_values(row, key), **_key_params(tenant_id, row, key)}))
    deleted = list(held.values()) if scope is not None else []
    if created:
        conn.execute(table.insert(), created)
    if changed:
        conn.execute(table.update().where(*_key_match(table, key)), changed)
    if deleted:
        conn.execute(table.delete().where(*_key_match(table, key)),
                     [_key_params(tenant_id, row, key) for row in deleted])
    return _Outcome(created=len(created), updated=len(changed),
                    unchanged=len(rows) - len(created) - len(changed), deleted=len(deleted))


def _stamped(table: sa.Table, now: datetime, row: Row, new: bool = False) -> Row:
    extra: Row = {}
    if new and "id" in table.c:
        extra["id"] = new_id()
    if "modified_time" in table.c:
        extra["modified_time"] = now
    return {**row, **extra}


def _values(row: Row, key: tuple[str, ...]) -> Row:
    return {name: value for name, value in row.items() if name not in key}


# Bound names must differ from column names, which SQLAlchemy keeps for the SET clause.
def _key_match(table: sa.Table, key: tuple[str, ...]) -> list[sa.ColumnElement[bool]]:
    return [table.c[name] == sa.bindparam(f"key_{name}") for name in ("tenant_id", *key)]


def _key_params(tenant_id: str, row: Row | sa.RowMapping, key: tuple[str, ...]) -> Row:
    return {"key_tenant_id": tenant_id, **{f"key_{name}": row[name] for name in key}}
