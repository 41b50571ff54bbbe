"""Which of the service's roles a serving process runs beside the API, and which must run elsewhere.

The API and the order processor run in every serving process. The pipeline worker, the event bridge and (with Kafka)
the relay from the outbox to Kafka run in `pia serve` when the embedded DuckDB file is its own, and in `pia demo`,
the everything-in-one command, on either backend. On PostgreSQL `pia serve` leaves them to `pia worker` (pipeline
worker, relay) and `pia bridge` processes, which scale out; its start-up lines name what to start beside it.
"""

from dataclasses import dataclass

from settings import Settings

ALWAYS = ("the API", "the order processor")


@dataclass(frozen=True)
class Roles:
    pipeline_worker: bool
    event_bridge: bool
    event_relay: bool  # outbox → Kafka; wanted only when Kafka is set

    @classmethod
    def of_serve(cls, settings: Settings) -> "Roles":
        """`pia serve`'s defaults: on DuckDB everything (the file is this process's); on PostgreSQL the API and the
        order processor only, and the pipeline worker when PIA_INPROCESS_WORKER says so."""
        return cls(pipeline_worker=settings.runs_inprocess_worker, event_bridge=settings.is_embedded,
                   event_relay=settings.is_embedded and bool(settings.kafka.bootstrap_servers))

    @classmethod
    def everything(cls, settings: Settings) -> "Roles":
        """`pia demo`: every role in the one process, on either backend."""
        return cls(pipeline_worker=True, event_bridge=True, event_relay=bool(settings.kafka.bootstrap_servers))

    def running(self, settings: Settings) -> list[str]:
        bridge = f"the event bridge (from {'Kafka' if settings.kafka.bootstrap_servers else 'the outbox'})"
        return [*ALWAYS, *(name for name, runs in (("the pipeline worker", self.pipeline_worker),
                                                   ("the relay to Kafka", self.event_relay),
                                                   (bridge, self.event_bridge)) if runs)]

    def to_start_beside(self, settings: Settings) -> list[str]:
        """The commands that run what this process does not, each with the roles it would take."""
        worker = [name for name, missing in (("pipeline worker", not self.pipeline_worker),
                                             ("relay to Kafka", settings.kafka.bootstrap_servers
                                              and not self.event_relay)) if missing]
        commands = [f"`pia worker` ({', '.join(worker)})"] if worker else []
        if not self.event_bridge:
            commands.append("`pia bridge` (event delivery)")
        return commands

    def startup_lines(self, settings: Settings) -> list[str]:
        lines = [f"running in this process: {', '.join(self.running(settings))}"]
        beside = self.to_start_beside(settings)
        if beside and settings.is_embedded:
            lines.append(f"not running: {' and '.join(beside)} would need the DuckDB file this process holds; "
                         "unset PIA_INPROCESS_WORKER")
        elif beside:
            lines.append(f"start beside it (PostgreSQL): {' and '.join(beside)}")
        return lines
