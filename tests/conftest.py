"""Shared fixtures: self-signed TLS files and servers on 127.0.0.1 port 0."""

from __future__ import annotations

import datetime
import ipaddress
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, settings

# Hypothesis' two checks that time the test (a per-example deadline, and
# "input generation is slow") are timed asserts: on a machine busy with the
# rest of the suite they fail tests that are right. Every property still runs
# its examples; only the clock is taken out of the verdict.
settings.register_profile("uamp", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("uamp")


def make_self_signed(directory: Path) -> tuple[str, str]:
    """Write a self-signed cert for 127.0.0.1/localhost; returns (certfile, keyfile)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    from tests._support.tls import write_pem

    written = write_pem(directory / "cert.pem", directory / "key.pem", cert, key)
    return written.certfile, written.keyfile


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(certfile, keyfile) of a self-signed certificate for 127.0.0.1."""
    return make_self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def serve_app(nursery: trio.Nursery) -> Callable[..., Awaitable[Any]]:
    """``server = await serve_app(app, **config)``: a server on 127.0.0.1:0 in the
    test's nursery (cancelled when the test ends)."""
    from uamp_trio.engines.server import Server

    async def start(app: Any, **config: Any) -> Server:
        server = Server(app, host="127.0.0.1", port=0, **config)
        await nursery.start(server.serve)
        return server

    return start


def _task_tree() -> str:
    """Every task of the current trio run, indented by nursery, with where each waits."""
    lines: list[str] = []

    def walk(task: trio.lowlevel.Task, depth: int) -> None:
        frames = [
            f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{n}" for f, n in task.iter_await_frames()
        ]
        lines.append("  " * depth + f"{task.name} @ {' > '.join(frames[-4:])}")
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child, depth + 1)

    walk(trio.lowlevel.current_root_task(), 0)
    return "\n".join(lines)


@pytest.fixture
def thread_server() -> Iterator[Callable[..., Any]]:
    """``server = thread_server(app, **config)``: a server in its own thread
    (its own ``trio.run``), for clients that are not trio (the openai SDK)."""
    from uamp_trio.engines.server import Server

    running: list[tuple[Server, threading.Thread]] = []

    def start(app: Any, **config: Any) -> Server:
        server = Server(app, host="127.0.0.1", port=0, **config)
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
                ready.set()

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # reported to the test below
                failure.append(exc)
                ready.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert ready.wait(10), "server thread did not start"
        if failure:
            raise failure[0]
        running.append((server, thread))
        return server

    yield start
    for server, thread in running:
        server.shutdown_threadsafe()
        # Work still running gets the server's grace period, then is cancelled.
        thread.join(server.config.shutdown_grace + 15)
        if thread.is_alive():  # say where it is stuck: its trio tasks, each at its await
            try:
                where = trio.from_thread.run_sync(_task_tree, trio_token=server._trio_token)
            except Exception as exc:  # pragma: no cover - diagnostics only
                where = f"(no task tree: {exc!r})"
            raise AssertionError(f"server thread did not stop; its tasks:\n{where}")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis server on 127.0.0.1 for the whole test run (installed when missing)."""
    from tests._support.redis_server import running_redis

    with running_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the whole test session; the URL of its ``postgres`` database."""
    from tests._support.postgres_server import running_postgres

    with running_postgres() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A new empty database on the session's PostgreSQL server."""
    from tests._support.postgres_server import create_database

    return create_database(postgres_server)


@pytest.fixture
def tool_runs(tmp_path: Path) -> Iterator[Path]:
    """A file the ``Checkpointed`` agent's tool, in any spawned process, adds a line to per run."""
    from tests._support.cli import count_tool_runs

    yield from count_tool_runs(tmp_path)


# --- the order xdist hands tests out in (tests/_support/schedule.py) --------------------


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests marked (and skipped without ``--slow``); the long modules first, one
    whole per worker (every worker collects the same order)."""
    from tests._support.schedule import LONG_MODULES, SLOW, arrange, is_slow

    run_slow = config.getoption("--slow")
    for item in items:
        if why := is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
            if not run_slow:
                item.add_marker(pytest.mark.skip(reason=f"{SLOW_PREFIX}{why}"))
    # A skipped slow test takes no time: it is not dealt first.
    long = {k: v for k, v in LONG_MODULES.items() if run_slow or not is_slow(k, SLOW)}
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    items[:] = arrange(items, lambda item: item.nodeid, workers, long)


# --- --no-system-installs (tests/_support/system.py) ------------------------------------


#: How the skip reason of a slow test starts (tests/_support/schedule.py SLOW).
SLOW_PREFIX = "slow end-to-end test, run with --slow (CI does): "


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the slow end-to-end tests (SLOW in tests/_support/schedule.py), "
        "skipped otherwise; -m slow runs only them",
    )
    parser.addoption(
        "--no-system-installs",
        action="store_true",
        help="install no system program (redis-server, chromium, npm): skip the tests that "
        "need a missing one, and list them at the end",
    )


def pytest_configure(config: pytest.Config) -> None:
    from tests._support.system import ENV_FLAG

    if config.getoption("--no-system-installs"):
        os.environ[ENV_FLAG] = "1"  # this process, its xdist workers, their subprocesses
    if not hasattr(config, "workerinput"):  # once, before any worker or subprocess starts
        from tests._support.bytecode import compile_checkout

        compile_checkout()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests._support.system import PREFIX

    not_run = []
    slow = 0
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if PREFIX in reason:
            not_run.append((report.nodeid, reason.split(PREFIX, 1)[1]))
        slow += SLOW_PREFIX in reason
    if slow:
        terminalreporter.write_line(
            f"{slow} slow end-to-end test{'s' * (slow != 1)} skipped: `pytest --slow` runs "
            "them too, `pytest --slow -m slow` only them (as CI does after the rest)"
        )
    if not_run:
        terminalreporter.section("NOT RUN: --no-system-installs", sep="=", red=True, bold=True)
        for nodeid, what in not_run:
            terminalreporter.write_line(f"{nodeid}: needs {what}")
        terminalreporter.write_line(
            f"{len(not_run)} tests were not run; CI runs them (as root, installing what they need)"
        )
