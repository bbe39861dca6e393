"""What the sans-IO core alone costs per one-delta WebSocket response.

Run: ``python bench/core_turn.py [--rounds 7] [--responses 2000]``, or
``--instructions`` for callgrind counts (needs valgrind).

It feeds a :class:`~uamp_proto.connection.ServerConnection` the exact bytes
the ``ttfd`` client of ``bench/transports.py`` sends (``input.text`` then
``response.create`` on a named session), and sends what the session host
sends back for a one-delta response (``response.created``, one text delta,
``response.done``), the way the host calls the core (``receive_event``,
or on an older tree ``receive`` and ``next_event`` until ``NEED_DATA``;
``send`` with the session and response
ids), and builds the agent's request in between as the host does
(``turn_request``). No sockets, no trio: the core's decode, checks, state
tables and codec.

Printed: microseconds per step (median of the rounds, each round timing
every step over ``--responses`` responses on one session) and per response.
``--instructions`` counts instructions per step instead: for each step the
script runs under ``valgrind --tool=callgrind``, collecting only inside
that step, twice, with a tenth of ``--responses`` and then eleven times
that; the difference over the extra responses is one step's (warm-up
cancels out).

To compare two trees, run it with each on ``PYTHONPATH`` (the script
imports ``uamp_proto`` from the first entry).
"""

from __future__ import annotations

import argparse
import operator
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import orjson

SID = "sess_ttfd"
STEPS = (
    "input.text",
    "response.create",
    "turn_request",
    "response.created",
    "response.delta",
    "response.done",
)


def _client_bytes(n: int) -> tuple[bytes, bytes]:
    """The ttfd client's two messages asking for ``n`` deltas (``uamp_start`` there)."""
    return (
        orjson.dumps({"type": "input.text", "session_id": SID, "text": str(n)}),
        orjson.dumps({"type": "response.create", "session_id": SID}),
    )


def _connection() -> object:
    from uamp_proto import events as ev
    from uamp_proto import types as ty
    from uamp_proto.connection import ConnectionConfig, ServerConnection

    conn = ServerConnection(ConnectionConfig(on_busy=lambda sid, event: object()))
    conn.receive(
        orjson.dumps(
            {
                "type": "session.create",
                "uamp_version": "1.0",
                "session_id": SID,
                "session": {"modalities": ["text"]},
            }
        )
    )
    conn.next_event()
    conn.accept(SID)
    conn.send(
        ev.CapabilitiesEvent(
            session_id=SID,
            capabilities=ty.Capabilities(id="flood", provider="bench", modalities=["text"]),
        )
    )
    return conn


def _steps(conn: object) -> dict[str, Callable[[], object]]:
    """One callable per step of a response, sharing the state between them."""
    from uamp_proto import events as ev
    from uamp_proto import types as ty
    from uamp_proto.codec import decode
    from uamp_proto.connection import NEED_DATA
    from uamp_proto.principal import ANONYMOUS
    from uamp_proto.session_request import turn_request

    c: object = conn
    state: dict[str, object] = {"rid": None}
    word = ty.DeltaText(text="word ")

    receive_event = getattr(c, "receive_event", None)

    def feed(data: bytes) -> object:
        if receive_event is not None:  # the host's way since 2026-12-07: one call
            event = receive_event(data)
            if c.owed:  # type: ignore[attr-defined]
                raise AssertionError(c.data_to_send())  # type: ignore[attr-defined]
            assert not c.inbox  # type: ignore[attr-defined]
            return event
        c.receive(data)  # type: ignore[attr-defined]  # a tree before receive_event
        event = c.next_event()  # type: ignore[attr-defined]
        if c.owed:  # type: ignore[attr-defined]
            raise AssertionError(c.data_to_send())  # type: ignore[attr-defined]
        assert c.next_event() is NEED_DATA  # type: ignore[attr-defined]
        return event

    text, create = _client_bytes(1)  # the ttfd client asks for one delta each time
    create_event = decode(create)

    def input_text() -> object:
        return feed(text)

    def response_create() -> object:
        event = feed(create)
        state["rid"] = c.sessions[SID].response.response_id  # type: ignore[attr-defined]
        return event

    def request() -> object:
        # What the session host builds for the agent (uamp_proto.session_request).
        return turn_request(
            c.sessions[SID],  # type: ignore[attr-defined]
            create_event,
            agent="flood",
            transport="uamp-websocket",
            token=None,
            principal=ANONYMOUS,
        )

    def created() -> object:
        rid = state["rid"]
        return c.send(ev.ResponseCreated(response_id=rid, session_id=SID), session_id=SID)  # type: ignore[attr-defined]

    def delta() -> object:
        return c.send(ev.ResponseDelta(delta=word), session_id=SID, response_id=state["rid"])  # type: ignore[attr-defined]

    def done() -> object:
        # What the turn runner's conclude() builds from the tracker.
        final = c.sessions[SID].response.done_event(session_id=SID)  # type: ignore[attr-defined]
        return c.send(final, session_id=SID, response_id=state["rid"])  # type: ignore[attr-defined]

    return dict(
        zip(STEPS, (input_text, response_create, request, created, delta, done), strict=True)
    )


def timed(responses: int, rounds: int) -> dict[str, float]:
    """Median microseconds per step over ``rounds`` rounds."""
    per: dict[str, list[float]] = {s: [] for s in STEPS}
    clock = time.perf_counter_ns
    for _ in range(rounds):
        conn = _connection()
        steps = _steps(conn)
        for fn in steps.values():  # warm up once
            fn()
        sums = dict.fromkeys(STEPS, 0)
        for _ in range(responses):
            for name, fn in steps.items():
                t0 = clock()
                fn()
                sums[name] += clock() - t0
        for name in STEPS:
            per[name].append(sums[name] / responses / 1000)
    return {name: statistics.median(v) for name, v in per.items()}


def _run(step: str, responses: int) -> None:
    """Run ``responses`` responses through the core (the callgrind child).

    The measured step is called through :func:`operator.call`, whose C
    function (``_operator_call``) is what callgrind collects under
    (``--toggle-collect``); ``"all"`` measures every step.
    """
    steps = _steps(_connection())
    call = operator.call
    for _ in range(responses):
        for name, fn in steps.items():
            if name == step or step == "all":
                call(fn)
            else:
                fn()


def instructions(responses: int) -> dict[str, float]:
    """Instructions per step: the difference of two runs over the extra responses."""
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind")
    out = {}
    for step in (*STEPS, "all"):
        low, high = (_callgrind(step, count) for count in (responses, responses * 11))
        out[step] = (high - low) / (responses * 10)
    return out


def _callgrind(step: str, count: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--toggle-collect=_operator_call",
            f"--callgrind-out-file={os.path.join(tmp, 'cg.out')}",
            sys.executable,
            __file__,
            "--child",
            step,
            str(count),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        match = re.search(r"Collected : (\d+)", proc.stderr)
        assert match is not None, proc.stderr[-2000:]
        return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--responses", type=int, default=2000)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _run(args.child[0], int(args.child[1]))
        return
    import uamp_proto

    print(f"uamp_proto from {os.path.dirname(uamp_proto.__file__)}")
    if args.instructions:
        for step, count in instructions(max(args.responses // 10, 1)).items():
            print(f"{step:>18}  {count:10,.0f} instructions")
        return
    results = timed(args.responses, args.rounds)
    for step, value in results.items():
        print(f"{step:>18}  {value:6.2f} us")
    print(f"{'per response':>18}  {sum(results.values()):6.2f} us")


if __name__ == "__main__":
    main()
