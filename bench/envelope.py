"""Spec 003 bindings on loopback: delta rate, time to first delta, signing cost, windows.

Run: ``python bench/envelope.py [--deltas 2000] [--rounds 3] [--windows 1,4,16,64,256]``

The server (``--serve``, its own process) hosts one hand-written agent that
streams as many one-word text deltas as its question says, on the spec 003
bindings and on the UAMP WebSocket (the baseline). The clients are uamp's own
(:mod:`uamp_trio.client.envelope`, :func:`uamp_trio.client.connect`) in this
process, so a row is client and server together; every figure is the median
of ``--rounds`` rounds, measured alternately in one run:

* ``sign``: microseconds to sign one small envelope (Ed25519 and ES256), to
  verify it, and to decode + verify it from bytes (what the server does per
  envelope), beside ``canonical``: the canonical JSON alone.
* ``rate``: delta frames per second (first to last frame) of one ask of ``--deltas`` deltas over
  ``envelope-http`` (POST + SSE + acks), ``envelope-ws`` and, as the
  baseline, ``uamp-ws`` (UAMP ``response.delta`` events, no window); the
  ratio is to ``uamp-ws``.
* ``ttfd``: median milliseconds from sending a one-delta ask to its first
  delta frame, per binding (for HTTP: POST, then GET until the first frame).
* ``window``: deltas per second over ``envelope-ws`` and ``envelope-http``
  with ``delta_window`` = each of ``--windows`` (acks every half window):
  what the window costs when the producer must wait for acks.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.transports import port_from_file

WORD = "word "


# --- the server process --------------------------------------------------------------


def serve(port_file: Path) -> None:
    """uamp's server with the counting agent on the envelope and UAMP WebSocket bindings."""
    from uamp_proto import events as ev
    from uamp_proto import types as ty
    from uamp_proto.responder import Emit, TurnRequest
    from uamp_trio import Server, create_app
    from uamp_trio.envelope.service import EnvelopeLimits
    from uamp_trio.transports import envelopes, uamp_ws

    class Counting:
        """Streams ``int(question)`` one-word deltas."""

        name = "count"

        def capabilities(self) -> ty.Capabilities:
            return ty.Capabilities(id=self.name, provider="bench", modalities=["text"])

        async def respond(self, request: TurnRequest, emit: Emit) -> None:
            wanted = int(request.messages[-1].text or "1")
            delta = ev.ResponseDelta(delta=ty.DeltaText(text=WORD))
            for _ in range(wanted):
                await emit(delta)

    limits = EnvelopeLimits(max_concurrent=64, max_window=4096)
    app = create_app(
        [Counting()], transports=[envelopes.mount, uamp_ws.mount], envelope_limits=limits
    )
    server = Server(app, port=0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            port_file.write_text(str(port))

    trio.run(main)


# --- measurements ------------------------------------------------------------------------


def sign_costs(repeats: int = 2000) -> dict[str, float]:
    """Microseconds per operation on one small envelope."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    from uamp_proto.envelope import (
        Body,
        Envelope,
        decode_envelope,
        encode_envelope,
        envelope_canonical_json,
    )
    from uamp_proto.signing import sign_envelope, verify_envelope

    plain = Envelope(
        id="urn:uuid:11111111-1111-4111-8111-111111111111",
        ts="2025-07-10T10:00:00Z",
        from_="did:web:client",
        to=("urn:uamp:agent:count",),
        intent="ask",
        body=Body(type="text/plain", content="How many deltas? 100"),
    )
    out: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], object]) -> None:
        began = time.perf_counter()
        for _ in range(repeats):
            fn()
        out[name] = (time.perf_counter() - began) / repeats * 1e6

    timed("canonical", lambda: envelope_canonical_json(plain))
    for alg, key in (
        ("EdDSA", ed25519.Ed25519PrivateKey.generate()),
        ("ES256", ec.generate_private_key(ec.SECP256R1())),
    ):
        public = key.public_key()
        signed = sign_envelope(plain, key)
        raw = encode_envelope(signed)
        timed(f"sign {alg}", lambda key=key: sign_envelope(plain, key))  # type: ignore[misc]
        timed(f"verify {alg}", lambda s=signed, p=public: verify_envelope(s, p))  # type: ignore[misc]
        timed(
            f"decode+verify {alg}",
            lambda r=raw, p=public: verify_envelope(decode_envelope(r), p),  # type: ignore[misc]
        )
    return out


#: (seconds to the first delta, deltas, seconds from the first delta to the last).
Timing = tuple[float, int, float]
Client = Callable[[int, int, int | None], Awaitable[Timing]]


async def envelope_http(port: int, n: int, window: int | None) -> Timing:
    """(seconds to the first delta, deltas received) of one ask over POST + SSE."""
    from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner

    return await _ask(
        EnvelopeHTTPClient(f"http://127.0.0.1:{port}", EnvelopeSigner.ephemeral()), n, window
    )


async def envelope_ws(port: int, n: int, window: int | None) -> Timing:
    """(seconds to the first delta, deltas received) of one ask over the WebSocket."""
    from uamp_trio.client.envelope import EnvelopeSigner
    from uamp_trio.client.envelope import envelope_ws as open_ws

    async with open_ws(f"ws://127.0.0.1:{port}/uamp/1/ws", EnvelopeSigner.ephemeral()) as client:
        return await _ask(client, n, window)


async def _ask(client: Any, n: int, window: int | None) -> Timing:
    began = time.perf_counter()
    seen_at: list[float] = []

    def seen(_: object) -> None:
        seen_at.append(time.perf_counter())

    reply = await client.ask(str(n), window=window, on_delta=seen)
    if getattr(client, "http", None) is not None:
        await client.http.aclose()
    # The done frame is not a text delta; the rate is over the stream itself.
    return seen_at[0] - began, len(reply.deltas) - 1, seen_at[-1] - seen_at[0]


async def uamp_ws(port: int, n: int, window: int | None) -> Timing:
    """The baseline: one UAMP response of ``n`` deltas on the WebSocket."""
    from uamp_trio.client import connect

    async with connect(f"ws://127.0.0.1:{port}/uamp") as client:
        session = await client.create_session()
        began = time.perf_counter()
        seen_at: list[float] = []
        async for event in session.respond(str(n)):
            if event.type == "response.delta":
                seen_at.append(time.perf_counter())
        return seen_at[0] - began, len(seen_at), seen_at[-1] - seen_at[0]


BINDINGS: dict[str, Client] = {
    "uamp-ws": uamp_ws,
    "envelope-ws": envelope_ws,
    "envelope-http": envelope_http,
}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def rates(port: int, n: int, rounds: int, windows: list[int]) -> dict[str, Any]:
    """Every client row, alternating, ``rounds`` times."""
    rate: dict[str, list[float]] = {k: [] for k in BINDINGS}
    ttfd: dict[str, list[float]] = {k: [] for k in BINDINGS}
    windowed: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for name, client in BINDINGS.items():
            _, count, seconds = await client(port, n, 1024 if name != "uamp-ws" else None)
            rate[name].append((count - 1) / seconds)
            for _ in range(5):
                first, _, _ = await client(port, 1, None)
                ttfd[name].append(first * 1000)
        for window in windows:
            for name in ("envelope-ws", "envelope-http"):
                _, count, seconds = await BINDINGS[name](port, n, window)
                windowed.setdefault((name, window), []).append((count - 1) / seconds)
    return {
        "rate": {k: _median(v) for k, v in rate.items()},
        "ttfd": {k: _median(v) for k, v in ttfd.items()},
        "window": {k: _median(v) for k, v in windowed.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--windows", default="1,4,16,64,256")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    windows = [int(w) for w in args.windows.split(",") if w]
    print("sign/verify (us per envelope):")
    for name, us in sign_costs().items():
        print(f"  {name:<22} {us:8.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)])
        try:
            port = port_from_file(port_file, proc, 20)
            found = trio.run(rates, port, args.deltas, args.rounds, windows)
        finally:
            proc.terminate()
            proc.wait(5)
    base = found["rate"]["uamp-ws"]
    print(f"deltas/s, one ask of {args.deltas} deltas (median of {args.rounds}):")
    for name, value in found["rate"].items():
        print(f"  {name:<14} {value:10.0f}   x{value / base:.2f} of uamp-ws")
    print("time to first delta (ms, median):")
    for name, value in found["ttfd"].items():
        print(f"  {name:<14} {value:8.2f}")
    print("window-limited deltas/s (acks every half window):")
    for (name, window), value in sorted(found["window"].items()):
        print(f"  {name:<14} window {window:<5} {value:10.0f}")


if __name__ == "__main__":
    main()
