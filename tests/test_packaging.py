"""The image's install and a partner's client install, tried from outside the repository.

No Docker engine runs here, so the test runs the image's own install step, packaging/install.sh (the Dockerfile
runs nothing else), into fresh virtual environments in a temporary directory, and drives the installed commands
from there, the working directory outside the repository: every command's `--help`, `pia db upgrade`, `pia admin`
on the DuckDB file, `pia serve` answering /healthcheck, `pia admin load --url` through its admin API, and
`pia-upload` from an environment that holds pia-client alone. The installs take their packages from uv's cache.
"""

import json
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from serving.demo_data import demo_document
from tests.served_process import clean_environment, served

REPOSITORY = Path(__file__).resolve().parent.parent

# Every command of the installed `pia`, each asked for its --help in the installed environment (one process: each
# import of the server costs seconds), with the exit code and output of any that fails.
HELP_OF_EVERY_COMMAND = """
import json, click
from click.testing import CliRunner
from serving.cli import main

def paths(command, path):
    yield path
    if isinstance(command, click.Group):
        context = click.Context(command)
        for name in command.list_commands(context):
            yield from paths(command.get_command(context, name), [*path, name])

answers = {" ".join(path): CliRunner().invoke(main, [*path, "--help"]) for path in paths(main, [])}
print(json.dumps({name: [result.exit_code, result.output if result.exit_code else ""]
                  for name, result in answers.items()}))
"""
DISTRIBUTIONS = "import importlib.metadata as m, json; print(json.dumps(sorted(d.metadata['Name'].lower() " \
                "for d in m.distributions())))"


def install(kind: str, target: Path) -> Path:
    """packaging/install.sh into `target`, with this test run's Python; returns the environment's bin folder."""
    environment = clean_environment(UV_PYTHON=sys.executable)
    done = subprocess.run(["bash", str(REPOSITORY / "packaging" / "install.sh"), kind, str(target)],
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return target / "bin"


def run(program: Path, *arguments: str, cwd: Path, environment: dict[str, str],
        expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(program), *arguments], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == expect, (arguments, done.returncode, done.stdout, done.stderr)
    return done


def distributions(bin_dir: Path, cwd: Path) -> set[str]:
    return set(json.loads(run(bin_dir / "python", "-c", DISTRIBUTIONS, cwd=cwd, environment=clean_environment())
                          .stdout))


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory outside the repository, so nothing is imported from the checkout."""
    return tmp_path_factory.mktemp("outside")


@pytest.fixture(scope="module")
def server_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install("server", tmp_path_factory.mktemp("image") / "venv")


@pytest.fixture(scope="module")
def client_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install("client", tmp_path_factory.mktemp("partner") / "venv")


@dataclass(frozen=True)
class Site:
    """An installed server on a DuckDB file, set up with the installed commands, serving."""

    url: str
    tenant_id: str
    steps: dict[str, subprocess.CompletedProcess[str]]  # what each set-up command answered
    planner_credentials: Path


@pytest.fixture(scope="module")
def site(server_bin: Path, outside: Path, tmp_path_factory: pytest.TempPathFactory):
    files = tmp_path_factory.mktemp("site")
    environment = clean_environment(PIA_DATA_DIR=str(files / "data"), PIA_LOG_FORMAT="json")
    pia = server_bin / "pia"
    steps = {"upgrade": run(pia, "db", "upgrade", cwd=outside, environment=environment)}
    tenant_id = json.loads(run(pia, "admin", "create-tenant", "Wheel Retail", cwd=outside,
                               environment=environment).stdout)["tenantId"]
    steps["list-tenants"] = run(pia, "admin", "list-tenants", cwd=outside, environment=environment)
    admin, planner = files / "admin.json", files / "planner.json"
    admin.write_text(run(pia, "admin", "create-client", "--tenant", tenant_id, "--scope", "admin", cwd=outside,
                         environment=environment).stdout)
    planner.write_text(run(pia, "admin", "create-client", "--tenant", tenant_id, "--scope", "demand_planning",
                           "--demand-planning-permission", cwd=outside, environment=environment).stdout)
    document = files / "backoffice.json"
    document.write_bytes(orjson.dumps(demo_document("Wheel Retail")))
    with served(pia, environment, outside, files / "serve.log") as url:
        # The DuckDB file is the server's now: the back office goes through its admin API.
        steps["load --url"] = run(pia, "admin", "load", str(document), "--tenant", tenant_id, "--url", url,
                                  "--credentials", str(admin), cwd=outside, environment=environment)
        yield Site(url, tenant_id, steps, planner)


def test_every_installed_command_answers_its_help(server_bin: Path, outside: Path) -> None:
    top = run(server_bin / "pia", "--help", cwd=outside, environment=clean_environment())
    assert "Usage: pia" in top.stdout
    answers = json.loads(run(server_bin / "python", "-c", HELP_OF_EVERY_COMMAND, cwd=outside,
                             environment=clean_environment()).stdout)
    failed = {name: answer for name, answer in answers.items() if answer[0] != 0}
    assert failed == {}
    assert {"admin", "admin order show", "admin events replay", "db upgrade", "serve", "demo", "worker", "bridge",
            "pipeline audit", "pipeline export", "upload"} <= set(answers)
    assert len(answers) > 40


def test_the_wheel_holds_the_server_without_benchmarks_or_the_audit_libraries(server_bin: Path,
                                                                               outside: Path) -> None:
    installed = distributions(server_bin, outside)
    assert {"pia", "pia-client", "pia-contracts", "duckdb", "quart"} <= installed
    # great-expectations is the audit extra; without it none of what it brings is installed either.
    assert not installed & {"great-expectations", "pandas", "scipy", "altair"}
    found = run(server_bin / "python", "-c", "import importlib.util as u; print([m for m in ('benchmarks', "
                "'tests', 'serving', 'pia_client') if u.find_spec(m)])", cwd=outside, environment=clean_environment())
    assert found.stdout.strip() == "['serving', 'pia_client']"


def test_the_audit_without_its_extra_names_the_install_command(server_bin: Path, outside: Path,
                                                               tmp_path: Path) -> None:
    environment = clean_environment(PIA_DATA_DIR=str(tmp_path))
    refused = run(server_bin / "pia", "pipeline", "audit", cwd=outside, environment=environment, expect=2)
    assert refused.stderr.strip().splitlines() == [
        "pia pipeline audit needs great-expectations: pip install 'pia[audit]' (in a checkout: uv sync --extra audit)"]
    assert not any(tmp_path.iterdir())  # refused before it opened the database


def test_the_installed_server_migrates_serves_and_takes_admin_commands(site: Site, server_bin: Path,
                                                                       outside: Path) -> None:
    assert "schema at revision" in site.steps["upgrade"].stdout
    assert [t["tenantId"] for t in json.loads(site.steps["list-tenants"].stdout)] == [site.tenant_id]
    loaded = json.loads(site.steps["load --url"].stdout)
    assert loaded, site.steps["load --url"].stdout
    status = run(server_bin / "python", "-c", f"import httpx; print(httpx.get('{site.url}/healthcheck').text)",
                 cwd=outside, environment=clean_environment())
    assert json.loads(status.stdout)["status"] == "ok"


def test_the_client_alone_installs_without_the_server_and_uploads(site: Site, client_bin: Path, outside: Path,
                                                                  tmp_path: Path) -> None:
    installed = distributions(client_bin, outside)
    assert {"pia-client", "pia-contracts"} <= installed
    # Nor the server's validation libraries: the client uses the contracts that need pyarrow alone.
    assert not installed & {"pia", "duckdb", "quart", "great-expectations", "pandas", "sqlalchemy", "pydantic",
                            "phonenumbers"}
    today = datetime.now(UTC).date()
    rows = [f"1001,{100001 + sku},{(today + timedelta(days=day)).isoformat()},{sku + day}.5"
            for sku in range(10) for day in range(3)]
    forecasts = tmp_path / "forecasts.csv"
    forecasts.write_text("\n".join(["retailStoreNumber,skuNumber,date,quantity", *rows]) + "\n")
    uploaded = run(client_bin / "pia-upload", "forecasts", str(forecasts), "--url", site.url, "--tenant",
                   site.tenant_id, "--credentials", str(site.planner_credentials), "--wait", cwd=outside,
                   environment=clean_environment())
    summary = json.loads(uploaded.stdout)
    assert summary["counts"]["applied"] == 10 and summary["counts"]["rejected"] == 0, uploaded.stderr
    held = run(client_bin / "python", "-c", f"""
from pia_client.api import PiaClient
from pia_client.tokens import credentials_from_file
from pathlib import Path
credentials = credentials_from_file(Path({str(site.planner_credentials)!r}), {site.tenant_id!r}, "demand_planning")
with PiaClient({site.url!r}, {site.tenant_id!r}, credentials) as pia:
    print(pia.held_forecasts().height)
""", cwd=outside, environment=clean_environment())
    assert held.stdout.strip() == "10"

