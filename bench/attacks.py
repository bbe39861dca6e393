"""The attack suite of issue 14: hostile traffic against a real ``uamp serve``, with figures.

Each scenario starts a fresh ``uamp serve`` subprocess on 127.0.0.1 hosting
the counting agent (``bench/attack_agent.py``), runs one attack against it,
bounded in count and time, while a separate process probes a health route
(``GET /agents/counter/v1/models`` on a new connection every 20 ms), then
reports (a scenario named ``asgi_...`` attacks ``uamp_asgi`` under uvicorn
instead, ``bench/attack_asgi.py``, with the same flags and agent):

* the attack and what was sent,
* the server's CPU seconds during the attack (``/proc/PID/stat``), and how
  long it was ready to run but waited for a CPU (``/proc/PID/task/*/schedstat``:
  the machine's share of the health latency, not the server's),
* the longest scheduler batch of the server's event loop in CPU time
  (``bench/loopstats``): the server's own share of any task's wait,
* the attacker's own CPU seconds (it runs in a process of its own at a lower
  priority, ``nice`` 10 by default, so that on a small machine the server
  and the health probe are not waiting for the attacker's CPU),
* its peak RSS (``VmHWM`` in ``/proc/PID/status``: the whole life of that
  server process, start-up included),
* the health check's p99 latency and how many probes failed,
* how often the agent was invoked (the counting agent appends a byte to a
  file per run), and the server's answer (GOAWAY, 1007, 503...),
* whether the scenario met its bounds (peak RSS under 200 MB, health
  answered, the agent invoked only for work that was accepted, the expected
  answer, and no traceback in the server's log).

Loopback only. Usage::

    .venv/bin/python bench/attacks.py            # short counts (about 30 s)
    .venv/bin/python bench/attacks.py --long     # the issue's counts
    .venv/bin/python bench/attacks.py --only rapid_reset --only slowloris --json

The short version runs in the test suite (tests/bench/test_attacks.py).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing
import os
import re
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from decimal import Decimal
from inspect import signature
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import attrs
import h2.config
import h2.connection
import h2.events
import h11
import trio
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    HeadersFrame,
    PingFrame,
    SettingsFrame,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from uamp_trio.engines.http import KNOWN_METHODS  # noqa: E402

AGENT = "counter"
HEALTH = f"/agents/{AGENT}/v1/models"
COMPLETIONS = f"/agents/{AGENT}/chat/completions"
UAMP_WS = f"/agents/{AGENT}/uamp"
RSS_BOUND_MB = 200.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GOAWAY, ENHANCE_YOUR_CALM = 0x7, 0xB


@attrs.define
class Outcome:
    """What an attack observed: what it sent, what the server answered, whether that is right."""

    sent: str
    answer: str
    ok: bool
    #: Agent runs that were legitimate work (the stalled reader's one response).
    allowed_runs: int = 0


@attrs.define
class Result:
    """One scenario's figures."""

    name: str
    attack: str
    sent: str
    answer: str
    cpu_s: float
    #: Seconds the server was ready to run but waited for a CPU.
    cpu_wait_s: float
    #: The attacking process's CPU seconds.
    attacker_cpu_s: float
    #: The longest scheduler batch of the server's event loop, in CPU ms:
    #: what the server's own work made any one task wait at most.
    loop_batch_max_ms: float
    peak_rss_mb: float
    #: The server's RSS when the attack began and once it ended (what it pinned).
    rss_before_mb: float
    rss_after_mb: float
    health_p99_ms: float
    health_probes: int
    health_failures: int
    agent_invoked: int
    #: Of those, runs for work the server rightly accepted.
    agent_allowed: int
    tracebacks: int
    ok: bool
    #: The machine's load average (1 minute) when the scenario ended.
    load_1m: float = 0.0
    #: The start of the first traceback the server logged meanwhile ("": none).
    first_traceback: str = ""


Attack = Callable[[int, bool], Awaitable[Outcome]]
#: The servers a scenario can attack: ``uamp serve`` (Trio) and ``uamp_asgi``
#: under uvicorn (``bench/attack_asgi.py``); an ASGI row's name starts ``asgi_``.
KINDS = ("trio", "asgi")


@attrs.define
class Scenario:
    """An attack: its name, a line saying what it does, and the coroutine that does it."""

    name: str
    attack: str
    run: Attack
    #: ``uamp serve`` arguments of a server of its own, given a directory for
    #: its files (a ledger...); such a scenario never shares the suite's server.
    server: Callable[[Path], tuple[str, ...]] | None = None
    #: The server attacked (:data:`KINDS`).
    kind: str = "trio"

    @classmethod
    def of(
        cls,
        run: Callable[..., Awaitable[Outcome]],
        server: Callable[[Path], tuple[str, ...]] | None = None,
        kind: str = "trio",
    ) -> Scenario:
        """The scenario of an attack function: its name and its docstring's first line.

        A function with a ``kind`` parameter is told which server it attacks
        (the wire differs: a path, an answer).
        """
        doc = (run.__doc__ or run.__name__).strip().splitlines()[0]
        name = run.__name__ if kind == "trio" else f"{kind}_{run.__name__}"
        bound = functools.partial(run, kind=kind) if "kind" in signature(run).parameters else run
        return cls(name, doc.rstrip("."), bound, server, kind)


# --- the server under attack ---------------------------------------------------------------


class ServerProcess:
    """``uamp serve`` (or ``uamp_asgi`` under uvicorn: ``kind``) hosting the counting agent,
    in a subprocess."""

    def __init__(
        self, flags: tuple[str, ...], workdir: Path, priority: int = 0, kind: str = "trio"
    ) -> None:
        workdir = Path(tempfile.mkdtemp(dir=workdir))
        self.counts = workdir / "counts"
        self.counts.write_bytes(b"")
        self.log_path = workdir / "server.log"
        self.loop_path = workdir / "loop"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [
                    str(ROOT / "bench" / "loopstats"),
                    str(ROOT / "bench"),
                    str(ROOT),
                    *filter(None, [os.environ.get("PYTHONPATH")]),
                ]
            ),
            "UAMP_LOOP_STATS": str(self.loop_path),
            "UAMP_ATTACK_COUNTS": str(self.counts),
            "PYTHONUNBUFFERED": "1",
        }
        self.log = self.log_path.open("wb")
        if kind == "asgi":
            cmd = [sys.executable, str(ROOT / "bench" / "attack_asgi.py"), *flags]
        else:
            cmd = [sys.executable, "-m", "uamp_trio", "serve", "--port", "0"]
            cmd += ["--agent", "attack_agent:CountingAgent", "--log-level", "info", *flags]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=self.log)
        if priority:  # before its threads start: they inherit it
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, priority)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        self.port = 0
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            found = re.search(r"serving on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                break
            if not line and self.proc.poll() is not None:
                break
        if not self.port:
            self.stop()
            raise RuntimeError(f"{kind} server did not start: {self.log_path.read_text()[-2000:]}")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_wait_seconds(self) -> float:
        """Seconds the server's threads were runnable but not running (the run queue)."""
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
        return total / 1e9

    def longest_batch_ms(self, since: float, until: float) -> float:
        """The most CPU time one scheduler batch of the server took between two monotonic times.

        ``bench/loopstats`` records batches of 1 ms or more: 0 when none was.
        """
        longest = 0.0
        with contextlib.suppress(OSError):
            for line in self.loop_path.read_text().splitlines():
                at, spent, *kind = line.split()
                with contextlib.suppress(ValueError):
                    if not kind and since <= float(at) <= until:
                        longest = max(longest, float(spent))
        return longest * 1000

    def rss_mb(self) -> float:
        """The server's resident set now (``VmRSS``)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def invoked(self) -> int:
        return self.counts.stat().st_size

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.log_path.read_text(errors="replace")


# --- the health probe (its own process, so the attacker's CPU does not delay it) ----------


def _probe(port: int, stop: Any, out: Connection, priority: int) -> None:
    if priority:
        os.setpriority(os.PRIO_PROCESS, 0, priority)
    request = f"GET {HEALTH} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()
    latencies: list[float] = []
    failures = 0
    while not stop.is_set():
        start = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(request)
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
            if not data.startswith(b"HTTP/1.1 200 "):
                failures += 1
        except OSError:
            failures += 1
        latencies.append(time.perf_counter() - start)
        time.sleep(0.02)
    out.send((latencies, failures))


@contextlib.contextmanager
def probing(port: int, priority: int = 0) -> Iterator[list[Any]]:
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_probe, args=(port, stop, send, priority), daemon=True)
    proc.start()
    found: list[Any] = []
    try:
        yield found
    finally:
        stop.set()
        if recv.poll(10):
            found.extend(recv.recv())
        proc.join(5)


# --- the attacker (its own process, at a lower priority) --------------------------------------


def _attack(scenario: Scenario, port: int, long: bool, nice: int, out: Connection) -> None:
    os.nice(nice)
    outcome = trio.run(scenario.run, port, long)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.send((outcome, usage.ru_utime + usage.ru_stime))


def attack(scenario: Scenario, port: int, long: bool, nice: int) -> tuple[Outcome, float]:
    """Run ``scenario`` in a child process at ``nice``; its outcome and CPU seconds."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_attack, args=(scenario, port, long, nice, send))
    proc.start()
    send.close()
    try:
        outcome, cpu = recv.recv()
    except EOFError:
        outcome, cpu = Outcome("nothing", f"the attacker failed (exit {proc.exitcode})", False), 0.0
    proc.join()
    return outcome, cpu


# --- byte-level helpers -------------------------------------------------------------------------


async def connect(port: int) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port)


async def send_quietly(stream: trio.abc.Stream, data: bytes) -> bool:
    """Send; ``False`` when the server already closed."""
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return False
    return True


async def read_all(stream: trio.abc.Stream, limit: float = 5.0, most: int = 1 << 22) -> bytes:
    """What the server sends until it closes (at most ``limit`` s and ``most`` bytes)."""
    parts: list[bytes] = []
    size = 0
    with trio.move_on_after(limit):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while size < most and (chunk := await stream.receive_some(65536)):
                parts.append(chunk)
                size += len(chunk)
    return b"".join(parts)


async def status_within(stream: trio.abc.Stream, seconds: float) -> str | None:
    """The status of what the server sends within ``seconds`` (``"closed"`` at EOF), or None."""
    with trio.move_on_after(seconds):
        try:
            data = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            data = b""
        lines = status_lines(data)
        return lines[0][9:] if lines else "closed"
    return None


def status_lines(data: bytes) -> list[str]:
    return [m.decode() for m in re.findall(rb"HTTP/1\.1 \d{3}[^\r\n]*", data)]


def h2_frames(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(type, stream id, payload) of the whole frames in ``data``."""
    pos = 0
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        kind, sid = data[pos + 3], int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        yield kind, sid, data[pos + 9 : pos + 9 + length]
        pos += 9 + length


def goaway(data: bytes) -> tuple[int, int] | None:
    """(error code, last stream id) of the first GOAWAY in server bytes."""
    for kind, _, payload in h2_frames(data):
        if kind == GOAWAY and len(payload) >= 8:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            return int.from_bytes(payload[4:8], "big"), last
    return None


def goaway_code(data: bytes) -> int | None:
    found = goaway(data)
    return found[0] if found is not None else None


def h2_client() -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    return conn


def h2_headers(method: str, path: str) -> list[tuple[str, str]]:
    return [(":method", method), (":path", path), (":scheme", "http"), (":authority", "t")]


def chat_body(text: str = "hi", **extra: Any) -> bytes:
    body = {"model": AGENT, "messages": [{"role": "user", "content": text}], **extra}
    return json.dumps(body).encode()


def ws_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """A masked client frame (RFC 6455 section 5.2); the mask is zeros, which is allowed."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


async def ws_open(port: int, path: str = UAMP_WS) -> tuple[trio.SocketStream, bytes]:
    """A UAMP WebSocket after its 101; the bytes read past the head."""
    stream = await connect(port)
    await stream.send_all(
        (
            f"GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: uamp.v1\r\n\r\n"
        ).encode()
    )
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"upgrade refused: {head[:80]!r}")
    return stream, rest


def ws_server_frames(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(opcode, payload) of the unmasked server frames in ``data``."""
    pos = 0
    while pos + 2 <= len(data):
        opcode, n = data[pos] & 0x0F, data[pos + 1] & 0x7F
        pos += 2
        if n == 126:
            n, pos = int.from_bytes(data[pos : pos + 2], "big"), pos + 2
        elif n == 127:
            n, pos = int.from_bytes(data[pos : pos + 8], "big"), pos + 8
        yield opcode, data[pos : pos + n]
        pos += n


def ws_close_code(data: bytes) -> int | None:
    """The code of the first close frame in server bytes."""
    for opcode, payload in ws_server_frames(data):
        if opcode == 0x8 and len(payload) >= 2:
            return int.from_bytes(payload[:2], "big")
    return None


def ws_texts(data: bytes) -> list[bytes]:
    """The text messages in server bytes (unfragmented, as the server sends them)."""
    return [payload for opcode, payload in ws_server_frames(data) if opcode == 0x1]


CREATE = json.dumps(
    {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
).encode()


# --- scenarios ---------------------------------------------------------------------------------


async def rapid_reset(port: int, long: bool) -> Outcome:
    """HEADERS + DATA(END_STREAM) + RST_STREAM per stream to the agent's route (CVE-2023-44487)."""
    pairs = 10_000 if long else 2_000
    conn = h2_client()
    stream = await connect(port)
    body = chat_body()
    sent = 0
    async with stream:
        batch = [conn.data_to_send()]  # the preface and our SETTINGS first
        for i in range(pairs):
            sid = 1 + 2 * i
            conn.send_headers(sid, h2_headers("POST", COMPLETIONS))
            batch.append(conn.data_to_send())
            # DATA built by hand: the server gives its window back as it reads,
            # which this writer does not wait to hear about.
            batch.append(DataFrame(sid, data=body, flags={"END_STREAM"}).serialize())
            conn.reset_stream(sid)
            batch.append(conn.data_to_send())
            if len(batch) >= 50 or i == pairs - 1:
                if not await send_quietly(stream, b"".join(batch)):
                    break
                sent, batch = i + 1, []
        answer = await read_all(stream)
    found = goaway(answer)
    code, last = found if found is not None else (None, -1)
    return Outcome(
        sent=f"{pairs:,} pairs offered, {sent:,} written",
        answer=f"GOAWAY {'ENHANCE_YOUR_CALM' if code == ENHANCE_YOUR_CALM else code}"
        f" at stream {last:,} (pair {(last + 1) // 2:,})",
        ok=code == ENHANCE_YOUR_CALM and 0 <= last < 2 * pairs - 1,
    )


async def never_ending_streams(port: int, long: bool) -> Outcome:
    """100 HTTP/2 streams that send body bytes and never end."""
    per_stream = (4 * 1024 * 1024 - 1) if long else 128 * 1024
    conn = h2_client()
    stream = await connect(port)
    statuses: list[str] = []
    resets = 0
    async with stream:
        await stream.send_all(conn.data_to_send())
        for i in range(100):
            conn.send_headers(1 + 2 * i, h2_headers("POST", COMPLETIONS))
        sent = dict.fromkeys(range(1, 201, 2), 0)
        deadline = trio.current_time() + (30 if long else 3)
        while trio.current_time() < deadline and any(n < per_stream for n in sent.values()):
            for sid, n in sent.items():
                with contextlib.suppress(Exception):
                    room = min(conn.local_flow_control_window(sid), 16384, per_stream - n)
                    if room > 0:
                        conn.send_data(sid, b" " * room)
                        sent[sid] = n + room
            if not await send_quietly(stream, conn.data_to_send()):
                break
            with trio.move_on_after(0.05):
                data = await stream.receive_some(65536)
                if not data:
                    break
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        statuses.append(dict(event.headers)[b":status"].decode())
                    elif isinstance(event, h2.events.StreamReset):
                        resets += 1
                await send_quietly(stream, conn.data_to_send())
        total = sum(sent.values())
        # Then silence: the server resets them after body_timeout / header_timeout.
        with trio.move_on_after(8 if long else 4):
            while resets + len(statuses) < 100:
                data = await stream.receive_some(65536)
                if not data:
                    break
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.StreamReset):
                        resets += 1
                    elif isinstance(event, h2.events.ResponseReceived):
                        statuses.append(dict(event.headers)[b":status"].decode())
                await send_quietly(stream, conn.data_to_send())
    counted = {s: statuses.count(s) for s in sorted(set(statuses))}
    return Outcome(
        sent=f"100 streams, {total / 1e6:.0f} MB of body, none ended",
        answer=f"{resets} reset, answered {counted}",
        ok=resets + len(statuses) >= 100,
    )


async def _h2_flood(port: int, frames: Iterator[bytes], count: int) -> Outcome:
    stream = await connect(port)
    sent = 0
    async with stream:
        if not await send_quietly(stream, PREFACE + SettingsFrame(0).serialize()):
            return Outcome("nothing", "closed at once", False)
        batch: list[bytes] = []
        size = 0
        for frame in frames:
            batch.append(frame)
            size += len(frame)
            if size >= 65536:
                if not await send_quietly(stream, b"".join(batch)):
                    break
                sent += len(batch)
                batch, size = [], 0
        answer = await read_all(stream)
    code = goaway_code(answer)
    return Outcome(
        sent=f"{count:,} frames offered, {sent:,} sent",
        answer=f"GOAWAY {'ENHANCE_YOUR_CALM' if code == ENHANCE_YOUR_CALM else code}",
        ok=code == ENHANCE_YOUR_CALM,
    )


async def continuation_flood(port: int, long: bool) -> Outcome:
    """One header block across endless CONTINUATION frames (CVE-2024-27316)."""
    count = 100_000 if long else 10_000
    head = HeadersFrame(1, data=b"\x82", flags=set()).serialize()  # :method GET, no END_HEADERS

    def frames() -> Iterator[bytes]:
        yield head
        # 15 KB frames: the 64 KiB block limit trips before h2's own limit on
        # the number of CONTINUATION frames.
        frame = ContinuationFrame(1, data=b"\x40\x01a\x01b" * 3000, flags=set()).serialize()
        for _ in range(count):
            yield frame

    return await _h2_flood(port, frames(), count)


async def settings_flood(port: int, long: bool) -> Outcome:
    """HTTP/2 SETTINGS flood."""
    count = 100_000 if long else 10_000
    frame = SettingsFrame(0, settings={0x4: 65535}).serialize()
    return await _h2_flood(port, (frame for _ in range(count)), count)


async def ping_flood_h2(port: int, long: bool) -> Outcome:
    """HTTP/2 PING flood."""
    count = 100_000 if long else 10_000
    frame = PingFrame(0, opaque_data=b"12345678").serialize()
    return await _h2_flood(port, (frame for _ in range(count)), count)


async def ws_ping_flood(port: int, long: bool) -> Outcome:
    """Pings on a UAMP WebSocket whose pongs are never read (bounded by time)."""
    count = 1_000_000 if long else 50_000
    limit = 30.0 if long else 2.0
    stream, _ = await ws_open(port)
    sent = 0
    batch = ws_frame(0x9, b"p") * 1000
    async with stream:
        with trio.move_on_after(limit):
            while sent < count and await send_quietly(stream, batch):
                sent += 1000
        # Still served afterwards: a session opens.
        alive = await send_quietly(stream, ws_frame(0x1, CREATE))
        data = await read_all(stream, limit=3, most=1 << 20) if alive else b""
    created = any(b'"session.created"' in t for t in ws_texts(data))
    return Outcome(
        sent=f"{sent:,} pings unread",
        answer="then session.created" if created else "no answer after the flood",
        ok=sent > 0,
    )


async def ws_invalid_utf8(port: int, long: bool) -> Outcome:
    """A WebSocket text message that is not UTF-8."""
    stream, _ = await ws_open(port)
    async with stream:
        await stream.send_all(ws_frame(0x1, b'{"type": "\xff\xfe"}'))
        code = ws_close_code(await read_all(stream))
    return Outcome(sent="a text frame that is not UTF-8", answer=f"close {code}", ok=code == 1007)


async def ws_oversized(port: int, long: bool) -> Outcome:
    """A WebSocket message one byte over the 4 MiB limit."""
    size = 4 * 1024 * 1024 + 1
    stream, _ = await ws_open(port)
    async with stream:
        await send_quietly(stream, ws_frame(0x1, b" " * size))
        code = ws_close_code(await read_all(stream))
    return Outcome(sent=f"one {size:,}-byte message", answer=f"close {code}", ok=code == 1009)


async def ws_stalled_reader(port: int, long: bool) -> Outcome:
    """A session asks for a flood of deltas and never reads; the server drops it."""
    deltas = 200_000 if long else 20_000
    stream, _ = await ws_open(port)
    async with stream:
        await stream.send_all(ws_frame(0x1, CREATE))
        text = json.dumps({"type": "input.text", "text": f"flood {deltas}"}).encode()
        await stream.send_all(ws_frame(0x1, text) + ws_frame(0x1, b'{"type":"response.create"}'))
        await trio.sleep(3.0)  # the server's --ws-send-timeout is 1 s here
        start = trio.current_time()
        limit = 10.0
        data = await read_all(stream, limit=limit, most=1 << 30)
        closed_after = trio.current_time() - start
    received = len(data)
    # (``response.done`` carries the whole output: it need not be in the last bytes.)
    done = b'"response.done"' in data
    # Reading stopped before the limit: the server had closed the connection.
    closed = closed_after < limit - 0.5
    if done:
        answer = f"served to the end: {received / 1e6:.1f} MB once read"
    elif closed:
        answer = (
            f"dropped: {received / 1e6:.1f} MB buffered reached the client, "
            f"EOF after {closed_after:.1f} s of reading"
        )
    else:
        answer = f"not dropped: {received / 1e6:.1f} MB read in {limit:g} s, still open"
    return Outcome(
        sent=f"asked for {deltas:,} deltas of 1 KiB, read none for 3 s",
        answer=answer,
        ok=closed and not done and received < deltas * 1024,
        allowed_runs=1,
    )


SMUGGLED = (
    f"POST {COMPLETIONS} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    f"Content-Length: {len(chat_body())}\r\n\r\n"
).encode() + chat_body()


def smuggling_corpus() -> list[tuple[str, bytes]]:
    """Requests whose framing two parsers could read differently, each hiding SMUGGLED.

    The outer request goes to the health route; a server that takes the
    hidden request for a second one runs the agent, which counts it.
    """
    chunked = b"0\r\n\r\n" + SMUGGLED
    length = str(len(chunked)).encode()
    head = f"POST {HEALTH} HTTP/1.1\r\nHost: t\r\n".encode()
    te_variants = [
        b"Transfer-Encoding: chunked",
        b"Transfer-Encoding:  chunked",
        b"Transfer-Encoding: chunked ",
        b"Transfer-Encoding:\tchunked",
        b"Transfer-Encoding: xchunked",
        b"Transfer-Encoding: chunked, identity",
        b"Transfer-Encoding: identity, chunked",
        b"Transfer-Encoding: CHUNKED",
        b"Transfer-Encoding : chunked",
        b"Transfer-Encoding:\r\n chunked",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
        b"Transfer-Encoding: \x0bchunked",
        b"X: y\r\nTransfer-Encoding: chunked",
    ]
    corpus = []
    for te in te_variants:
        corpus.append(
            (
                f"CL+TE {te!r}",
                head + b"Content-Length: " + length + b"\r\n" + te + b"\r\n\r\n" + chunked,
            )
        )
        corpus.append(
            (f"TE+CL {te!r}", head + te + b"\r\nContent-Length: " + length + b"\r\n\r\n" + chunked)
        )
        corpus.append((f"TE only {te!r}", head + te + b"\r\n\r\n" + chunked))
    for cl in (b"+5", b"5, 5", b"0x5", b" 5 ", b"5\r\nContent-Length: 6", b"-1", b"5a"):
        corpus.append((f"CL {cl!r}", head + b"Content-Length: " + cl + b"\r\n\r\nhello" + SMUGGLED))
    for size in (b"5;x=y", b"0x5", b"-1", b"ffffffffffffffffff", b"5 "):
        corpus.append(
            (
                f"chunk size {size!r}",
                head
                + b"Transfer-Encoding: chunked\r\n\r\n"
                + size
                + b"\r\nhello\r\n0\r\n\r\n"
                + SMUGGLED,
            )
        )
    corpus.append(
        (
            "HTTP/1.0 with TE",
            head.replace(b"1.1", b"1.0")
            + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
            + chunked,
        )
    )
    corpus.append(
        (
            "LF only CL+TE",
            (
                head + b"Content-Length: " + length + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
            ).replace(b"\r\n", b"\n")
            + chunked,
        )
    )
    return corpus


def reference_requests(raw: bytes) -> int:
    """How many requests of ``raw`` a server should serve, by h11 (the reference parser).

    h11 frames the requests; a request with both Content-Length and
    Transfer-Encoding, or with a method outside RFC 9110, is refused (RFC
    9112 section 6.3; RFC 9110 section 9.1), and nothing after it is read.
    """
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(raw)
    served = 0
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Request):
                names = {k.lower() for k, _ in event.headers}
                if {b"content-length", b"transfer-encoding"} <= names:
                    return served
                if event.method.decode() not in KNOWN_METHODS:
                    return served
            elif isinstance(event, h11.EndOfMessage):
                served += 1
                conn.send(h11.Response(status_code=200, headers=[(b"content-length", b"0")]))
                conn.send(h11.EndOfMessage())
                conn.start_next_cycle()
            elif event is h11.NEED_DATA or event is h11.PAUSED:
                return served
    except h11.RemoteProtocolError:
        return served
    return served


async def smuggling(port: int, long: bool) -> Outcome:
    """HTTP/1.1 smuggling corpus (CL/TE framings); the server must serve what h11 reads.

    Each framing against the server and h11: the same number of requests served.
    """
    rounds = 5 if long else 1
    cases = smuggling_corpus()
    expected = [reference_requests(raw) for _, raw in cases]
    differ: list[str] = []
    refused = 0
    for _ in range(rounds):
        for (name, raw), want in zip(cases, expected, strict=True):
            stream = await connect(port)
            async with stream:
                if await send_quietly(stream, raw):
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await stream.send_eof()  # nothing follows: answer and close
                lines = status_lines(await read_all(stream, limit=3))
            served = sum(not re.match(r"HTTP/1\.1 (400|501|505|431)", line) for line in lines)
            refused += served == 0
            if served != want:
                differ.append(name)
    return Outcome(
        sent=f"{len(cases)} framings x {rounds}, each hiding a second request",
        answer=f"{refused} refused outright; {len(differ)} differ from h11"
        + (f": {sorted(set(differ))}" if differ else ""),
        ok=not differ,
        # Where h11 reads a legitimate pipelined second request, it runs the agent.
        allowed_runs=rounds * sum(want >= 2 for want in expected),
    )


async def lowercase_methods(port: int, long: bool) -> Outcome:
    """HTTP/1.1 requests with lowercase and unknown methods."""
    methods = ("head", "get", "post", "BREW", "Get")
    raws = [f"{m} {HEALTH} HTTP/1.1\r\nHost: t\r\n\r\n".encode() for m in methods]
    rounds = 1000 if long else 100
    sent = f"{rounds} requests with head/get/post/BREW/Get"
    return await answered(port, (raws[i % 5] for i in range(rounds)), sent, {"501"})


async def head_limit(port: int, long: bool) -> Outcome:
    """HTTP/1.1 request heads one byte over the 64 KiB limit."""
    rounds = 500 if long else 50
    limit = 64 * 1024
    start = f"GET {HEALTH} HTTP/1.1\r\nHost: t\r\nX: ".encode()
    raw = start + b"a" * (limit + 1 - len(start) - 4) + b"\r\n\r\n"
    sent = f"{rounds} heads of the limit + 1 byte ({limit + 1:,})"
    return await answered(port, (raw for _ in range(rounds)), sent, {"431"})


async def stalled_bodies(port: int, long: bool) -> Outcome:
    """Connections that send all but the last byte of a 4 MiB body, then stall."""
    count = 200 if long else 60
    size = 4 * 1024 * 1024
    answers: dict[str, int] = {}
    streams: list[trio.SocketStream] = []
    payload = b" " * (size - 1)

    async def one() -> None:
        stream = await connect(port)
        streams.append(stream)
        head = (
            f"POST {COMPLETIONS} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n"
        ).encode()
        await send_quietly(stream, head + payload)

    with trio.move_on_after(60 if long else 15):
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(one)
    await trio.sleep(0.5)

    async def answer(stream: trio.SocketStream) -> None:
        tally(answers, await status_within(stream, 0.5) or "held")

    async with trio.open_nursery() as nursery:
        for stream in streams:
            nursery.start_soon(answer, stream)
    for stream in streams:
        await stream.aclose()
    held = answers.get("held", 0)
    return Outcome(
        sent=f"{count} x 4 MiB bodies, all but one byte sent",
        answer=str(dict(sorted(answers.items()))),
        # The budget (16 MiB) holds at most 4 of them; the rest are refused
        # (503) or, stalled, time out (408 after --body-timeout).
        ok=held <= 4
        and answers.get("503 Service Unavailable", 0) > 0
        and set(answers) <= {"held", "503 Service Unavailable", "408 Request Timeout"},
    )


async def idle_flood(port: int, long: bool) -> Outcome:
    """Idle connections that never send a byte."""
    count = 5000 if long else 1000
    streams: list[trio.SocketStream] = []
    with trio.move_on_after(30 if long else 10):
        for _ in range(count):
            streams.append(await connect(port))
    await trio.sleep(3.0 if long else 0.5)
    # Still served on one of them.
    ok = await send_quietly(
        streams[-1], f"GET {HEALTH} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()
    )
    lines = status_lines(await read_all(streams[-1], limit=3)) if ok else []
    for stream in streams:
        await stream.aclose()
    return Outcome(
        sent=f"{len(streams):,} idle connections",
        answer=f"a request on the last one: {lines[0] if lines else 'no answer'}",
        ok=bool(lines) and lines[0].startswith("HTTP/1.1 200"),
    )


async def slowloris(port: int, long: bool) -> Outcome:
    """Heads sent a byte at a time; the server's --header-timeout is 1 s here (default 10)."""
    count = 500 if long else 100
    answers: dict[str, int] = {}
    head = f"GET {HEALTH} HTTP/1.1\r\nHost: t\r\n".encode()

    async def one() -> None:
        stream = await connect(port)
        async with stream:
            pos = 0
            with trio.move_on_after(6):
                while await send_quietly(stream, head[pos : pos + 1] or b"X"):
                    pos += 1
                    status = await status_within(stream, 0.3)
                    if status is not None:
                        tally(answers, status)
                        return
            tally(answers, "still open")

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    return Outcome(
        sent=f"{count} connections, one head byte per 0.3 s",
        answer=str(answers),
        ok=answers.get("408 Request Timeout", 0) == count,
    )


async def first_status(port: int, raw: bytes, limit: float = 3.0) -> str:
    """Send ``raw`` on a new connection; the first status (``"400 Bad Request"``...)."""
    stream = await connect(port)
    async with stream:
        await send_quietly(stream, raw)
        lines = status_lines(await read_all(stream, limit=limit))
    return lines[0][9:] if lines else "no answer"


def tally(answers: dict[str, int], key: str) -> None:
    answers[key] = answers.get(key, 0) + 1


def post(path: str, body: bytes) -> bytes:
    """A whole ``POST`` of a JSON body on a connection that closes after it."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def answered(port: int, raws: Iterable[bytes], sent: str, wanted: set[str]) -> Outcome:
    """Send each request on its own connection; ok when every status is in ``wanted``."""
    answers: dict[str, int] = {}
    for raw in raws:
        tally(answers, await first_status(port, raw, limit=10))
    codes = {key.split(" ")[0] for key in answers}
    return Outcome(sent=sent, answer=str(answers), ok=codes <= wanted)


async def json_bomb(port: int, long: bool) -> Outcome:
    """JSON bombs to Completions: a very deep array and an object of 300k keys."""
    rounds = 20 if long else 2
    # A 300k-key object costs orjson about 0.8 s here, with the event loop
    # waiting; the short run sends a third of it (a probe times out at 2 s).
    keys = 300_000 if long else 100_000
    deep = b'{"model":"counter","messages":' + b"[" * 1_000_000 + b"]" * 1_000_000 + b"}"
    wide = b"{" + b",".join(b'"k%d":[]' % i for i in range(keys)) + b"}"
    bombs = [post(COMPLETIONS, deep[: 4 * 1024 * 1024 - 1]), post(COMPLETIONS, wide)]
    sent = f"{rounds} x (1M-deep array, {keys // 1000}k-key object), under the 4 MiB body limit"
    return await answered(port, bombs * rounds, sent, {"400", "413"})


async def role_object(port: int, long: bool) -> Outcome:
    """Completions messages whose role is {}, [], 1 or null."""
    rounds = 1000 if long else 100
    bodies = [
        post(
            COMPLETIONS,
            json.dumps({"model": AGENT, "messages": [{"role": r, "content": "x"}]}).encode(),
        )
        for r in ({}, [], 1, None)
    ]
    sent = f"{rounds} Completions requests with role {{}}, [], 1, null"
    return await answered(port, (bodies[i % 4] for i in range(rounds)), sent, {"400"})


async def big_integers(port: int, long: bool) -> Outcome:
    """Integers past 64 bits to Completions and in UAMP events."""
    rounds = 1000 if long else 100
    answers: dict[str, int] = {}
    big = "123456789012345678901234567890"
    for i in range(rounds // 2):
        raw = f'{{"model":"counter","messages":[{{"role":"user","content":"x"}}],"n":{big}{i}}}'
        tally(answers, await first_status(port, post(COMPLETIONS, raw.encode())))
    stream, _ = await ws_open(port)
    errors = 0
    async with stream:
        await stream.send_all(ws_frame(0x1, CREATE))
        event = f'{{"type":"progress","target":"x","step":{big}}}'.encode()
        await stream.send_all(ws_frame(0x1, event) * (rounds // 2))
        data = await read_all(stream, limit=2)
        errors = sum(b'"session.error"' in t or b'"error"' in t for t in ws_texts(data))
    answers["UAMP error events"] = errors
    return Outcome(
        sent=f"{rounds // 2} Completions bodies with n={big}..., "
        f"{rounds // 2} UAMP progress.step={big}",
        answer=str(answers),
        ok=set(answers) - {"UAMP error events"} == {"400 Bad Request"} and errors > 0,
    )


# --- spec 003 envelopes and the relay: money and memory (issue 29) ------------------------

#: The ledger a scenario's server settles on (set before the attacker forks).
LEDGER_ENV = "UAMP_ATTACK_LEDGER"
PRICE = "0.25"
ENVELOPES = f"/agents/{AGENT}/v1/messages"


def alone(directory: Path) -> tuple[str, ...]:
    """A server of its own with the suite's flags and nothing more."""
    return ()


def with_ledger(directory: Path) -> tuple[str, ...]:
    """A server of its own that charges ``PRICE`` per response on a ledger in ``directory``."""
    ledger = directory / "ledger.db"
    os.environ[LEDGER_ENV] = str(ledger)
    return ("--ledger", str(ledger), "--price", PRICE)


def relay_with_ledger(directory: Path) -> tuple[str, ...]:
    """As :func:`with_ledger`, and a relay that daemons on this machine register with."""
    return ("--relay", *with_ledger(directory))


def _issue(amount: str = "10.00") -> tuple[Any, str]:
    from uamp_trio.trust.ledger import Ledger

    ledger = Ledger(os.environ[LEDGER_ENV])
    return ledger, ledger.issue(amount, "USD")


def signed(intent: str, text: str, **ext: Any) -> bytes:
    """A signed spec 003 envelope to the counting agent (integrity only: its own key)."""
    import uuid

    from cryptography.hazmat.primitives.asymmetric import ed25519

    from uamp_proto.envelope import Body, Envelope, Intent, encode_envelope
    from uamp_proto.signing import sign_envelope

    envelope = Envelope(
        id=f"urn:uuid:{uuid.uuid4()}",
        ts=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        from_="urn:uamp:attacker",
        to=(f"urn:uamp:agent:{AGENT}",),
        intent=Intent(intent),
        body=Body(type="text/plain", content=text),
        ext=ext or None,
    )
    key = ed25519.Ed25519PrivateKey.generate()
    return encode_envelope(sign_envelope(envelope, key, None, embed_jwk=True))


def envelope_post(body: bytes) -> bytes:
    head = (
        f"POST {ENVELOPES} HTTP/1.1\r\nHost: t\r\nContent-Type: application/uamp+json;v=1\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _settled(ledger: Any, token: str) -> Any:
    """The token's account once nothing is locked on it any more (at most 10 s)."""
    with trio.move_on_after(10):
        while ledger.show(token).account.locked:
            await trio.sleep(0.05)
    return ledger.show(token).account


async def concurrent_replay(port: int, long: bool) -> Outcome:
    """One signed, paid spec 003 ask sent on many connections at once."""
    copies = 200 if long else 30
    ledger, token = _issue()
    raw = envelope_post(signed("ask", "pay once", payment_token=token))
    answers: dict[str, int] = {}
    streams = [await connect(port) for _ in range(copies)]

    async def one(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.send_all(raw)
            tally(answers, (await status_within(stream, 10)) or "no answer")

    async with trio.open_nursery() as nursery:
        for stream in streams:
            nursery.start_soon(one, stream)
    account = await _settled(ledger, token)
    charges = account.settled / Decimal(PRICE)
    return Outcome(
        sent=f"{copies} copies of one signed ask paying with one token, each on its own "
        "connection at once",
        answer=f"{answers}; the token charged {charges:g} time(s) ({account.settled} of 10.00)",
        ok=answers == {"202 Accepted": 1, "403 Forbidden": copies - 1} and charges == 1,
        allowed_runs=1,
    )


async def relay_token_spend(port: int, long: bool) -> Outcome:
    """A third-party daemon tries to spend the tokens its callers pay with."""
    import httpx

    from uamp_proto import events as ev
    from uamp_proto import types as ty
    from uamp_proto.responder import PAID_TOKEN, Emit, TurnRequest
    from uamp_trio.client.uamp import connect as uamp_connect
    from uamp_trio.relay.daemon import Daemon

    turns = 20 if long else 4
    base = f"http://127.0.0.1:{port}"
    ledger, token = _issue()
    spends: dict[str, int] = {}
    given: list[str] = []

    class Spy:
        name = "spy"

        def capabilities(self) -> ty.Capabilities:
            return ty.Capabilities(id="spy", provider="attacker", modalities=["text"])

        async def respond(self, request: TurnRequest, emit: Emit) -> None:
            if "top up" in request.messages[-1].text:
                required = ty.PaymentRequirements(amount="0.50", currency="USD")
                await emit(ev.PaymentRequired(requirements=required, extra={"action": "topup"}))
            for got in {request.payment_token, request.metadata.get(PAID_TOKEN)} - {None}:
                given.append(str(got))
                async with httpx.AsyncClient(base_url=base) as http:  # on the relay's own agent
                    spent = await http.post(
                        COMPLETIONS,
                        json={"messages": [{"role": "user", "content": "on the caller"}]},
                        headers={"X-PAYMENT": str(got)},
                    )
                tally(spends, str(spent.status_code))
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))

    daemon = Daemon(base, [Spy()])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.run)
        with trio.fail_after(20):
            await daemon.connected.wait()
            async with httpx.AsyncClient(base_url=base) as http:
                for _ in range(turns):
                    await http.post(
                        "/agents/spy/chat/completions",
                        json={"messages": [{"role": "user", "content": "hi"}]},
                        headers={"X-PAYMENT": token},
                    )
            async with uamp_connect(base.replace("http://", "ws://") + "/ws") as client:
                session = await client.create_session(agent="spy", payment_token=token)
                async for event in session.respond("top up"):
                    if event.type == "payment.required":
                        await session.pay(token)
                    if event.type in ("response.done", "response.error", "response.cancelled"):
                        break
        daemon.stop()
    account = await _settled(ledger, token)
    leaked = sum(token == g for g in given)
    return Outcome(
        sent=f"{turns} paid turns and one top-up through a spy daemon that spends what it gets "
        "on the relay's own agent",
        answer=f"the daemon got the caller's token {leaked} time(s), {len(given) - leaked} "
        f"receipt(s); its spends: {spends or 'none'}; the caller paid {account.settled}",
        ok=leaked == 0 and set(spends) <= {"402"},
    )


async def inform_memory_pin(port: int, long: bool) -> Outcome:
    """Spec 003 inform envelopes of 2 MiB, kept for the sender's next exchange."""
    count = 60 if long else 20
    answers: dict[str, int] = {}
    big = "x" * (2 * 1024 * 1024)
    for _ in range(count):
        tally(answers, await first_status(port, envelope_post(signed("inform", big)), limit=10))
    small = "y" * (400 * 1024)  # the budget (1 MiB) takes two, then 5.04
    for _ in range(4):
        tally(answers, await first_status(port, envelope_post(signed("inform", small)), limit=10))
    return Outcome(
        sent=f"{count} informs of 2 MiB, then 4 of 400 KiB, one principal (anonymous)",
        answer=str(answers),
        ok={key.split(" ")[0]: n for key, n in answers.items()}
        == {"413": count, "202": 2, "503": 2},
    )


async def mcp_session_flood(port: int, long: bool) -> Outcome:
    """MCP initialize after initialize, never ending a session (one principal)."""
    count = 2000 if long else 300
    path = f"/agents/{AGENT}/mcp"
    params = b'{"protocolVersion":"2025-11-25"}'
    init = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":' + params + b"}"
    answers: dict[str, int] = {}
    ids: list[str] = []
    for _ in range(count):
        stream = await connect(port)
        async with stream:
            await send_quietly(stream, post(path, init))
            data = await read_all(stream, limit=10)
        lines = status_lines(data)
        tally(answers, lines[0][9:] if lines else "no answer")
        found = re.search(rb"(?im)^mcp-session-id:\s*(\S+)", data)
        if found:
            ids.append(found.group(1).decode())

    async def ping(session: str) -> str:
        raw = post(path, b'{"jsonrpc":"2.0","id":2,"method":"ping"}')
        raw = raw.replace(b"\r\n\r\n", f"\r\nMcp-Session-Id: {session}\r\n\r\n".encode(), 1)
        return (await first_status(port, raw, limit=10)).split(" ")[0]

    oldest, newest = (await ping(ids[0]), await ping(ids[-1])) if ids else ("-", "-")
    return Outcome(
        sent=f"{count} MCP initialize requests, no DELETE",
        answer=f"{answers}; the oldest session then answers {oldest}, the newest {newest}",
        ok=answers == {"200 OK": count} and (oldest, newest) == ("404", "200"),
    )


async def exchange(port: int, raw: bytes, most: int = 1 << 22) -> tuple[str, Any]:
    """Send ``raw`` on a connection of its own: its status and JSON body (``None``: not JSON;
    ``most``: bytes read at most)."""
    stream = await connect(port)
    async with stream:
        await send_quietly(stream, raw)
        data = await read_all(stream, limit=10, most=most)
    lines = status_lines(data)
    try:
        body = json.loads(http_body(data))
    except ValueError:
        body = None
    return (lines[0][9:12] if lines else "no answer"), body


def http_body(data: bytes) -> bytes:
    """The body of the first response in ``data``, its chunks joined (uvicorn chunks JSON)."""
    head, _, rest = data.partition(b"\r\n\r\n")
    if not re.search(rb"(?im)^transfer-encoding:\s*chunked", head):
        return rest
    parts: list[bytes] = []
    while True:
        size, _, rest = rest.partition(b"\r\n")
        try:
            n = int(size.split(b";")[0], 16)
        except ValueError:
            return b"".join(parts)  # cut short
        if n == 0:
            return b"".join(parts)
        parts.append(rest[:n])
        rest = rest[n + 2 :]


def rpc_outcome(body: Any) -> str:
    """``ok`` for a JSON-RPC result, else the error's code."""
    if isinstance(body, dict) and "error" in body:
        return str(body["error"].get("code"))
    return "ok" if isinstance(body, dict) and "result" in body else "no answer"


def rpc_post(path: str, method: str, params: dict[str, Any], *headers: str) -> bytes:
    raw = post(
        path, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    )
    extra = "".join(f"\r\n{h}" for h in headers)
    return raw.replace(b"\r\n\r\n", f"{extra}\r\n\r\n".encode(), 1)


def with_push_allow(directory: Path) -> tuple[str, ...]:
    """A server of its own that delivers A2A push notifications to this machine."""
    return ("--a2a-push-allow", "127.0.0.1/32")


async def _webhook(stream: trio.SocketStream, posted: list[Any], release: trio.Event) -> None:
    """A push receiver: reads each POST; holds its first until ``release``, answers 200."""
    conn = h11.Connection(h11.SERVER)
    body = bytearray()
    async with stream:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                posted.append(json.loads(body))
                body.clear()
                if len(posted) == 1:
                    await release.wait()
                answer = [h11.Response(status_code=200, headers=[("content-length", "0")])]
                await stream.send_all(b"".join(conn.send(e) or b"" for e in answer))
                await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                return


async def _task_state(port: int, path: str, task_id: str) -> str | None:
    """The state ``GetTask`` gives (the answer carries the artifact: read up to 16 MiB)."""
    raw = rpc_post(path, "GetTask", {"id": task_id, "historyLength": 0}, "A2A-Version: 1.0")
    _, got = await exchange(port, raw, most=1 << 24)
    state = ((got or {}).get("result") or {}).get("status", {}).get("state")
    return state if isinstance(state, str) else None


async def push_slow_webhook(port: int, long: bool) -> Outcome:
    """A task streams a flood to its A2A push webhook, which holds its first POST."""
    count = 4000 if long else 1000
    posted: list[Any] = []
    release = trio.Event()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    hook = listeners[0].socket.getsockname()[1]
    message = {"role": "ROLE_USER", "parts": [{"text": f"flood {count}"}], "messageId": "m-hook"}
    configuration = {
        "returnImmediately": True,
        "taskPushNotificationConfig": {"url": f"http://127.0.0.1:{hook}/hook"},
    }
    params = {"message": message, "configuration": configuration}
    path = f"/agents/{AGENT}/a2a"
    states: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, lambda s: _webhook(s, posted, release), listeners)
        _, sent = await exchange(port, rpc_post(path, "SendMessage", params, "A2A-Version: 1.0"))
        task_id = ((sent or {}).get("result") or {}).get("task", {}).get("id")
        with trio.move_on_after(60 if long else 20):  # the flood runs into the held webhook
            while task_id:
                state = await _task_state(port, path, task_id)
                if state not in (None, "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
                    break
                await trio.sleep(1.0)  # a GetTask carries the whole artifact: seldom
        release.set()
        with trio.move_on_after(10):  # what was kept reaches the webhook, the end last
            while not states or states[-1] != "TASK_STATE_COMPLETED":
                await trio.sleep(0.05)
                states = [
                    p["statusUpdate"]["status"]["state"] for p in posted if "statusUpdate" in p
                ]
        nursery.cancel_scope.cancel()
    chunks = sum(1 for p in posted if "artifactUpdate" in p)
    return Outcome(
        sent=f"{count} deltas of 1 KiB to a task whose webhook holds its first POST",
        answer=f"{len(posted)} POSTs ({chunks} artifact updates), states {states}",
        ok=bool(task_id) and states[-1:] == ["TASK_STATE_COMPLETED"] and len(posted) <= 1 + 256,
        allowed_runs=1,  # the flooding task
    )


async def acp_session_pin(port: int, long: bool) -> Outcome:
    """ACP session/new with a 1 MiB cwd, then with 60 KiB ones, all from one principal."""
    big, small = (120, 150) if long else (20, 120)
    path = f"/agents/{AGENT}/acp"
    answers: dict[str, int] = {}
    for size, count in ((1024 * 1024, big), (60 * 1024, small)):
        raw = rpc_post(path, "session/new", {"cwd": "/" + "d" * size, "mcpServers": []})
        for _ in range(count):
            tally(answers, f"{size // 1024} KiB: {rpc_outcome((await exchange(port, raw))[1])}")
    return Outcome(
        sent=f"{big} session/new with a 1 MiB cwd, then {small} with a 60 KiB one (anonymous)",
        answer=str(answers),
        ok=answers == {"1024 KiB: -32602": big, "60 KiB: ok": 100, "60 KiB: -32029": small - 100},
    )


async def acp_history_pin(port: int, long: bool) -> Outcome:
    """ACP sessions each filled to its 2 MiB of history, one principal (the 16 MiB budget)."""
    count = 40 if long else 12
    path = f"/agents/{AGENT}/acp"
    big = "x" * (600 * 1024)  # three fill a session's history
    answers: dict[str, int] = {}
    sids: list[str] = []
    for _ in range(count):
        _, made = await exchange(
            port, rpc_post(path, "session/new", {"cwd": "/", "mcpServers": []})
        )
        if rpc_outcome(made) != "ok":
            tally(answers, f"session/new: {rpc_outcome(made)}")
            continue
        sids.append(made["result"]["sessionId"])
        for n in range(3):
            params = {"sessionId": sids[-1], "prompt": [{"type": "text", "text": f"{n} {big}"}]}
            _, got = await exchange(port, rpc_post(path, "session/prompt", params))
            tally(answers, f"session/prompt: {rpc_outcome(got)}")

    async def replayed(sid: str) -> int:
        """Bytes of the ``session/load`` stream: the history it replays."""
        params = {"sessionId": sid, "cwd": "/", "mcpServers": []}
        raw = rpc_post(path, "session/load", params, "Accept: text/event-stream")
        stream = await connect(port)
        async with stream:
            await send_quietly(stream, raw)
            return len(await read_all(stream, limit=10, most=1 << 23))

    oldest, newest = (await replayed(sids[0]), await replayed(sids[-1])) if sids else (0, 0)
    return Outcome(
        sent=f"{count} ACP sessions, three prompts of 600 KiB each (anonymous)",
        answer=f"{answers}; session/load then replays {oldest // 1024} KiB of the oldest "
        f"session, {newest // 1024} KiB of the newest",
        ok=answers == {"session/prompt: ok": 3 * count} and oldest < 64 * 1024 < 1 << 20 < newest,
        allowed_runs=3 * count,  # every prompt is the agent's work
    )


async def acp_load_dropped(port: int, long: bool) -> Outcome:
    """ACP ``session/load`` replays of a 1.8 MB history, each reset by its caller mid-way."""
    loads = 60 if long else 20
    path = f"/agents/{AGENT}/acp"
    big = "x" * (600 * 1024)
    _, made = await exchange(port, rpc_post(path, "session/new", {"cwd": "/", "mcpServers": []}))
    if rpc_outcome(made) != "ok":
        return Outcome(sent="session/new", answer=f"refused: {made}", ok=False)
    sid = made["result"]["sessionId"]
    for n in range(3):
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": f"{n} {big}"}]}
        await exchange(port, rpc_post(path, "session/prompt", params))
    load = {"sessionId": sid, "cwd": "/", "mcpServers": []}
    raw = rpc_post(path, "session/load", load, "Accept: text/event-stream")
    heads = 0
    for _ in range(loads):
        stream = await connect(port)
        await send_quietly(stream, raw)
        with trio.move_on_after(10):
            if b"200" in await stream.receive_some(4096):
                heads += 1
        # A reset, not a close: the server's next write of the replay fails.
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()
    params = {"sessionId": sid, "prompt": [{"type": "text", "text": "after"}]}
    _, after = await exchange(port, rpc_post(path, "session/prompt", params))
    return Outcome(
        sent=f"{loads} session/load of a 1.8 MB history, each reset after its first 4 KiB",
        answer=f"{heads} replays started; a prompt after them: {rpc_outcome(after)}",
        ok=heads == loads and rpc_outcome(after) == "ok",
        allowed_runs=4,  # the three prompts that fill the session, and the one after
    )


async def push_config_pin(port: int, long: bool) -> Outcome:
    """A2A push configs piled on one task: 28 KiB ones, then 12 KiB ones."""
    count = 2000 if long else 100
    path = f"/agents/{AGENT}/a2a"
    message = {"role": "ROLE_USER", "parts": [{"text": "hi"}], "messageId": "m-pin"}
    _, sent = await exchange(
        port, rpc_post(path, "SendMessage", {"message": message}, "A2A-Version: 1.0")
    )
    task_id = sent["result"]["task"]["id"]
    answers: dict[str, int] = {}
    for size in (28 * 1024, 12 * 1024):
        for n in range(count):
            config = {
                "taskId": task_id,
                "id": f"c{size}-{n}",
                "url": "https://hooks.example.com/a2a",
            }
            raw = rpc_post(
                path,
                "CreateTaskPushNotificationConfig",
                {**config, "token": "t" * size},
                "A2A-Version: 1.0",
            )
            tally(answers, f"{size // 1024} KiB: {rpc_outcome((await exchange(port, raw))[1])}")
    return Outcome(
        sent=f"{count} push configs of 28 KiB, then {count} of 12 KiB, on one task",
        answer=str(answers),
        ok=answers == {"28 KiB: -32602": count, "12 KiB: ok": 10, "12 KiB: -32029": count - 10},
        allowed_runs=1,  # the task the configs hang on
    )


async def busy_queue_flood(port: int, long: bool) -> Outcome:
    """ACP prompts piled on one busy session (``--on-busy enqueue``), one principal."""
    count = 1000 if long else 200
    queued = 8  # --busy-max-queued's default
    path = f"/agents/{AGENT}/acp"
    _, made = await exchange(port, rpc_post(path, "session/new", {"cwd": "/", "mcpServers": []}))
    if "result" not in made:
        return Outcome("session/new", f"no session to flood: {made}", False)
    sid = made["result"]["sessionId"]
    answers: dict[str, int] = {}
    refused = trio.Event()

    def prompt(text: str) -> bytes:
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        return rpc_post(path, "session/prompt", params)

    async def one(raw: bytes, label: str) -> None:
        _, body = await exchange(port, raw)
        code = rpc_outcome(body)
        if code == "-32600":
            code += f" {body['error'].get('data', {}).get('code')}"
        tally(answers, f"{label}: {code}")
        if sum(n for key, n in answers.items() if "-326" in key) >= count - queued:
            refused.set()

    with trio.move_on_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, prompt("hold 120"), "hold")
            await trio.sleep(0.5)
            for _ in range(count):
                nursery.start_soon(one, prompt("hi"), "flood")
                await trio.sleep(0)
            await refused.wait()
            # The running prompt ends (session/cancel): the queued ones run, in turn.
            cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
            await exchange(port, post(path, json.dumps(cancel).encode()))
    return Outcome(
        sent=f"{count} session/prompt on one session while its prompt runs",
        answer=str(answers),
        ok=answers
        == {"hold: ok": 1, "flood: ok": queued, "flood: -32600 queue_full": count - queued},
        allowed_runs=1 + queued,  # the held prompt and the queued ones, each in turn
    )


async def interrupt_flood(port: int, long: bool) -> Outcome:
    """AG-UI runs that each ask the caller a question and stay parked, one principal."""
    count = 500 if long else 40
    bound = 32  # uamp_proto.interrupts.DEFAULT_MAX_PENDING
    path = f"/agents/{AGENT}/agui"
    answers: dict[str, int] = {}
    limit = trio.Semaphore(16)

    async def one(n: int) -> None:
        body = {
            "threadId": f"flood-{n}",
            "runId": f"run-{n}",
            "state": {},
            "messages": [{"id": "u1", "role": "user", "content": "ask"}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
        async with limit:
            stream = await connect(port)
            async with stream:
                await send_quietly(stream, post(path, json.dumps(body).encode()))
                data = await read_all(stream, limit=30)
        events = [json.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: {")]
        last = events[-1] if events else {}
        text = "".join(e.get("delta", "") for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        if (last.get("outcome") or {}).get("type") == "interrupt":
            tally(answers, "parked (interrupt)")
        elif text.startswith("refused: too many pending interrupts"):
            tally(answers, "refused at once (denial the model sees)")
        else:
            tally(answers, f"{last.get('type', 'no answer')}: {text[:60]}")

    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(one, n)
    return Outcome(
        sent=f"{count} AG-UI runs whose agent asks the caller, never answered (anonymous)",
        answer=str(answers),
        ok=answers
        == {"parked (interrupt)": bound, "refused at once (denial the model sees)": count - bound},
        allowed_runs=count,  # every run is the agent's; past the bound it ends at once
    )


async def sse_session_pin(port: int, long: bool) -> Outcome:
    """UAMP HTTP+SSE sessions opened and abandoned (no stream, no POST), one principal."""
    count = 1500 if long else 200
    raw = post(f"/agents/{AGENT}/events", CREATE)
    answers: dict[str, int] = {}
    for _ in range(count):
        status, body = await exchange(port, raw)
        code = body.get("error", {}).get("code") if isinstance(body, dict) else None
        tally(answers, f"{status} {code}" if code else status)
    return Outcome(
        sent=f"{count} session.create POSTs, never streamed (anonymous)",
        answer=str(answers),
        ok=answers == {"200": 64, "429 too_many_sessions": count - 64},
    )


# --- chat rooms, expired sockets, deep JSON (issue 29) -------------------------------------

MUX_WS = "/ws"
#: The JWT issuer of the expired-socket scenario's server (set before the attacker forks).
JWT_KEY_ENV = "UAMP_ATTACK_JWT_KEY"
JWT_ISSUER, JWT_AUDIENCE = "https://attack.test", "uamp-attack"


def with_jwt(directory: Path) -> tuple[str, ...]:
    """A server of its own that verifies JWTs signed by a key written to ``directory``."""
    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = directory / "jwt.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = json.loads(jwt.get_algorithm_by_name("RS256").to_jwk(key.public_key()))
    public.update(kid="attack", alg="RS256", use="sig")
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps({"keys": [public]}))
    os.environ[JWT_KEY_ENV] = str(pem)
    # Anonymous callers are let in (the health probe); a credential presented must be valid.
    return (
        "--allow-anonymous",
        "--auth-jwks",
        str(jwks),
        "--auth-issuer",
        JWT_ISSUER,
        "--auth-audience",
        JWT_AUDIENCE,
    )


def _jwt(sub: str, lifetime: float) -> str:
    import jwt

    now = int(time.time())
    claims = {"sub": sub, "iss": JWT_ISSUER, "aud": JWT_AUDIENCE, "iat": now, "exp": now + lifetime}
    key = Path(os.environ[JWT_KEY_ENV]).read_bytes()
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "attack"})


class WsEvents:
    """A raw UAMP WebSocket: sends events, reads the server's JSON events."""

    def __init__(self, stream: trio.SocketStream, rest: bytes) -> None:
        self.stream, self.data, self.seen = stream, rest, 0

    @classmethod
    async def open(cls, port: int, path: str = MUX_WS) -> WsEvents:
        return cls(*await ws_open(port, path))

    async def send(self, **event: Any) -> bool:
        return await send_quietly(self.stream, ws_frame(0x1, json.dumps(event).encode()))

    async def until(self, wanted: Callable[[dict[str, Any]], bool], limit: float = 5.0) -> Any:
        """The first new event ``wanted`` accepts, or ``None`` after ``limit`` s or at EOF."""
        with trio.move_on_after(limit):
            while True:
                texts = ws_texts(self.data)
                # The last text may be cut short: only whole frames count.
                complete = texts if self._whole() else texts[:-1]
                for text in complete[self.seen :]:
                    self.seen += 1
                    event = json.loads(text)
                    if wanted(event):
                        return event
                try:
                    chunk = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return None
                if not chunk:
                    return None
                self.data += chunk
        return None

    def _whole(self) -> bool:
        pos, data = 0, self.data
        while pos + 2 <= len(data):
            n = data[pos + 1] & 0x7F
            pos += 2
            if n == 126:
                n, pos = int.from_bytes(data[pos : pos + 2], "big"), pos + 2
            elif n == 127:
                n, pos = int.from_bytes(data[pos : pos + 8], "big"), pos + 8
            pos += n
        return pos == len(data)

    async def create(self, **extra: Any) -> Any:
        """``session.create``; the ``session.created`` or ``session.error`` answering it."""
        session = {"modalities": ["text"], **extra.pop("session", {})}
        await self.send(type="session.create", uamp_version="1.0", session=session, **extra)
        return await self.until(lambda e: e["type"] in ("session.created", "session.error"))

    async def aclose(self) -> None:
        await self.stream.aclose()


def _of_type(kind: str, sid: str | None = None) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["type"] == kind and (sid is None or e.get("session_id") == sid)


async def chat_redos_rule(port: int, long: bool) -> Outcome:
    """A room rule (a+)+$ and messages of a's ending in "!" (Python's re backtracks 2^n)."""
    length = 32 if long else 28
    messages = 20 if long else 5
    ws = await WsEvents.open(port)
    rules = {"respond": "rules", "rules": [{"match": "(a+)+$", "agent": AGENT}]}
    created = await ws.create(agent=AGENT, chat="redos", session={"extensions": {"chat": rules}})
    sid = created["session_id"] if created else None
    stored = 0
    for _ in range(messages):
        await ws.send(type="input.text", text="a" * length + "!", session_id=sid)
        stored += await ws.until(_of_type("message.created", sid)) is not None
    await ws.aclose()
    return Outcome(
        sent=f"rule (a+)+$, then {messages} messages of {length} a's and a '!'",
        answer=f"{stored} stored and matched at once (RE2), none answered",
        ok=stored == messages,
    )


async def chat_nested_groups_rule(port: int, long: bool) -> Outcome:
    """A room rule nesting 2,000 groups (Python's re compiler overflows its recursion)."""
    count = 50 if long else 10
    nested = "(" * 2000 + "a" + ")" * 2000
    rules = {"respond": "rules", "rules": [{"match": nested, "agent": AGENT}]}
    ws = await WsEvents.open(port)
    answers: dict[str, int] = {}
    for n in range(count):
        created = await ws.create(
            agent=AGENT, chat=f"nested{n}", session={"extensions": {"chat": rules}}
        )
        error = await ws.until(_of_type("session.error"))
        field = (error or {}).get("error", {}).get("details", {}).get("field")
        tally(
            answers, f"{(error or {}).get('error', {}).get('code')} {field}" if created else "none"
        )
    await ws.send(type="ping")
    alive = await ws.until(_of_type("pong")) is not None
    await ws.aclose()
    return Outcome(
        sent=f"{count} session.create with a rule of 2,000 nested groups",
        answer=f"{answers}; the socket then answers ping: {alive}",
        ok=answers == {"invalid_request chat.rules[0].match": count} and alive,
    )


async def expired_socket_room_actions(port: int, long: bool) -> Outcome:
    """After a WebSocket's token expires, it posts, @mentions, joins, types, reads, calls."""
    rounds = 20 if long else 5
    ws = await WsEvents.open(port, f"{MUX_WS}?token={_jwt('mallory', 2)}")
    created = await ws.create(
        agent=AGENT, chat="open", session={"extensions": {"chat": {"members": ["*"]}}}
    )
    sid = created["session_id"]
    await trio.sleep(2.5)  # past the token's exp
    actions: list[dict[str, Any]] = [
        {"type": "input.text", "text": f"@{AGENT} charge the expired principal"},
        {"type": "input.text", "text": "posted", "context": {"chat_id": "other"}},
        {"type": "input.typing", "is_typing": True},
        {"type": "message.read", "seq": 1},
    ]
    answers: dict[str, int] = {}
    # A call (once: the core keeps one ringing), then the rest, round after round.
    for action in [{"type": "voice.invite", "to": "anyone", "call_id": "c1"}, *actions * rounds]:
        await ws.send(session_id=sid, **action)
        error = await ws.until(_of_type("session.error", sid))
        tally(answers, (error or {}).get("error", {}).get("code", "no answer"))
    for _ in range(rounds):
        refused = await ws.create(agent=AGENT, chat="open")
        tally(answers, f"session.create: {(refused or {}).get('error', {}).get('code')}")
    await ws.aclose()
    return Outcome(
        sent=f"after the socket's JWT expired: a call, {rounds} x (a post with an @mention, a "
        f"post to another room, typing, a read mark), {rounds} new sessions",
        answer=str(answers),
        ok=answers
        == {"unauthorized": rounds * len(actions) + 1, "session.create: unauthorized": rounds},
    )


async def deep_json_multi_session(port: int, long: bool, kind: str = "trio") -> Outcome:
    """session.extensions nested 300 levels on a socket whose other session is in use."""
    count = 100 if long else 20
    deep: Any = "bottom"
    for _ in range(300):
        deep = {"a": deep}
    ws = await WsEvents.open(port, MUX_WS if kind == "trio" else UAMP_WS)
    first = await ws.create(agent=AGENT)
    sid = first["session_id"]
    refused = 0
    for _ in range(count):
        error = await ws.create(agent=AGENT, session={"extensions": deep})
        refused += bool(error) and error["type"] == "session.error"
    await ws.send(type="input.text", text="still here", session_id=sid)
    await ws.send(type="response.create", session_id=sid)
    done = await ws.until(_of_type("response.done", sid)) is not None
    await ws.aclose()
    return Outcome(
        sent=f"{count} session.create with extensions 300 levels deep, beside a live session",
        answer=f"{refused} refused (session.error, 128 levels at most); the live session "
        f"{'answered' if done else 'did not answer'}",
        ok=refused == count and done,
        allowed_runs=1,  # the live session's response
    )


async def chat_memory_pin(port: int, long: bool) -> Outcome:
    """Chat messages of 1 MiB into a room, from one principal."""
    count = 100 if long else 20
    ws = await WsEvents.open(port)
    created = await ws.create(agent=AGENT, chat="pin")
    sid = created["session_id"]
    big = "x" * (1024 * 1024)
    answers: dict[str, int] = {}
    for _ in range(count):
        await ws.send(type="input.text", text=big, session_id=sid)
        answer = await ws.until(
            lambda e: (
                e.get("session_id") == sid and e["type"] in ("session.error", "message.created")
            )
        )
        kind = (answer or {}).get("type", "no answer")
        tally(answers, (answer or {}).get("error", {}).get("code", kind))
    await ws.aclose()
    return Outcome(
        sent=f"{count} chat messages of 1 MiB into one room",
        answer=str(answers),
        ok=answers == {"invalid_request": count},
    )


# --- what uamp_asgi keeps for a stranger (rows against both servers where the wire is one) ---


async def uamp_session_flood(port: int, long: bool) -> Outcome:
    """UAMP WebSocket sessions opened socket after socket and left, one principal."""
    sockets = 24 if long else 6
    per_socket = 64  # uamp_asgi.Config.max_sessions
    answers: dict[str, int] = {}
    made: list[tuple[str, str]] = []  # (session id, the event id of its session.created)
    for _ in range(sockets):
        ws = await WsEvents.open(port, UAMP_WS)
        for _ in range(per_socket + 1):
            got = await ws.create()
            code = (got or {}).get("error", {}).get("code")
            tally(answers, f"session.error {code}" if code else (got or {}).get("type", "none"))
            if got and got["type"] == "session.created":
                made.append((got["session_id"], got["event_id"]))
        await ws.aclose()
    ws = await WsEvents.open(port, UAMP_WS)

    async def resume(sid: str, after: str) -> str:
        await ws.send(
            type="session.create",
            uamp_version="1.0",
            session_id=sid,
            session={"modalities": ["text"]},
            extensions={"resume_from": after},
        )
        got = await ws.until(
            lambda e: (
                e.get("session_id") == sid and e["type"] in ("session.created", "session.error")
            )
        )
        if got is None or got["type"] == "session.created":
            return "none" if got is None else "resumed"
        return str(got["error"]["code"])

    oldest, newest = (await resume(*made[0]), await resume(*made[-1])) if made else ("-", "-")
    await ws.aclose()
    return Outcome(
        sent=f"{sockets} sockets x {per_socket + 1} session.create, none ended (anonymous)",
        answer=f"{answers}; the oldest session then resumes: {oldest}, the newest: {newest}",
        ok=answers
        == {"session.created": sockets * per_socket, "session.error too_many_sessions": sockets}
        and (oldest, newest) == ("unknown_session", "resumed"),
    )


async def uamp_input_pin(port: int, long: bool) -> Outcome:
    """``input.text`` of 1 MiB after ``input.text`` on one session, never ``response.create``."""
    count = 150 if long else 12
    ws = await WsEvents.open(port, UAMP_WS)
    created = await ws.create()
    sid = (created or {}).get("session_id")
    big = "x" * (1024 * 1024)
    for _ in range(count):
        await ws.send(type="input.text", session_id=sid, text=big)
    await ws.send(type="response.create", session_id=sid)
    answers: dict[str, int] = {}
    while True:
        got = await ws.until(
            lambda e: (
                e.get("session_id") == sid and e["type"] in ("session.error", "response.done")
            ),
            limit=30,
        )
        if got is None or got["type"] == "response.done":
            tally(answers, "response.done" if got else "no answer")
            break
        tally(answers, f"session.error {got['error']['code']}")
    await ws.aclose()
    kept = 8  # ConnectionConfig.max_pending_input_bytes: 8 MiB
    return Outcome(
        sent=f"{count} input.text of 1 MiB on one session, then one response.create",
        answer=str(answers),
        ok=answers == {"session.error invalid_request": count - kept, "response.done": 1},
        allowed_runs=1,  # the one response, on the first 8 MiB
    )


def short_log(directory: Path) -> tuple[str, ...]:
    """A server of its own whose event log keeps 64 events a session (4 MiB of 64 KiB deltas).

    Its peak RSS is then the endless responses' own (32 MiB each, one at a time),
    not also the memory log's 64 MiB of events, which it reaches by default.
    """
    return ("--retention-events", "64")


class _WsReader:
    """A UAMP WebSocket read frame by frame, keeping nothing it has read
    (:class:`WsEvents` keeps the whole stream: not for many MiB)."""

    def __init__(self, stream: trio.SocketStream, rest: bytes) -> None:
        self.stream, self.data = stream, bytearray(rest)

    async def next(self, limit: float = 30.0) -> dict[str, Any] | None:
        """The next event (text frames, unfragmented), or ``None`` after ``limit`` s or at EOF."""
        with trio.move_on_after(limit):
            while True:
                data = self.data
                if len(data) >= 2:
                    n, pos = data[1] & 0x7F, 2
                    if n == 126:
                        n, pos = int.from_bytes(data[2:4], "big"), 4
                    elif n == 127:
                        n, pos = int.from_bytes(data[2:10], "big"), 10
                    if len(data) >= pos + n:
                        opcode, payload = data[0] & 0x0F, bytes(data[pos : pos + n])
                        del data[: pos + n]
                        if opcode == 0x1:
                            event: dict[str, Any] = json.loads(payload)
                            return event
                        continue
                try:
                    chunk = await self.stream.receive_some(1 << 20)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return None
                if not chunk:
                    return None
                data += chunk
        return None


async def uamp_endless_output(port: int, long: bool) -> Outcome:
    """An agent streaming 64 KiB deltas without end, response after response on one session.

    What the server keeps of each: at most its output bound (32 MiB,
    ``--max-response-output-bytes``), then ``response.error`` ``output_too_large``.
    """
    rounds = 6 if long else 2
    bound = 32 * 1024 * 1024  # ServerConfig.max_response_output_bytes
    stream, rest = await ws_open(port, UAMP_WS)
    ws = _WsReader(stream, rest)
    await send_quietly(stream, ws_frame(0x1, CREATE))
    created = None
    while created is None or created["type"] not in ("session.created", "session.error"):
        created = await ws.next()
        if created is None:
            break
    sid = (created or {}).get("session_id")
    answers: dict[str, int] = {}
    received: list[int] = []
    for n in range(rounds + 1):
        text = "hi" if n == rounds else "forever"
        for event in (
            {"type": "input.text", "session_id": sid, "text": text},
            {"type": "response.create", "session_id": sid},
        ):
            await send_quietly(stream, ws_frame(0x1, json.dumps(event).encode()))
        got = 0
        while True:
            event = await ws.next()
            if event is None:
                tally(answers, "no answer")
                break
            kind = event["type"]
            if kind == "response.delta":
                got += len(event["delta"].get("text", ""))
                if got > 4 * bound:  # no bound (a server before it): stop here
                    tally(answers, f"no end after {got >> 20} MiB")
                    break
            elif kind in ("response.done", "response.cancelled"):
                tally(answers, kind)
                break
            elif kind in ("response.error", "session.error"):
                tally(answers, f"{kind} {event['error']['code']}")
                break
        if text == "forever":
            received.append(got)
        if got > 4 * bound:
            break  # the socket closes under the response: the server stops it
    await stream.aclose()
    mib = [round(r / (1 << 20), 2) for r in received]
    return Outcome(
        sent=f"{rounds} responses of an agent streaming 64 KiB deltas without end, "
        "one after another on one session, then one ordinary turn",
        answer=f"{answers}; text each endless response sent before its error: {mib} MiB",
        ok=answers == {"response.error output_too_large": rounds, "response.done": 1}
        and all(bound - 2 * 64 * 1024 < r <= bound for r in received),
        allowed_runs=rounds + 1,  # each ran until the bound stopped it
    )


async def uamp_history_pin(port: int, long: bool) -> Outcome:
    """Turn after turn of 1 MiB on one session: what the session keeps of its conversation."""
    turns = 60 if long else 10
    ws = await WsEvents.open(port, UAMP_WS)
    created = await ws.create()
    sid = (created or {}).get("session_id")
    answers: dict[str, int] = {}
    last = ""
    for n in range(turns + 1):
        text = "history" if n == turns else "x" * (1024 * 1024)
        await ws.send(type="input.text", session_id=sid, text=text)
        await ws.send(type="response.create", session_id=sid)
        got = await ws.until(
            lambda e: (
                e.get("session_id") == sid and e["type"] in ("session.error", "response.done")
            ),
            limit=30,
        )
        kind = (got or {}).get("type", "no answer")
        tally(answers, kind)
        if got is not None and kind == "response.done":
            last = "".join(
                o.get("text", "") for o in got["response"].get("output", []) if isinstance(o, dict)
            )
    await ws.aclose()
    kept = int(last.split()[-1]) if last.startswith("kept ") else -1
    return Outcome(
        sent=f"{turns} turns of 1 MiB on one session, then one asking what it keeps",
        answer=f"{answers}; the last turn was given {kept // 1024} KiB of conversation",
        ok=answers == {"response.done": turns + 1} and 0 < kept <= 4 * 1024 * 1024,
        allowed_runs=turns + 1,
    )


async def _ws_turn(ws: WsEvents, sid: str, text: str) -> tuple[str, str, str]:
    """One turn on session ``sid``: how it ended (its event type), its output's text, and
    the ``event_id`` of its last event (to resume after)."""
    await ws.send(type="input.text", session_id=sid, text=text)
    await ws.send(type="response.create", session_id=sid)
    got = await ws.until(
        lambda e: e.get("session_id") == sid and e["type"] in ("session.error", "response.done"),
        limit=30,
    )
    kind = (got or {}).get("type", "no answer")
    output = (got or {}).get("response", {}).get("output", []) if kind == "response.done" else []
    text = "".join(o.get("text", "") for o in output if isinstance(o, dict))
    return kind, text, (got or {}).get("event_id", "")


async def uamp_history_spread(port: int, long: bool) -> Outcome:
    """Sessions over several sockets, each filled near its 4 MiB of history, one principal."""
    sockets, per_socket = (4, 16) if long else (2, 3)
    big = "x" * (1200 * 1024)  # three fill a session to 3.6 MiB (the core keeps 4 MiB)
    answers: dict[str, int] = {}
    wss = [await WsEvents.open(port, UAMP_WS) for _ in range(sockets)]
    sessions: list[tuple[WsEvents, str]] = []
    for _ in range(per_socket):
        for ws in wss:  # the sockets in turn: the oldest sessions are on every socket
            created = await ws.create()
            if not created or created["type"] != "session.created":
                tally(answers, "session.create refused")
                continue
            sessions.append((ws, created["session_id"]))
            for n in range(3):
                tally(answers, (await _ws_turn(ws, sessions[-1][1], f"{n} {big}"))[0])
    kept: list[int] = []
    for ws, sid in sessions:  # what each session keeps, oldest first
        kind, text, _ = await _ws_turn(ws, sid, "history")
        tally(answers, kind)
        kept.append(int(text.split()[-1]) if text.startswith("kept ") else -1)
    for ws in wss:
        await ws.aclose()
    other = await WsEvents.open(port, UAMP_WS)  # another client, afterwards
    created = await other.create()
    fresh = (await _ws_turn(other, created["session_id"], "hi"))[0] if created else "none"
    await other.aclose()
    total, budget = sum(kept), 16 * 1024 * 1024  # ServerConfig.max_history_bytes_per_principal
    count = len(sessions)
    return Outcome(
        sent=f"{sockets} sockets x {per_socket} sessions, three input.text of 1.2 MiB each "
        "(anonymous)",
        answer=f"{answers}; the {count} sessions then keep {total // 1024} KiB together "
        f"(budget {budget // 1024} KiB; the oldest {max(kept[0], 0) // 1024 if kept else 0} "
        f"KiB, the newest {max(kept[-1], 0) // 1024 if kept else 0} KiB); "
        f"a new client's turn: {fresh}",
        ok=answers == {"response.done": 4 * count}
        and count == sockets * per_socket
        and total <= budget
        and kept[0] == 0
        and kept[-1] >= 3 * len(big)
        and fresh == "response.done",
        allowed_runs=4 * count + 1,  # every turn is the agent's work
    )


async def uamp_record_history_pin(port: int, long: bool) -> Outcome:
    """Sessions filled near their 4 MiB of history, each left on its own socket (anonymous):
    what their records in the event log keep, asked by resuming each."""
    count = 16 if long else 8
    big = "x" * (1200 * 1024)  # three fill a session to 3.6 MiB (the core keeps 4 MiB)
    answers: dict[str, int] = {}
    left: list[tuple[str, str]] = []
    for _ in range(count):
        ws = await WsEvents.open(port, UAMP_WS)
        created = await ws.create()
        if not created or created["type"] != "session.created":
            tally(answers, "session.create refused")
            await ws.aclose()
            continue
        sid, after = created["session_id"], ""
        for n in range(3):
            kind, _, after = await _ws_turn(ws, sid, f"{n} {big}")
            tally(answers, kind)
        left.append((sid, after))
        await ws.aclose()  # detached: its record stays, to be resumed
    kept: list[int] = []
    resumes: dict[str, int] = {}
    for sid, after in left:  # oldest first, each on a socket of its own
        ws = await WsEvents.open(port, UAMP_WS)
        resumed = await ws.create(session_id=sid, extensions={"resume_from": after})
        if resumed and resumed["type"] == "session.created":
            tally(resumes, "resumed")
            kind, text, _ = await _ws_turn(ws, sid, "history")
            tally(answers, kind)
            kept.append(int(text.split()[-1]) if text.startswith("kept ") else -1)
        else:
            tally(resumes, str((resumed or {}).get("error", {}).get("code", "no answer")))
            kept.append(0)
        await ws.aclose()
    total, budget = sum(kept), 16 * 1024 * 1024  # max_record_bytes_per_principal
    runs = 3 * len(left) + resumes.get("resumed", 0)
    return Outcome(
        sent=f"{count} sessions, each three input.text of 1.2 MiB then its socket closed; "
        "then each resumed on a new socket and asked what it keeps (anonymous)",
        answer=f"{answers}; resumes {resumes}; the records gave back {total // 1024} KiB "
        f"(budget {budget // 1024} KiB; the newest {max(kept[-1], 0) // 1024 if kept else 0} KiB)",
        ok=answers == {"response.done": runs}
        and len(left) == count
        and total <= budget
        and kept[-1] >= 3 * len(big)
        and resumes.get("beyond_retention", 0) == count - resumes.get("resumed", 0) > 0,
        allowed_runs=runs,  # every turn is the agent's work
    )


REALTIME_WS = f"/agents/{AGENT}/realtime"


def realtime_text(text: str) -> dict[str, Any]:
    """A Realtime ``conversation.item.create`` of a user message."""
    content = [{"type": "input_text", "text": text}]
    return {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": content},
    }


async def realtime_busy_flood(port: int, long: bool) -> Outcome:
    """Realtime response.create piled on busy conversations (``enqueue``), one principal."""
    conversations, creates = 5, 200 if long else 20
    queued, per_principal = 8, 32  # --busy-max-queued, --busy-max-queued-per-principal
    answers: dict[str, int] = {}
    sockets: list[tuple[WsEvents, int]] = []
    for n in range(conversations):
        ws = await WsEvents.open(port, REALTIME_WS)
        await ws.until(_of_type("session.created"))
        await ws.send(**realtime_text("hold 120"))
        await ws.send(type="response.create")
        await ws.until(_of_type("response.created"))
        await ws.send(**realtime_text("hi"))  # what the queued responses answer
        for _ in range(creates):
            await ws.send(type="response.create")
        # The bounds say how many wait; a refusal more or less shows below.
        waiting = max(0, min(queued, per_principal - queued * n))
        refused = 0
        while refused < creates - waiting:
            got = await ws.until(_of_type("error"), limit=5)
            if got is None:
                break
            tally(answers, str(got.get("error", {}).get("code")))
            refused += 1
        sockets.append((ws, 1 + creates - refused))
    done = 0
    for ws, runs in sockets:  # the held responses end: the queued ones run, in turn
        await ws.send(type="response.cancel")
        for _ in range(runs):
            done += await ws.until(_of_type("response.done"), limit=10) is not None
        await ws.aclose()
    taken = queued * (per_principal // queued)
    return Outcome(
        sent=f"{conversations} conversations, each a held response then {creates} "
        "response.create (anonymous)",
        answer=f"{answers}; {done} response.done once the held ones were cancelled",
        ok=answers == {"queue_full": conversations * creates - taken}
        and done == conversations + taken,
        allowed_runs=conversations + taken,  # the held ones, then the queued, in turn
    )


async def oversized_bodies(port: int, long: bool) -> Outcome:
    """Completions bodies past the 4 MiB limit: a declared 1 GiB, and chunks without end."""
    rounds = 20 if long else 3
    declared = post(COMPLETIONS, b"").replace(b"Content-Length: 0", b"Content-Length: 1073741824")
    chunked = declared.replace(b"Content-Length: 1073741824", b"Transfer-Encoding: chunked")
    piece = b" " * (1024 * 1024)
    answers: dict[str, int] = {}
    sent_mib = 0

    async def one(head: bytes, framed: bytes) -> None:
        nonlocal sent_mib
        stream = await connect(port)
        async with stream:
            status: list[str] = []

            async def read() -> None:
                lines = status_lines(await read_all(stream, limit=10, most=65536))
                status.append(lines[0][9:] if lines else "no answer")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await send_quietly(stream, head)
                for _ in range(64):  # at most 64 MiB, until the server answers or closes
                    if status or not await send_quietly(stream, framed):
                        break
                    sent_mib += 1
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_eof()
            tally(answers, status[0])

    frame = b"%x\r\n%b\r\n" % (len(piece), piece)
    for _ in range(rounds):
        await one(declared, piece)
        await one(chunked, frame)
    return Outcome(
        sent=f"{rounds} x (Content-Length 1 GiB, chunked without end): {sent_mib} MiB written",
        answer=str(answers),
        ok={key.split(" ")[0] for key in answers} == {"413"},
    )


async def ai_sdk_answer_pin(port: int, long: bool) -> Outcome:
    """AI SDK chats whose answers run on unread: each POST left at its first byte, one principal."""
    count = 500 if long else 40
    bound = 8  # uamp_stores.chat_answers.MAX_ANSWERS
    answers: dict[str, int] = {}
    for n in range(count):
        user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hold 120"}]}
        body = json.dumps({"id": f"pin-{n}", "messages": [user]}).encode()
        stream = await connect(port)
        async with stream:
            await send_quietly(stream, post(f"/agents/{AGENT}/ai-sdk", body))
            tally(answers, await status_within(stream, 10) or "no answer")
    return Outcome(
        sent=f"{count} AI SDK chats of an answer held 120 s, each left at its first byte "
        "(anonymous)",
        answer=str(answers),
        ok={key.split(" ")[0]: n for key, n in answers.items()}
        == {"200": bound, "429": count - bound},
        allowed_runs=bound,  # the answers kept running, unread
    )


async def background_response_pin(port: int, long: bool) -> Outcome:
    """OpenAI Responses with ``background: true`` whose agent holds, never polled, one principal."""
    count = 500 if long else 40
    bound = 16  # background responses running per principal
    body = json.dumps({"model": AGENT, "input": "hold 120", "background": True}).encode()
    answers: dict[str, int] = {}
    for _ in range(count):
        status, got = await exchange(port, post(f"/agents/{AGENT}/v1/responses", body))
        code = (got or {}).get("error", {}).get("code") if status != "200" else None
        tally(answers, f"{status} {code}" if code else status)
    return Outcome(
        sent=f"{count} background responses held 120 s (anonymous)",
        answer=str(answers),
        ok={key.split(" ")[0]: n for key, n in answers.items()}
        == {"200": bound, "429": count - bound},
        allowed_runs=bound,  # the responses kept running
    )


def few_tasks(directory: Path) -> tuple[str, ...]:
    """A server of its own where one principal may hold 32 unfinished A2A tasks."""
    return ("--a2a-max-tasks-per-principal", "32")


async def a2a_task_flood(port: int, long: bool) -> Outcome:
    """A2A tasks sent with ``returnImmediately`` whose agent holds, one principal."""
    count = 1000 if long else 60
    bound = 32  # few_tasks
    path = f"/agents/{AGENT}/a2a"
    answers: dict[str, int] = {}
    for n in range(count):
        message = {"role": "ROLE_USER", "parts": [{"text": "hold 120"}], "messageId": f"m-{n}"}
        params = {"message": message, "configuration": {"returnImmediately": True}}
        _, got = await exchange(port, rpc_post(path, "SendMessage", params, "A2A-Version: 1.0"))
        tally(answers, rpc_outcome(got))
    return Outcome(
        sent=f"{count} SendMessage of a task held 120 s, returnImmediately (anonymous)",
        answer=str(answers),
        ok=answers == {"ok": bound, "-32029": count - bound},
        allowed_runs=bound,  # the tasks kept, running
    )


SCENARIOS = [
    Scenario.of(attack)
    for attack in (
        rapid_reset,
        never_ending_streams,
        continuation_flood,
        settings_flood,
        ping_flood_h2,
        ws_ping_flood,
        ws_invalid_utf8,
        ws_oversized,
        ws_stalled_reader,
        smuggling,
        lowercase_methods,
        head_limit,
        stalled_bodies,
        idle_flood,
        slowloris,
        json_bomb,
        role_object,
        big_integers,
        inform_memory_pin,
        mcp_session_flood,
        acp_session_pin,
        push_config_pin,
        sse_session_pin,
        interrupt_flood,  # its 32 parked runs wait until the server stops
    )
] + [
    # A server of its own: acp_session_pin leaves the anonymous caller at its ACP session cap.
    Scenario.of(busy_queue_flood, server=alone),
    Scenario.of(acp_history_pin, server=alone),
    Scenario.of(acp_load_dropped, server=alone),
    Scenario.of(concurrent_replay, server=with_ledger),
    Scenario.of(relay_token_spend, server=relay_with_ledger),
    Scenario.of(chat_redos_rule),
    Scenario.of(chat_nested_groups_rule),
    Scenario.of(expired_socket_room_actions, server=with_jwt),
    Scenario.of(deep_json_multi_session),
    Scenario.of(chat_memory_pin),
    Scenario.of(push_slow_webhook, server=with_push_allow),
]
#: Rows against both servers: the wire is one.
SCENARIOS += [
    Scenario.of(a) for a in (oversized_bodies, realtime_busy_flood, background_response_pin)
]
SCENARIOS += [Scenario.of(uamp_input_pin), Scenario.of(uamp_history_pin)]
SCENARIOS += [Scenario.of(uamp_endless_output, server=short_log)]
#: A server of its own: the budget is the anonymous caller's, which the suite's other rows share.
SCENARIOS += [Scenario.of(uamp_history_spread, server=alone)]
SCENARIOS += [Scenario.of(uamp_record_history_pin, server=alone)]
SCENARIOS += [Scenario.of(ai_sdk_answer_pin)]
SCENARIOS += [Scenario.of(a2a_task_flood, server=few_tasks)]
#: uamp_asgi under uvicorn (bench/attack_asgi.py): where a stranger makes it keep or work.
SCENARIOS += [
    Scenario.of(attack, kind="asgi")
    for attack in (
        json_bomb,
        oversized_bodies,
        sse_session_pin,
        uamp_session_flood,
        deep_json_multi_session,
        mcp_session_flood,
        push_config_pin,
        realtime_busy_flood,
        ai_sdk_answer_pin,
        background_response_pin,
        uamp_input_pin,
        uamp_history_pin,
        ws_stalled_reader,
    )
]
SCENARIOS += [Scenario.of(uamp_history_spread, server=alone, kind="asgi")]
SCENARIOS += [Scenario.of(uamp_endless_output, server=short_log, kind="asgi")]
SCENARIOS += [Scenario.of(uamp_record_history_pin, server=alone, kind="asgi")]
SCENARIOS += [Scenario.of(a2a_task_flood, server=few_tasks, kind="asgi")]


#: The timeouts every scenario runs with: short enough that slowloris, the
#: never-ending streams and the stalled reader end within seconds.
FLAGS = ("--header-timeout", "1", "--body-timeout", "2", "--ws-send-timeout", "1")
#: More arguments for a scenario on a fresh server of its own (``--fresh``,
#: ``--long``): stalled bodies really stall (the budget, not the body timeout,
#: is what answers them).
FRESH_FLAGS = {"stalled_bodies": ("--body-timeout", "30")}


class RssSampler:
    """The largest VmRSS of a process, read every 10 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.path = Path(f"/proc/{pid}/status")
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                for line in self.path.read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak = max(self.peak, int(line.split()[1]) / 1024)
            self._stop.wait(0.01)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(
    server: ServerProcess,
    scenario: Scenario,
    long: bool,
    *,
    fresh: bool,
    nice: int = 10,
    priority: int = 0,
) -> Result:
    """Run ``scenario`` against ``server`` and collect its figures."""
    invoked0 = server.invoked()
    log0 = server.log_path.stat().st_size
    rss_before = server.rss_mb()
    with RssSampler(server.proc.pid) as rss, probing(server.port, priority) as probes:
        cpu0, wait0 = server.cpu_seconds(), server.cpu_wait_seconds()
        since = time.monotonic()
        outcome, attacker_cpu = attack(scenario, server.port, long, nice)
        time.sleep(0.2)
        cpu = server.cpu_seconds() - cpu0
        wait = server.cpu_wait_seconds() - wait0
        batch = server.longest_batch_ms(since, time.monotonic())
        rss_after = server.rss_mb()
    # A fresh server's VmHWM is this scenario's exact peak; on a shared one,
    # the sampled peak while it ran.
    peak = server.peak_rss_mb() if fresh else rss.peak
    invoked = server.invoked() - invoked0
    with server.log_path.open("rb") as log:
        log.seek(log0)
        logged = log.read()
    tracebacks = logged.count(b"Traceback")
    # What failed, kept with the row (the log goes with the server).
    first = logged.find(b"Traceback")
    excerpt = logged[first : first + 4000].decode(errors="replace") if first >= 0 else ""
    latencies, failures = probes if probes else ([], 0)
    p99 = statistics.quantiles(latencies, n=100)[98] * 1000 if len(latencies) >= 2 else float("nan")
    ok = (
        outcome.ok
        and peak < RSS_BOUND_MB
        and invoked == outcome.allowed_runs
        and failures == 0
        and len(latencies) > 0
        and tracebacks == 0
    )
    return Result(
        name=scenario.name,
        attack=scenario.attack,
        sent=outcome.sent,
        answer=outcome.answer,
        cpu_s=round(cpu, 2),
        cpu_wait_s=round(wait, 2),
        attacker_cpu_s=round(attacker_cpu, 2),
        loop_batch_max_ms=round(batch, 1),
        peak_rss_mb=round(peak, 1),
        rss_before_mb=round(rss_before, 1),
        rss_after_mb=round(rss_after, 1),
        health_p99_ms=round(p99, 1),
        health_probes=len(latencies),
        health_failures=failures,
        agent_invoked=invoked,
        agent_allowed=outcome.allowed_runs,
        tracebacks=tracebacks,
        ok=ok,
        load_1m=round(os.getloadavg()[0], 2),
        first_traceback=excerpt,
    )


def run(
    scenarios: list[Scenario],
    long: bool,
    fresh: bool,
    extra: tuple[str, ...] = (),
    nice: int = 10,
    priority: int = 0,
) -> Iterator[Result]:
    """Each scenario's result: on a fresh server each, or all on one server.

    ``extra``: more ``uamp serve`` arguments (after :data:`FLAGS`); ``nice``:
    the attacker's niceness; ``priority``: the server's and the health
    probe's (below 0 needs root).
    """
    flags = FLAGS + extra
    with tempfile.TemporaryDirectory(prefix="uamp-attack-") as tmp:
        #: The suite's server of each kind, started for its first scenario.
        shared: dict[str, ServerProcess] = {}
        try:
            for scenario in scenarios:
                if fresh or scenario.server is not None:
                    own = flags + (FRESH_FLAGS.get(scenario.name, ()) if fresh else ())
                    if scenario.server is not None:
                        own += scenario.server(Path(tempfile.mkdtemp(dir=tmp)))
                    server = ServerProcess(own, Path(tmp), priority, scenario.kind)
                    try:
                        yield measure(
                            server, scenario, long, fresh=True, nice=nice, priority=priority
                        )
                    finally:
                        server.stop()
                    continue
                if scenario.kind not in shared:
                    shared[scenario.kind] = ServerProcess(flags, Path(tmp), priority, scenario.kind)
                server = shared[scenario.kind]
                yield measure(server, scenario, long, fresh=False, nice=nice, priority=priority)
        finally:
            for server in shared.values():
                server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true", help="the issue's counts (minutes)")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="a fresh server per scenario (exact peak RSS; the default with --long)",
    )
    parser.add_argument("--only", action="append", default=[], help="run only this scenario")
    parser.add_argument("--json", action="store_true", help="one JSON object per scenario")
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more uamp serve argument, e.g. --serve-arg=--max-buffered-body=33554432",
    )
    parser.add_argument(
        "--attacker-nice",
        type=int,
        default=10,
        metavar="N",
        help="the attacking process's niceness (default 10; 0: the same priority as the server)",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=0,
        metavar="N",
        help="the server's and the health probe's niceness (default 0); on a machine busy "
        "with other work, e.g. -10 (root) measures the server rather than the machine",
    )
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    unknown = set(args.only) - {s.name for s in SCENARIOS}
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    failed = 0
    for result in run(
        chosen,
        args.long,
        args.fresh or args.long,
        tuple(args.serve_arg),
        args.attacker_nice,
        args.priority,
    ):
        failed += not result.ok
        if args.json:
            print(json.dumps(attrs.asdict(result)), flush=True)
        else:
            print(
                f"{result.name}: {result.attack}\n  sent: {result.sent}\n"
                f"  answer: {result.answer}\n  server CPU {result.cpu_s:.2f} s "
                f"(waited {result.cpu_wait_s:.2f} s for a CPU), attacker CPU "
                f"{result.attacker_cpu_s:.2f} s, longest loop batch "
                f"{result.loop_batch_max_ms:.1f} ms CPU, "
                f"peak RSS {result.peak_rss_mb:.0f} MB (RSS {result.rss_before_mb:.0f} -> "
                f"{result.rss_after_mb:.0f} MB), health p99 "
                f"{result.health_p99_ms:.1f} ms ({result.health_probes} probes, "
                f"{result.health_failures} failed), agent invoked {result.agent_invoked}, "
                f"tracebacks {result.tracebacks}, load average {result.load_1m:.1f}: "
                f"{'ok' if result.ok else 'FAILED'}",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
