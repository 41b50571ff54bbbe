"""`pia worker`: the long-running worker process. It applies uploaded batches, opens received orders and, with
Kafka set, relays the event outbox to Kafka; it composes the pipeline, the order processor and the relay, so it
lives here, above all three, rather than inside one of them."""

import signal
import threading

import click

from db.order_processing import run_order_processor
from events.relay import run_relay
from pipeline.cli import pipeline_from_environment
from pipeline.metrics import serve_worker_metrics
from pipeline.worker import run_supervised
from rules.retry import RetryPolicy
from serving.heap import freeze_startup_heap


@click.command()
def worker() -> None:
    """Process batches until stopped (SIGTERM/SIGINT); run several against PostgreSQL to scale out."""
    settings, engine, pipeline = pipeline_from_environment()
    if settings.worker.metrics_port:
        pipeline.on_attempt = serve_worker_metrics(settings.worker.metrics_port).observe
    stop, wake = threading.Event(), threading.Event()
    # Orders are processed here too (their RECEIVED → OPEN step is safe to share with the servers).
    orders = threading.Thread(target=run_order_processor, name="order-processor", args=(
        engine, RetryPolicy.of(settings.order), stop, threading.Event(), settings.worker.poll_seconds))
    orders.start()

    def request_stop(*_: object) -> None:
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    # Kafka mode: this worker also relays the outbox to Kafka (beside any other workers' relays).
    relay = threading.Thread(target=run_relay, args=(settings, engine, stop), name="event-relay") \
        if settings.kafka.bootstrap_servers else None
    if relay:
        relay.start()
    click.echo(f"pipeline worker {pipeline.worker_id} started", err=True)
    freeze_startup_heap()
    run_supervised(pipeline, stop, wake, settings.worker.poll_seconds)
    orders.join()
    if relay:
        relay.join()
