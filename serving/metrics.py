"""What /metrics tells Prometheus, with prometheus_client: requests, the pipeline's and the order processor's
queues, event delivery per eCom store, the reads parked between pages, and the process.

Each app has a registry of its own (tests run several apps in one process). Requests are observed as they are
answered, labelled by route template, method and status, so the number of series stays bounded whatever paths
callers ask for. The queues and the event backlog are read from the database at each scrape: they are the whole
deployment's, whichever replica is scraped. Batch timings (pipeline/metrics.py) are those of the pipeline running
in this process, if any. A scrape that cannot reach the database still answers, with the process's own metrics and
`pia_database_figures_up 0`.
"""

import logging
from collections.abc import Iterator
from datetime import datetime

import prometheus_client
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from db.batches import oldest_unfinished
from db.continued_reads import CAPACITY, IDLE_SECONDS, parked_count
from db.event_operations import delivery_counts
from db.ids import utc_now
from db.order_processing import received_backlog
from pipeline.metrics import BatchTimings, add_process_collectors

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
# Methods outside this set (any token is a method to HTTP) share one label value, as unmatched paths share one route.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED_ROUTE = "unmatched"

log = logging.getLogger(__name__)


def _age(now: datetime, then: datetime | None) -> float:
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())


class DatabaseFigures(Collector):
    """The queues and the event backlog, read from the database when Prometheus scrapes (in a worker thread)."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("pia_database_figures_up", "1 when this scrape read the queue and backlog figures "
                                                          "from the database, 0 when it could not.")
        try:
            figures = list(self._figures())
        except Exception:
            log.exception("metrics: the database figures could not be read")
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from figures

    def _figures(self) -> Iterator[Metric]:
        now = utc_now()
        batches, orders = oldest_unfinished(self._engine), received_backlog(self._engine)
        yield GaugeMetricFamily("pia_batches_waiting", "Demand planning batches accepted and waiting to be applied "
                                                       "(PENDING).", value=batches.pending)
        yield GaugeMetricFamily("pia_batches_waiting_oldest_age_seconds", "How long the oldest PENDING batch has "
                                "waited since it was received; 0 when none waits.",
                                value=_age(now, batches.oldest_pending))
        yield GaugeMetricFamily("pia_batches_applying", "Batches a worker is applying or will try again after a "
                                                        "transient failure (PROCESSING).", value=batches.processing)
        yield GaugeMetricFamily("pia_batches_applying_oldest_age_seconds", "How long ago the longest-running "
                                "PROCESSING batch's latest attempt started; 0 when none.",
                                value=_age(now, batches.oldest_processing))
        yield GaugeMetricFamily("pia_orders_waiting", "Orders received and not yet opened (RECEIVED), every tenant.",
                                value=orders.waiting)
        yield GaugeMetricFamily("pia_orders_waiting_oldest_age_seconds", "How long the oldest RECEIVED order has "
                                "waited to be opened; 0 when none waits.", value=_age(now, orders.oldest))
        backlog = GaugeMetricFamily("pia_event_backlog", "Change events of the eCom store still to deliver (neither "
                                    "delivered nor dead-lettered).", labels=["tenant_id", "ecom_store_id"])
        dead_letters = GaugeMetricFamily("pia_event_dead_letters", "Change events of the eCom store the bridge gave "
                                         "up on, waiting for a replay.", labels=["tenant_id", "ecom_store_id"])
        oldest = GaugeMetricFamily("pia_event_oldest_undelivered_age_seconds", "How long ago the change behind the "
                                   "eCom store's oldest event still to deliver was made; 0 when none waits.",
                                   labels=["tenant_id", "ecom_store_id"])
        for store in delivery_counts(self._engine):
            labels = [store.tenant_id, store.ecom_store_id]
            backlog.add_metric(labels, store.backlog)
            dead_letters.add_metric(labels, store.dead_letters)
            oldest.add_metric(labels, _age(now, store.oldest_undelivered))
        yield backlog
        yield dead_letters
        yield oldest


class ProcessFigures(Collector):
    """What this process holds for later requests, read when Prometheus scrapes."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("pia_parked_reads", "Reads of held forecasts this process keeps open between pages "
                                                    f"for the next page's request (at most {CAPACITY}, each for "
                                                    f"{IDLE_SECONDS:g} s idle).", value=parked_count(self._engine))


class ServerMetrics:
    """The registry of one app: its request histogram, the database figures, the batch timings of an in-process
    pipeline and the process collectors."""

    def __init__(self, engine: sa.Engine) -> None:
        self.registry = CollectorRegistry()
        self._requests = Histogram("pia_http_request_duration_seconds",
                                   "Requests answered, by route template, method and status, and the time to the "
                                   "response's start (its _count is the number of requests).",
                                   ["route", "method", "status"], registry=self.registry)
        # Each label set's series, found by a dict lookup: `labels()` checks and joins its values every time (about
        # 3 µs a request). Bounded as the series are: routes are templates, methods a fixed set.
        self._request_series: dict[tuple[str | None, str, int], Histogram] = {}
        self.registry.register(DatabaseFigures(engine))
        self.registry.register(ProcessFigures(engine))
        add_process_collectors(self.registry)
        # Observed by the pipeline when it runs in this process (the embedded default).
        self.batch_timings = BatchTimings(self.registry)

    def observe_request(self, route: str | None, method: str, status: int, seconds: float) -> None:
        key = (route, method if method in METHODS else "OTHER", status)
        series = self._request_series.get(key)
        if series is None:
            series = self._request_series[key] = self._requests.labels(route or UNMATCHED_ROUTE, key[1], str(status))
        series.observe(seconds)

    def exposition(self) -> bytes:
        """The text format of every metric now (reads the database: call it off the event loop)."""
        return prometheus_client.generate_latest(self.registry)
