"""The Prometheus text exposition format (version 0.0.4) of the event delivery gauges, written by hand: a few
gauges computed on scrape need no client library."""

from collections.abc import Iterable

from db.event_operations import StoreCounts

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (metric name, help text, the StoreCounts field it reads)
_GAUGES = (
    ("pia_event_backlog", "Change events of the eCom store still to deliver (neither delivered nor dead-lettered).",
     "backlog"),
    ("pia_event_dead_letters", "Change events of the eCom store the bridge gave up on, waiting for a replay.",
     "dead_letters"),
)


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def event_delivery_metrics(counts: Iterable[StoreCounts]) -> str:
    stores = list(counts)
    lines = []
    for name, help_text, field in _GAUGES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [f'{name}{{tenant_id="{_label_value(store.tenant_id)}",'
                  f'ecom_store_id="{_label_value(store.ecom_store_id)}"}} {getattr(store, field)}' for store in stores]
    return "\n".join(lines) + "\n"
