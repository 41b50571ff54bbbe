"""Secrets at rest: signing keys sealed with PIA_SECRET_KEY (or the embedded key file), its rotation, and
databases from before sealing, on both backends."""

import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import sqlalchemy as sa
from alembic import command
from click.testing import CliRunner
from joserfc import jwt
from joserfc.jwk import ECKey

from db.clients import DEMAND_PLANNING_PERMISSION
from db.engine import create_engine
from db.ids import new_id
from db.migrate import _config, upgrade
from db.schema import signing_keys
from db.secrets import KEY_FILE, SecretBox, SecretKeyError, new_secret_key, secret_box
from db.tenants import create_tenant
from serving.admin import issue_client
from serving.app import create_app
from serving.cli import main
from settings import Settings
from tests.conftest import ENV, LiveServer, bearer, free_port, get_token, without_upload_workers

pytestmark = pytest.mark.without_shop


def _stored_keys(engine: sa.Engine) -> list[sa.Row]:
    with engine.connect() as conn:
        return conn.execute(sa.select(signing_keys.c.kid, signing_keys.c.sealed_private_jwk,
                                      signing_keys.c.private_jwk)).all()


def _keys(settings: Settings) -> str:
    """The configured key list, whether from PIA_SECRET_KEY or the generated key file."""
    return settings.secret_key.get_secret_value() or (settings.data_dir / KEY_FILE).read_text().strip()


def _cli_env(settings: Settings, secret_key: str) -> dict[str, str]:
    return {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
            "PIA_SECRET_KEY": secret_key}


def _pia(settings: Settings, secret_key: str, *args: str):
    return CliRunner().invoke(main, list(args), env=_cli_env(settings, secret_key))


@pytest.fixture
def fresh(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Settings]:
    """Settings for an empty database of this test's own: the session's keys are left alone."""
    if backend == "duckdb":
        yield Settings(data_dir=tmp_path)
        return
    name = f"pia_secrets_{new_id().replace('-', '')[-12:]}"
    admin = sa.create_engine(ENV.test_postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(request.getfixturevalue("postgres_url")).set(database=name)
    yield Settings(data_dir=tmp_path, database_url=url.render_as_string(hide_password=False),
                   secret_key=new_secret_key())
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


class Service:
    """A server on the settings' database; one public address (issuer) across restarts, as PIA_ISSUER gives."""

    issuer = "https://pia.example"

    def __init__(self, settings: Settings, engine: sa.Engine) -> None:
        self.live = LiveServer(create_app(without_upload_workers(settings), engine, issuer=self.issuer), free_port())
        self.live.start()
        self.http = httpx.Client(base_url=self.live.url, timeout=30)

    def stop(self) -> None:
        self.http.close()
        self.live.stop()


def _client(engine: sa.Engine) -> tuple[dict, dict]:
    tenant_id = create_tenant(engine, "secrets", is_test=True)
    client_id, secret = issue_client(engine, tenant_id, "secrets", "demand_planning", None,
                                     (DEMAND_PLANNING_PERMISSION,))
    return {"id": tenant_id}, {"clientId": client_id, "clientSecret": secret, "scope": "demand_planning",
                               "resource": None}


def _limits(world: dict) -> str:
    return f"/v1/tenants/{world['id']}/demand_planning/limits"


def test_stored_private_keys_are_sealed(http: httpx.Client, engine, settings) -> None:
    """What a database dump shows of the signing keys: no JWK, only Fernet tokens the secret key opens."""
    assert http.get("/.well-known/jwks.json").json()["keys"]
    rows = _stored_keys(engine)
    assert rows and all(row.private_jwk is None for row in rows)
    box = secret_box(settings)
    for row in rows:
        assert "{" not in row.sealed_private_jwk and row.kid not in row.sealed_private_jwk
        private = orjson.loads(box.open(row.sealed_private_jwk))
        assert private["kid"] == row.kid and private["d"] not in row.sealed_private_jwk
        with pytest.raises(SecretKeyError):
            SecretBox(new_secret_key(), "another key").open(row.sealed_private_jwk)


def test_embedded_default_generates_one_private_key_file(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    sealed = secret_box(settings).seal("a secret")
    path = settings.data_dir / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret_box(settings).open(sealed) == "a secret"  # the file is reused, not replaced
    assert list(settings.data_dir.iterdir()) == [path]  # no draft left behind


def test_postgresql_requires_pia_secret_key(postgres_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url=postgres_url)
    engine = create_engine(settings)
    upgrade(engine)  # current whichever test came first on this worker, so `pia serve` gets as far as the key
    engine.dispose()
    with pytest.raises(SecretKeyError, match="PIA_SECRET_KEY is required with PostgreSQL"):
        secret_box(settings)
    for args in (("serve",), ("admin", "rotate-key"), ("admin", "rotate-secret-key")):
        result = _pia(settings, "", *args)
        assert result.exit_code == 1 and "PIA_SECRET_KEY is required" in result.output, (args, result.output)
    assert not (tmp_path / KEY_FILE).exists()


def test_malformed_secret_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    good = new_secret_key()
    with pytest.raises(SecretKeyError, match="key 2 is not a Fernet key") as refused:
        secret_box(Settings(data_dir=tmp_path, secret_key=f"{good},not-a-key"))
    assert "not-a-key" not in str(refused.value) and good not in str(refused.value)


def test_new_secret_key_prints_a_fresh_usable_key(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    printed = [json.loads(_pia(settings, "", "admin", "new-secret-key").stdout)["secretKey"] for _ in range(2)]
    assert printed[0] != printed[1]
    box = SecretBox(printed[0], "printed")
    assert box.open(box.seal("x")) == "x"
    assert not (tmp_path / KEY_FILE).exists()  # nothing stored


def test_wrong_secret_key_stops_the_server_at_start_without_a_new_key(http, engine, settings) -> None:
    # A signing key is stored (the test server makes it at its first token): in an empty store no key is wrong, and
    # `pia serve` would make the first one and serve. Run alone, this test used to hang there.
    get_token(http, *_client(engine))
    before = _stored_keys(engine)
    assert before
    wrong = new_secret_key()
    result = _pia(settings, wrong, "serve", "--port", str(free_port()))
    assert result.exit_code == 1
    assert "cannot read the token signing keys" in result.output and "PIA_SECRET_KEY does not hold" in result.output
    assert _pia(settings, wrong, "admin", "rotate-key").exit_code == 1
    assert _stored_keys(engine) == before  # nothing sealed with the wrong key, no key that would void tokens


def test_rotating_the_secret_key_keeps_tokens_valid(fresh: Settings) -> None:
    engine = create_engine(fresh)
    upgrade(engine)
    world, client = _client(engine)
    old_service = Service(fresh, engine)
    try:
        token = get_token(old_service.http, world, client)
        assert old_service.http.get(_limits(world), headers=bearer(token)).status_code == 200
    finally:
        old_service.stop()
    old, new = _keys(fresh), new_secret_key()

    result = _pia(fresh, f"{new},{old}", "admin", "rotate-secret-key")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"resealed": 1}
    (row,) = _stored_keys(engine)
    with pytest.raises(SecretKeyError):
        SecretBox(old, "old key").open(row.sealed_private_jwk)

    rotated = Settings(data_dir=fresh.data_dir, database_url=fresh.database_url, secret_key=new)  # old one dropped
    new_service = Service(rotated, engine)
    try:
        assert new_service.http.get(_limits(world), headers=bearer(token)).status_code == 200
        fresh_token = get_token(new_service.http, world, client)
        assert new_service.http.get(_limits(world), headers=bearer(fresh_token)).status_code == 200
    finally:
        new_service.stop()
    engine.dispose()


def test_plain_key_from_before_sealing_is_sealed_and_its_tokens_stay_valid(fresh: Settings) -> None:
    engine = create_engine(fresh)
    with engine.begin() as conn:
        command.upgrade(_config(conn), "0003")
    legacy = ECKey.generate_key("P-256", parameters={"kid": new_id(), "use": "sig", "alg": "ES256"})
    with engine.begin() as conn:  # as the release before revision 0004 stored it
        conn.execute(sa.text("INSERT INTO signing_keys (kid, private_jwk, created_time) "
                             "VALUES (:kid, :jwk, CURRENT_TIMESTAMP)"),
                     {"kid": legacy.kid, "jwk": orjson.dumps(legacy.as_dict(private=True)).decode()})
    upgrade(engine)
    world, client = _client(engine)
    service = Service(fresh, engine)
    try:
        issuer, now = service.issuer, int(time.time())
        claims = {"iss": issuer, "aud": issuer, "sub": client["clientId"], "client_id": client["clientId"],
                  "iat": now, "nbf": now, "exp": now + 600, "jti": new_id(), "scope": "demand_planning",
                  "tenant_id": world["id"]}
        old_token = jwt.encode({"alg": "ES256", "kid": legacy.kid, "typ": "at+jwt"}, claims, legacy)
        assert service.http.get(_limits(world), headers=bearer(old_token)).status_code == 200
        assert legacy.kid in {key["kid"] for key in service.http.get("/.well-known/jwks.json").json()["keys"]}
    finally:
        service.stop()

    (row,) = _stored_keys(engine)
    assert row.private_jwk is None and "{" not in row.sealed_private_jwk
    assert orjson.loads(secret_box(fresh).open(row.sealed_private_jwk)) == legacy.as_dict(private=True)
    with pytest.raises(RuntimeError, match="exist only sealed"), engine.begin() as conn:
        command.downgrade(_config(conn), "0003")  # 0003 would need the plain text back
    engine.dispose()
