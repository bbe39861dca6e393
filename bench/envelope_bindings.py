"""Spec 003 bindings: deltas per second and time to the first delta, per binding.

Run: ``python bench/envelope_bindings.py [--deltas 2000] [--asks 5] [--window 64]``

One uamp server runs in its own process on loopback, with a certificate from
a throwaway CA and HTTP/3 on, hosting an agent that emits ``--deltas``
one-word deltas as fast as it can. For each binding -- HTTP/2 + SSE over TLS
(the baseline), HTTP/3 (QUIC) and gRPC (``uamp.v1.Agent/Session``) -- uamp's
own client in this process sends ``--asks`` signed asks one after the other
(``delta_window`` = ``--window``, acknowledging every half window) and
measures:

* ``deltas/s``: delta frames received per second over a whole ask;
* ``first ms``: milliseconds from sending the ask to its first delta frame.

Medians are printed with the ratio to HTTP/2 measured in the same run
(timings on a shared machine are noisy: compare ratios).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.resume import Flood
from bench.transports import port_from_file
from tests._support.tls import ThrowawayCA, make_ca
from uamp_trio.app import create_app
from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner
from uamp_trio.client.envelope_bindings import envelope_grpc, envelope_h3
from uamp_trio.engines.server import Server


def serve(certfile: str, keyfile: str, deltas: int, port_file: Path) -> None:
    """``--serve``: the server, in its own process."""

    async def run() -> None:
        server = Server(
            create_app([Flood(deltas)]),
            port=0,
            certfile=certfile,
            keyfile=keyfile,
            http3=True,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            port_file.write_text(str(server.port))

    trio.run(run)


Binding = Callable[[str, ThrowawayCA, EnvelopeSigner], Any]


@asynccontextmanager
async def http2(url: str, ca: ThrowawayCA, signer: EnvelopeSigner) -> AsyncIterator[Any]:
    import ssl

    http = httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca.cafile), http2=True)
    async with http, EnvelopeHTTPClient(url, signer, to="urn:uamp:agent:flood", http=http) as c:
        yield c


@asynccontextmanager
async def h3(url: str, ca: ThrowawayCA, signer: EnvelopeSigner) -> AsyncIterator[Any]:
    async with envelope_h3(url, signer, to="urn:uamp:agent:flood", verify=ca.cafile) as c:
        yield c


@asynccontextmanager
async def grpc(url: str, ca: ThrowawayCA, signer: EnvelopeSigner) -> AsyncIterator[Any]:
    async with envelope_grpc(url, signer, to="urn:uamp:agent:flood", verify=ca.cafile) as c:
        yield c


BINDINGS: dict[str, Binding] = {"http2": http2, "h3": h3, "grpc": grpc}


async def measure(
    binding: Binding, url: str, ca: ThrowawayCA, asks: int, window: int
) -> tuple[float, float]:
    """Median deltas/s and median ms to the first delta over ``asks`` asks."""
    rates: list[float] = []
    firsts: list[float] = []
    signer = EnvelopeSigner.ephemeral()
    async with binding(url, ca, signer) as client:
        for _ in range(asks):
            envelope = signer.make("ask", "go", to="urn:uamp:agent:flood", window=window)
            start = time.perf_counter()
            first: list[float] = []
            reply = await _timed(client, envelope, start, first)
            elapsed = time.perf_counter() - start
            rates.append(len(reply.deltas) / elapsed)
            firsts.append(first[0] * 1000 if first else float("nan"))
    return statistics.median(rates), statistics.median(firsts)


async def _timed(client: Any, envelope: Any, start: float, first: list[float]) -> Any:
    """Run one exchange, noting when its first frame arrived.

    The clients collect the frames into ``Reply.deltas``; for the run, that
    list is one that notes the time of its first ``append``.
    """

    class Watch(list):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:
            if not self:
                first.append(time.perf_counter() - start)
            super().append(item)

    from uamp_trio.client import envelope as module

    made = module.Reply

    def reply_with_watch(env: Any) -> Any:
        reply = made(env)
        reply.deltas = Watch()
        return reply

    module.Reply = reply_with_watch  # type: ignore[misc, assignment]
    try:
        return await client.exchange(envelope, ack_every=None)
    finally:
        module.Reply = made  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--asks", type=int, default=5)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        certfile, keyfile, port_file = args.serve
        serve(certfile, keyfile, args.deltas, Path(port_file))
        return
    with tempfile.TemporaryDirectory() as tmp:
        ca = make_ca(Path(tmp))
        port_file = Path(tmp) / "port"
        command = [sys.executable, __file__, "--deltas", str(args.deltas), "--serve"]
        proc = subprocess.Popen([*command, ca.server.certfile, ca.server.keyfile, str(port_file)])
        try:
            url = f"https://127.0.0.1:{port_from_file(port_file, proc)}"
            results = {
                name: trio.run(measure, binding, url, ca, args.asks, args.window)
                for name, binding in BINDINGS.items()
            }
        finally:
            proc.kill()
            proc.wait()
    base_rate, base_first = results["http2"]
    print(f"{args.deltas} deltas per ask, {args.asks} asks, delta_window {args.window}")
    print(f"{'binding':8} {'deltas/s':>10} {'vs http2':>9} {'first ms':>9} {'vs http2':>9}")
    for name, (rate, first) in results.items():
        print(
            f"{name:8} {rate:10,.0f} {rate / base_rate:8.2f}x {first:9.1f} "
            f"{first / base_first:8.2f}x"
        )


if __name__ == "__main__":
    main()
