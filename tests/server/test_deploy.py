"""The team deploy in `deploy/`, run without Docker: PostgreSQL, the migrate step, and two
`gate serve` replicas as processes on the example gate.toml with its environment variables
filled in as deploy.env would; an ask on one replica is decided on the other. And the
compose file keeps validating, publishing only the proxy (so `/metrics` stays inside).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.http import TLS
from tests.support.servers import ServerProcess

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CONFIG = DEPLOY / "gate.toml"


def _deploy_env(database_url: str) -> dict[str, str]:
    """The example's variables (deploy.env.example), each filled in as a deploy would."""
    example = (DEPLOY / "deploy.env.example").read_text()
    names = re.findall(r"^(GATE_[A-Z0-9_]+)=", example, flags=re.MULTILINE)
    env = dict.fromkeys(names, "")
    env.update(
        GATE_SERVER__DATABASE_URL=database_url,
        GATE_SERVER__PUBLIC_URL="https://gate.example.com",
        GATE_SERVER__SESSION_SECRET=secrets.token_urlsafe(32),
        GATE_DOMAIN="gate.example.com",
        GATE_TLS="ops@example.com",
    )
    for name in names:
        if name.startswith("GATE_TOKEN_"):
            env[name] = secrets.token_urlsafe(24)
    return env


def _gate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gate.cli", *args, "--config", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.mark.postgres
def test_an_ask_on_one_replica_is_decided_on_the_other(postgres_url: str, tmp_path: Path) -> None:
    env = _deploy_env(postgres_url)
    # the example needs every token it names: an empty one stops the migrate step, by name
    unset = _gate({**env, "GATE_TOKEN_ALICE": ""}, "db", "upgrade")
    assert unset.returncode == 2 and "Traceback" not in unset.stderr
    assert 'token "alice-cli": token_env: the environment variable GATE_TOKEN_ALICE is not set' in (
        unset.stderr
    )
    with _replicas(env, tmp_path) as replicas:
        one, two = replicas
        agent = {"Authorization": f"Bearer {env['GATE_TOKEN_BILLING_AGENT']}"}
        alice = {"Authorization": f"Bearer {env['GATE_TOKEN_ALICE']}"}
        call = {"tool_name": "pay_invoice", "tool_args": {"amount": 4200, "to": "ACME"}}
        asked = httpx.post(
            one.url + "/v1/gate", json=call, headers=agent, timeout=30, verify=TLS
        ).json()
        assert asked["decision"] == "ask" and asked["rule"] == "big-payments", asked
        rid = asked["request"]["id"]
        assert asked["request"]["url"] == f"https://gate.example.com/requests/{rid}"
        waited: dict[str, Any] = {}

        def wait_on_one() -> None:
            waited["answer"] = httpx.get(
                one.url + f"/v1/requests/{rid}/wait",
                params={"timeout": 30},
                headers=agent,
                timeout=60,
                verify=TLS,
            )

        waiter = threading.Thread(target=wait_on_one)
        waiter.start()
        decided = httpx.post(
            two.url + f"/v1/requests/{rid}/decision",
            json={"verdict": "approve", "comment": "invoice checked"},
            headers=alice,
            timeout=30,
            verify=TLS,
        )
        assert decided.status_code == 200, decided.text
        waiter.join(timeout=60)
        answer = waited["answer"]
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "approved"
        assert answer.json()["decided_by"] == "alice"
        # neither replica migrated (the migrate step did), and each says where its console is
        for replica in replicas:
            log = replica.log()
            assert "Running upgrade" not in log
            assert '"message": "console: https://gate.example.com/' in log


@contextmanager
def _replicas(env: dict[str, str], tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """The compose file's `migrate` step, then its two replicas, stopped afterwards."""
    migrated = _gate(env, "db", "upgrade")
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout == "database is at the latest schema\n"
    replicas = [ServerProcess(CONFIG, env=env, log_path=tmp_path / f"gate-{n}.log") for n in (1, 2)]
    try:
        for replica in replicas:
            replica.start(timeout=60)
        yield replicas
    finally:
        for replica in replicas:
            replica.stop()


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.postgres
@pytest.mark.skipif(shutil.which("caddy") is None, reason="needs caddy (apt-get install caddy)")
def test_the_proxy_serves_both_replicas_over_https_and_keeps_metrics_inside(
    postgres_url: str, tmp_path: Path
) -> None:
    # deploy/Caddyfile as the compose file runs it, with Caddy's own authority for the
    # certificate and the two replicas on this machine's ports: the agent asks and the
    # approver decides over HTTPS, and /metrics is not served from outside.
    env = {**_deploy_env(postgres_url), "GATE_DOMAIN": "localhost", "GATE_TLS": "internal"}
    env["GATE_SERVER__PUBLIC_URL"] = "https://localhost"
    with _replicas(env, tmp_path) as replicas:
        https, http = _unused_port(), _unused_port()
        upstreams = " ".join(f"127.0.0.1:{r.port}" for r in replicas)
        proxy_env = {
            **os.environ,
            **env,
            "GATE_UPSTREAMS": upstreams,
            "GATE_HTTPS_PORT": str(https),
            "GATE_HTTP_PORT": str(http),
            "XDG_DATA_HOME": str(tmp_path / "caddy-data"),
            "XDG_CONFIG_HOME": str(tmp_path / "caddy-config"),
        }
        log = open(tmp_path / "caddy.log", "wb")
        caddy = subprocess.Popen(
            ["caddy", "run", "--config", str(DEPLOY / "Caddyfile"), "--adapter", "caddyfile"],
            env=proxy_env,
            stdout=log,
            stderr=log,
        )
        try:
            root = tmp_path / "caddy-data" / "caddy" / "pki" / "authorities" / "local" / "root.crt"
            tls = _trusting(root, caddy, tmp_path / "caddy.log")
            base = f"https://localhost:{https}"
            agent = {"Authorization": f"Bearer {env['GATE_TOKEN_BILLING_AGENT']}"}
            alice = {"Authorization": f"Bearer {env['GATE_TOKEN_ALICE']}"}
            with httpx.Client(base_url=base, verify=tls, timeout=30) as client:
                call = {"tool_name": "pay_invoice", "tool_args": {"amount": 4200, "to": "ACME"}}
                asked = client.post("/v1/gate", json=call, headers=agent).json()
                assert asked["decision"] == "ask", asked
                rid = asked["request"]["id"]
                decided = client.post(
                    f"/v1/requests/{rid}/decision",
                    json={"verdict": "approve", "comment": "invoice checked"},
                    headers=alice,
                )
                assert decided.status_code == 200, decided.text
                answer = client.get(
                    f"/v1/requests/{rid}/wait", params={"timeout": 5}, headers=agent
                )
                assert answer.json()["status"] == "approved", answer.text
                assert client.get("/metrics").status_code == 404
                assert client.get("/healthz").status_code == 200
            for replica in replicas:  # each replica serves its metrics on the inside
                assert (
                    httpx.get(replica.url + "/metrics", timeout=10, verify=TLS).status_code == 200
                )
            with pytest.raises(httpx.ConnectError):  # no certificate but the deploy's own
                httpx.get(base + "/healthz", timeout=10, verify=TLS)
        finally:
            caddy.terminate()
            caddy.wait(timeout=20)
            log.close()


def _trusting(root: Path, caddy: subprocess.Popen[bytes], log: Path) -> ssl.SSLContext:
    """A TLS context trusting only Caddy's local authority, once Caddy has made it."""
    deadline = time.monotonic() + 30
    while not root.exists():
        assert caddy.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "caddy made no local authority within 30 s"
        time.sleep(0.1)
    time.sleep(0.5)  # the certificate for localhost is issued just after the authority
    return ssl.create_default_context(cafile=str(root))


def test_the_example_config_checks_out_with_its_variables_filled() -> None:
    env = _deploy_env("postgresql://gate:pw@postgres:5432/gate")
    checked = _gate(env, "policy", "check")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"{CONFIG}: OK, 3 rule(s)")
    # serving on every address: it has the tokens and approvers that needs
    assert "refusing to serve" not in checked.stderr


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="needs docker-compose")
def test_the_compose_file_validates_and_publishes_only_the_proxy() -> None:
    import yaml

    ran = subprocess.run(
        ["docker-compose", "-f", str(DEPLOY / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    services = yaml.safe_load(ran.stdout)["services"]
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"proxy"}  # the replicas' /metrics is reachable on the network only
    for name in ("gate-1", "gate-2", "migrate"):
        volumes = services[name]["volumes"]
        assert any(str(v).startswith(f"{CONFIG}:/etc/gate/gate.toml") for v in volumes) or any(
            isinstance(v, dict) and v.get("source") == str(CONFIG) for v in volumes
        ), volumes
    caddyfile = (DEPLOY / "Caddyfile").read_text()
    assert "@metrics path /metrics /metrics/*" in caddyfile
    assert "respond @metrics 404" in caddyfile
    assert "172.30.0.10" in str(services["proxy"]["networks"])
