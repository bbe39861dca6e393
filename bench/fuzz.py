"""Decoder fuzz: generated inputs for each parser, which may fail only in documented ways.

Parsers and what each must do with any input:

``head``
    :func:`uamp_trio.engines.h1fast.parse_head` returns ``None`` (the head goes
    to h11) or exactly what h11 reads from the same bytes; it never raises.
``ws``
    :meth:`FrameEngine.feed <uamp_trio.engines.ws_frames.FrameEngine.feed>` of
    both engines (``websockets``, ``wsproto``) returns whole messages or raises
    :class:`~uamp_trio.engines.ws_frames.WebSocketClosed`; no message is over
    ``max_message_size``, no text message is invalid UTF-8.
``event``
    :func:`uamp_proto.codec.decode` returns an event or raises
    :class:`~uamp_proto.codec.DecodeError`; an event it returns encodes and
    decodes back to itself.
``sse``
    :meth:`uamp_proto.sse.SSEParser.feed` returns events or raises
    :class:`~uamp_proto.sse.SSEError`; the same stream fed whole or cut
    anywhere gives the same events (or the same error).

Inputs are seeds (valid messages) changed by random byte edits and splices of
bytes that matter to each format, plus, for events, random JSON values put in
random fields. Deterministic for a seed. A failing input is printed (repr) and
the run exits 1.

    .venv/bin/python bench/fuzz.py                   # 1,000,000 inputs per parser
    .venv/bin/python bench/fuzz.py --count 2000      # what the test suite runs
    .venv/bin/python bench/fuzz.py --only ws --seed 7
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests._support.h1 import h11_head
from uamp_proto.codec import DecodeError, decode, encode
from uamp_proto.sse import SSEError, SSEParser
from uamp_trio.engines.h1fast import parse_head
from uamp_trio.engines.ws_frames import WebSocketClosed, make_engine

MAX_HEAD = 64 * 1024
MAX_MESSAGE = 64 * 1024


class Finding(Exception):
    """An input a parser handled in an undocumented way."""


def mutate(rng: random.Random, data: bytes, splices: list[bytes]) -> bytes:
    """``data`` with one to four random edits: insert, delete, replace, duplicate, cut."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(out))
        action = rng.randrange(6)
        if action == 0:
            out[at:at] = rng.choice(splices)
        elif action == 1:
            del out[at : at + rng.randint(1, 8)]
        elif action == 2 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif action == 3:
            out[at:at] = out[at : at + rng.randint(1, 16)]
        elif action == 4:
            del out[at:]
        else:
            out[at:at] = rng.randbytes(rng.randint(1, 4))
    return bytes(out)


# --- HTTP heads -----------------------------------------------------------------------------

HEAD_SEEDS = [
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /agents/x/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
    b"Content-Type: application/json\r\n\r\nabc",
    b"PUT /x?y=1 HTTP/1.1\r\nhost: a\r\nconnection: keep-alive\r\nX-A:  v \t\r\n\r\n",
    b"DELETE http://a/b HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n1234567",
]
HEAD_SPLICES = [
    b"\x00", b"\r", b"\n", b"\r\n", b"\r\n ", b"\t", b" ", b"\x7f", b"\xff", b":", b",",
    b"\r\n\r\n", b"HTTP/1.0", b"\r\nTransfer-Encoding: chunked", b"\r\nContent-Length: 1",
    b"\r\nHost: b", b"\r\nExpect: 100-continue", b"\r\nConnection: close", b"\r\nUpgrade: x",
    b"\r\nContent-Length: 1, 1", b"\r\nX", b"\n\n", b"+", b"-", b"0x",
]  # fmt: skip


def check_head(rng: random.Random) -> str:
    data = mutate(rng, rng.choice(HEAD_SEEDS), HEAD_SPLICES)
    head = parse_head(data, 0, MAX_HEAD)  # any exception is a finding
    if head is None:
        return "deferred to h11"
    if head != h11_head(data, MAX_HEAD):
        raise Finding(f"fast path {head!r} but h11 {h11_head(data, MAX_HEAD)!r}")
    return "read as h11 reads it"


# --- WebSocket frames ------------------------------------------------------------------------


def ws_frame(rng: random.Random) -> bytes:
    """One client frame with random fields (mostly valid)."""
    opcode = rng.choice([0x0, 0x1, 0x1, 0x2, 0x8, 0x9, 0xA, rng.randrange(16)])
    fin = rng.random() < 0.8
    rsv = rng.choice([0, 0, 0, 0x40, 0x20])
    size = rng.choice([0, 1, 5, 125, 126, 200, 65535, 65536, 70000])
    payload = rng.choice(
        [rng.randbytes(min(size, 300)), "héllo".encode() * (size // 6 + 1), b"\xff\xfe" * 3]
    )[:size]
    if opcode == 0x8 and payload:
        payload = (
            rng.choice([1000, 1001, 1002, 1005, 1007, 999, 3000, 5000]).to_bytes(2, "big")
            + payload[2:]
        )
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | rsv | opcode])
    mask = 0x80 if rng.random() < 0.95 else 0
    if n < 126 and rng.random() < 0.9:
        head += bytes([mask | n])
    elif n < 65536 and rng.random() < 0.9:
        head += bytes([mask | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([mask | 127]) + n.to_bytes(8, "big")
    key = rng.randbytes(4)
    if mask:
        if n:
            keys = (key * (n // 4 + 1))[:n]
            masked = int.from_bytes(payload, "big") ^ int.from_bytes(keys, "big")
            payload = masked.to_bytes(n, "big")
        head += key
    return head + payload


WS_SPLICES = [b"\x81", b"\x88\x80", b"\x89\x80\0\0\0\0", b"\x00", b"\xff", b"\x7f" * 9]


def check_ws(rng: random.Random) -> str:
    data = b"".join(ws_frame(rng) for _ in range(rng.randint(1, 4)))
    if rng.random() < 0.5:
        data = mutate(rng, data, WS_SPLICES)
    cuts = sorted(rng.sample(range(len(data) + 1), min(2, len(data) + 1)))
    pieces = [data[: cuts[0]], data[cuts[0] : cuts[-1]], data[cuts[-1] :]]
    closes: list[int] = []
    for name in ("websockets", "wsproto"):
        engine = make_engine(client=False, max_message_size=MAX_MESSAGE, engine=name)  # type: ignore[arg-type]
        try:
            for piece in pieces:
                for message in engine.feed(piece):
                    if len(message) > MAX_MESSAGE:
                        raise Finding(f"{name}: a message of {len(message)} bytes")
            engine.feed(b"")  # end of stream
        except WebSocketClosed as exc:
            closes.append(exc.code)
        engine.take()
    return f"closed {closes[0]}" if closes else "open"


# --- UAMP events ------------------------------------------------------------------------------

EVENT_SEEDS: list[dict[str, Any]] = [
    {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}},
    {"type": "input.text", "text": "hi", "session_id": "s1", "event_id": "e1"},
    {"type": "response.create", "response": {"modalities": ["text"], "instructions": "x"}},
    {"type": "tool.result", "call_id": "c1", "result": "42", "is_error": False},
    {"type": "response.delta", "delta": {"type": "text", "text": "x"}, "delta_seq": 3},
    {"type": "progress", "target": "response", "stage": "ack", "delta_seq": 2, "percent": 0.5},
    {"type": "payment.submit", "payment": {"token": "t", "amount": "1.00"}},
    {"type": "session.update", "session": {"instructions": "x"}, "token": "t"},
    {"type": "response.done", "response": {"id": "r1", "status": "completed", "output": []}},
    {"type": "capabilities", "capabilities": {"id": "a", "provider": "p", "modalities": ["text"]}},
]


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 2**63, 2**64, -(2**63) - 1, 10**30, rng.randint(-9999, 9999)])
    if kind == 3:
        return rng.choice([0.5, 1e308, -0.0, 1e-300])
    if kind in (4, 5):
        return rng.choice(["", "x", "text", "ack", "\ud800", "é" * 3, "a" * 200])
    if kind in (6, 7):
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["type", "text", "id", "x"]): random_json(rng, depth + 1)}


def structural(rng: random.Random, obj: Any) -> Any:
    """``obj`` with one random value somewhere replaced by a random JSON value."""
    if isinstance(obj, dict) and obj and rng.random() < 0.7:
        key = rng.choice(list(obj))
        return {**obj, key: structural(rng, obj[key])}
    if isinstance(obj, list) and obj and rng.random() < 0.7:
        at = rng.randrange(len(obj))
        return [*obj[:at], structural(rng, obj[at]), *obj[at + 1 :]]
    return random_json(rng)


def check_event(rng: random.Random) -> str:
    seed = rng.choice(EVENT_SEEDS)
    if rng.random() < 0.6:
        data = json.dumps(structural(rng, seed)).encode("utf-8", "surrogatepass")
    else:
        data = mutate(rng, json.dumps(seed).encode(), [b'"', b"{", b"}", b"[", b",", b":", b"\\"])
    try:
        event = decode(data)
    except DecodeError:
        return "DecodeError"
    again = decode(encode(event))
    if again != event:
        raise Finding(f"decoded {event!r} but its encoding decodes to {again!r}")
    return "decoded and round-tripped"


# --- SSE --------------------------------------------------------------------------------------

SSE_SEEDS = [
    b'data: {"type":"response.delta"}\n\n',
    b"\xef\xbb\xbfid: 7\r\nevent: message\r\ndata: a\r\ndata: b\r\n\r\n",
    b": comment\n\nretry: 1000\ndata:x\r\r",
    b"data\n\nid\nevent:\n\ndata: [DONE]\n\n",
]
SSE_SPLICES = [
    b"\r",
    b"\n",
    b"\r\n",
    b":",
    b" ",
    b"data:",
    b"id:",
    b"retry:",
    b"\x00",
    b"\xef\xbb\xbf",
]


def sse_events(pieces: list[bytes]) -> Any:
    parser = SSEParser(max_buffer=4096)
    out: list[Any] = []
    try:
        for piece in pieces:
            out.extend(parser.feed(piece))
        parser.close()
    except SSEError as exc:
        return out, type(exc).__name__
    return out, None


def check_sse(rng: random.Random) -> str:
    data = b"".join(rng.choice(SSE_SEEDS) for _ in range(rng.randint(1, 3)))
    data = mutate(rng, data, SSE_SPLICES)
    cuts = sorted(rng.sample(range(len(data) + 1), min(3, len(data) + 1)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    whole, split = sse_events([data]), sse_events(pieces)
    if whole != split:
        raise Finding(f"whole {whole!r} but split {split!r}")
    return whole[1] or "events"


#: Each parser's check: runs one generated input, returns what happened to it.
PARSERS: dict[str, Callable[[random.Random], str]] = {
    "head": check_head,
    "ws": check_ws,
    "event": check_event,
    "sse": check_sse,
}


def fuzz(name: str, count: int, seed: int) -> tuple[dict[str, int], float]:
    """Run ``count`` inputs through parser ``name``: outcomes counted, and seconds.

    Raises:
        Finding: An input was handled in an undocumented way.
    """
    check = PARSERS[name]
    outcomes: dict[str, int] = {}
    start = time.perf_counter()
    for i in range(count):
        rng = random.Random(f"{seed}:{name}:{i}")
        try:
            outcome = check(rng)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        except Finding as exc:
            raise Finding(f"{name} input #{i} (seed {seed}): {exc}") from None
        except Exception as exc:
            raise Finding(f"{name} input #{i} (seed {seed}): undocumented {exc!r}") from exc
    return outcomes, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="inputs per parser")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", action="append", choices=sorted(PARSERS), default=[])
    args = parser.parse_args(argv)
    for name in args.only or list(PARSERS):
        try:
            outcomes, seconds = fuzz(name, args.count, args.seed)
        except Finding as exc:
            print(f"FINDING {exc}", flush=True)
            return 1
        counted = ", ".join(f"{k}: {v:,}" for k, v in sorted(outcomes.items()))
        print(
            f"{name}: {args.count:,} inputs in {seconds:.1f} s, only documented errors ({counted})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
