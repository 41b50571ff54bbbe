"""docker-compose.yml stays truthful to the code: every `pia` command it runs exists in the CLI, and every PIA_*
variable it sets is a field of Settings."""

import re
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic_settings import BaseSettings

from serving.cli import main
from settings import Settings

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
# The production topology of DESIGN.md: these services must be there.
SERVICES = {"postgres", "kafka", "migrate", "api", "worker", "bridge"}


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _resolves(arguments: list[str]) -> bool:
    """True when the arguments name a command of `pia` (through its groups), the options that follow aside."""
    command: click.Command = main
    context = click.Context(main)
    for word in arguments:
        if word.startswith("-") or not isinstance(command, click.Group):
            break
        command = command.get_command(context, word)
        if command is None:
            return False
    return not isinstance(command, click.Group)


def test_the_topology_runs_every_role_against_postgresql_and_kafka() -> None:
    services = _compose()["services"]
    assert set(services) >= SERVICES
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    for name in ("api", "worker", "bridge"):
        environment = services[name]["environment"]
        assert environment["PIA_DATABASE_URL"].startswith("postgresql+psycopg://"), name
        assert environment["PIA_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092", name


def test_every_pia_command_of_the_compose_file_exists() -> None:
    commands = {name: service["command"] for name, service in _compose()["services"].items()
                if "build" in service}  # the services built from this repository run `pia`
    assert {"migrate", "api", "worker", "bridge"} <= set(commands)
    missing = {name: command for name, command in commands.items() if not _resolves(command)}
    assert missing == {}, f"not a pia command: {missing}"


def test_every_pia_setting_of_the_compose_file_exists() -> None:
    fields = set()
    for name, field in Settings.model_fields.items():  # a group (settings.bridge) reads its own PIA_BRIDGE_* names
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseSettings):
            fields |= {f"{field.annotation.model_config['env_prefix']}{part}".upper()
                       for part in field.annotation.model_fields}
        else:
            fields.add(f"PIA_{name.upper()}")
    named = set()
    for service in _compose()["services"].values():
        environment = service.get("environment", {})
        named |= {key for key in (environment if isinstance(environment, dict) else
                                  (entry.partition("=")[0] for entry in environment)) if key.startswith("PIA_")}
    # Settings may also appear inside values, as ${PIA_…} substitutions from the operator's shell.
    named |= set(re.findall(r"\$\{(PIA_[A-Z0-9_]+)", COMPOSE.read_text()))
    assert "PIA_KAFKA_BOOTSTRAP_SERVERS" in named
    assert named - fields == set()
