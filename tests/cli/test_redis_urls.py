"""Shared Redis databases with a password and over TLS (``rediss://``): the URL is parsed as
redis-py parses it, the password never shows in a report or a message, and a real campaign
shares its failures through a password-protected TLS server."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time

import pytest
import redis
from fxfuzz.campaign.database import check_reachable, parse_databases, redact
from fxfuzz.core.errors import UsageError

needs_redis = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server is not installed (.ci/run installs it)"
)
PASSWORD = "s3cr:t@pw"  # a colon and an @ inside: percent-encoded in the URL
QUOTED = "s3cr%3At%40pw"
CRASHER = "def crasher(gm, sig):\n    raise ValueError('planted')\n"


@pytest.mark.parametrize(
    "url, shown",
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://default:hunter2@h:6379/0", "redis://default:***@h:6379/0"),
        (f"rediss://:{QUOTED}@h:6380/1?ssl_cert_reqs=none", "rediss://:***@h:6380/1?ssl_cert_reqs=none"),
        ("redis://:pass@word@h/0", "redis://:***@h/0"),  # redis-py, like urllib, splits at the last @
        ("redis://h/0?db=1&password=hunter2", "redis://h/0?db=1&password=***"),
        ("redis://user@h/0", "redis://user@h/0"),
        ("redis://[::1/0", "redis:(malformed URL)"),
    ],
)
def test_redact_hides_every_password_redis_py_would_send(url, shown):
    assert redact(url) == shown
    password = redis.connection.parse_url(url).get("password") if "[" not in url else None
    assert not password or password not in redact(url)


def test_rediss_urls_are_taken_and_other_schemes_refused_without_their_password():
    spec = parse_databases([f"rediss://:{QUOTED}@localhost:6380/0?ssl_cert_reqs=none", "dir"], "default")
    assert spec.local == "dir" and spec.shared == (f"rediss://:{QUOTED}@localhost:6380/0?ssl_cert_reqs=none",)
    with pytest.raises(UsageError) as e:
        parse_databases(["redis+sentinel://:hunter2@h:26379/0"], "default")
    assert "hunter2" not in str(e.value) and "redis+sentinel://:***@h:26379/0" in str(e.value)


def test_a_redis_url_with_an_unknown_parameter_is_one_line(tmp_path, refused):
    # redis-py takes it, and fails on it only when it connects: a traceback before this check.
    line = refused(
        [
            "run",
            "--pass",
            "identity",
            "--db",
            "redis://:hunter2@127.0.0.1:1/0?sockettimeout=1",
            "--report-dir",
            str(tmp_path / "r"),
        ]
    )
    assert (
        line
        == "fxfuzz: error: --db redis://:***@127.0.0.1:1/0?sockettimeout=1: unknown query parameter 'sockettimeout'"
    )
    # The parameters redis-py knows still pass the check (the server is then unreachable).
    assert "unreachable" in refused(
        [
            "run",
            "--pass",
            "identity",
            "--db",
            "redis://127.0.0.1:1/0?socket_timeout=1&health_check_interval=2",
            "--report-dir",
            str(tmp_path / "r"),
        ]
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory):
    """A Redis server that speaks only TLS (a self-signed certificate) and asks a password:
    the rediss:// URL a client with the certificate uses."""
    if shutil.which("redis-server") is None or shutil.which("openssl") is None:
        pytest.skip("redis-server and openssl are needed")
    root = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", root / "key.pem", "-out", root / "cert.pem",
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    port = _free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--tls-cert-file", root / "cert.pem",
         "--tls-key-file", root / "key.pem", "--tls-ca-cert-file", root / "cert.pem", "--tls-auth-clients", "no",
         "--requirepass", PASSWORD, "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"rediss://:{QUOTED}@127.0.0.1:{port}/0?ssl_ca_certs={root / 'cert.pem'}"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("the TLS Redis server did not start")
            time.sleep(0.1)
    yield url
    proc.kill()
    proc.wait()


@pytest.mark.processes
@needs_redis
def test_a_wrong_password_or_certificate_is_one_line_without_the_password(tls_redis):
    wrong = tls_redis.replace(QUOTED, "not-it")
    with pytest.raises(UsageError, match="unreachable: invalid username-password pair") as e:
        check_reachable(parse_databases([wrong], "d"))
    assert "not-it" not in str(e.value) and ":***@" in str(e.value)
    untrusted = tls_redis.split("?")[0]  # no certificate given: the server's is refused
    with pytest.raises(UsageError, match="certificate verify failed") as e:
        check_reachable(parse_databases([untrusted], "d"))
    assert QUOTED not in str(e.value) and PASSWORD not in str(e.value)


@pytest.mark.processes
@needs_redis
def test_a_campaign_shares_its_failures_over_tls_with_a_password_it_never_shows(tmp_path, tls_redis):
    (tmp_path / "crasher.py").write_text(CRASHER)
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "fxfuzz", "run", "--pass", f"{tmp_path / 'crasher.py'}:crasher", "--max-examples", "2",
         "--workers", "1", "--max-shrink-s", "0", "--db", str(tmp_path / "db"), "--db", tls_redis, "--report-dir", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    client = redis.Redis.from_url(tls_redis)
    assert sum(client.scard(k) for k in client.keys(b"*fxfuzz-failures")) >= 1  # the failure reached the server
    report = json.loads((out / "report.json").read_text())
    assert report["workers_detail"]["database"]["shared"] == [redact(tls_redis)]
    texts = [proc.stdout, proc.stderr, *(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())]
    assert not [t for t in texts if QUOTED in t or PASSWORD in t]
