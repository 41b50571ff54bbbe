"""A /metrics answer read with prometheus_client's own parser of the text format."""

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """Every sample's value by sample name and label set; the parser refuses malformed text and repeated samples
    are caught here."""
    found: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = frozenset(sample.labels.items())
            assert key not in found.setdefault(sample.name, {}), f"{sample.name} {sample.labels} twice"
            found[sample.name][key] = sample.value
    return found
