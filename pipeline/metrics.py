"""The pipeline's metrics (prometheus_client), observed by the pipeline that applies the batches, in whichever
process runs it: `pia serve` shows them at /metrics when the pipeline runs inside it (the embedded default), a
`pia worker` on its own port (PIA_WORKER_METRICS_PORT)."""

import prometheus_client
from prometheus_client import CollectorRegistry, Histogram

from pipeline.worker import Attempt

# The *_created series would double every counter's and histogram's series for a figure nobody graphs.
prometheus_client.disable_created_metrics()

# From a tenth of a second to an hour: a batch waits behind its tenant's earlier batches.
WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# An attempt applies up to 20,000 items in one transaction.
ATTEMPT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def add_process_collectors(registry: CollectorRegistry) -> None:
    """The process's CPU, memory, open files and start time, the interpreter and its garbage collection."""
    prometheus_client.ProcessCollector(registry=registry)
    prometheus_client.PlatformCollector(registry=registry)
    prometheus_client.GCCollector(registry=registry)


class BatchTimings:
    """How long batches waited for their first attempt, and how long each attempt took, by outcome."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._waited = Histogram("pia_batch_wait_seconds", "Time from a batch's upload to its first attempt.",
                                 ["kind"], buckets=WAIT_BUCKETS, registry=registry)
        self._took = Histogram("pia_batch_attempt_seconds", "Time an attempt at a batch took, by the progress it "
                               "left (PROCESSING: tried again later).", ["kind", "progress"],
                               buckets=ATTEMPT_BUCKETS, registry=registry)

    def observe(self, attempt: Attempt) -> None:
        if attempt.waited_seconds is not None:
            self._waited.labels(attempt.kind).observe(attempt.waited_seconds)
        self._took.labels(attempt.kind, attempt.progress).observe(attempt.took_seconds)


def serve_worker_metrics(port: int) -> BatchTimings:
    """Serve a `pia worker`'s metrics on all interfaces at `port` (a thread of prometheus_client's); returns what
    its pipeline observes into."""
    registry = CollectorRegistry()
    add_process_collectors(registry)
    timings = BatchTimings(registry)
    prometheus_client.start_http_server(port, registry=registry)
    return timings
