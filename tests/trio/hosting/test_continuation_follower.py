"""A client following a carried-on response never takes its own process's continuation for lost.

A session resumed after its process was lost follows its log while this
process carries the response on (``uamp_trio.hosting.session_log``,
``_follow``): it reads the session's record, and a record that says a
response runs while nobody writes the log means the writer is gone. The
continuation ends by writing the record (nothing runs) and then letting go
of the log; on Redis the record is read in a worker thread. When the reply
of a read made *before* that write was handed back *after* the continuation
let go, the follower saw "running, written by this process, which no longer
writes it" and carried the response on a second time: the finished response
got ``response.error`` ``interrupted`` after its ``response.done`` (seen
once under load in tests/trio/test_hitl_node_loss.py, where the client
expected the ``session.error`` of its next message).

:class:`_LateReply` makes that ordering happen every time: one read of the
record, made while the continuation waits for the person, is handed back
only once the continuation has let go.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.wire import recv, resume_session, send, until
from uamp_agents import agent
from uamp_agents.bridge import AgentEndpoint, serve_agent
from uamp_agents.providers import _demo
from uamp_agents.tools import tool
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import decode, encode, unstructure
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import TurnRequest
from uamp_stores.event_log import LogKey, SessionRecord
from uamp_stores.event_log_redis import RedisEventLog
from uamp_trio import App
from uamp_trio.hosting import session_log
from uamp_trio.hosting.interrupts import Interrupts
from uamp_trio.hosting.turns import ResponseRunner
from uamp_trio.stores import Stores
from uamp_trio.transports import uamp_ws

TIMEOUT = 30
KEY = (ANONYMOUS.key, "sess_1")
QUESTION = ty.Message(role="user", content="what is 2+3?")
#: A client that shows and answers interrupts.
INTERRUPTS = {
    "id": "c",
    "provider": "p",
    "modalities": ["text"],
    "extensions": {"interrupts": True},
}


class Lost(Exception):
    """The process running the response died."""


def _calculator(calls: list[tuple[float, float]]) -> AgentEndpoint:
    """The calculator of ``uamp serve --store redis://... --approve add``."""

    def add(a: float, b: float) -> float:
        """Add two numbers."""
        calls.append((a, b))
        return a + b

    model = agent(model=_demo.demo(), tools=[tool(add, thread=False)], name="calc", approve={"add"})
    return serve_agent(model, checkpoints=True)


async def _lost_while_asking(log: RedisEventLog, endpoint: AgentEndpoint) -> str:
    """A process runs "what is 2+3?" into ``log`` and dies once it asked to approve ``add``.

    Its log holds the response up to its ``interrupt.request`` (the checkpoint
    before it included); its record says the response runs there. Returns
    the last event's id (what the client saw last).
    """
    log.begin(KEY, SessionRecord(agent="calc"))
    request = TurnRequest(
        agent="calc", session_id=KEY[1], response_id="resp_1", messages=[QUESTION]
    )
    port = Interrupts().port(request)
    request = attrs.evolve(request, interrupts=port)
    ids = iter(range(1_000))
    last = ""

    async def sink(event: ev.Event) -> None:
        nonlocal last
        last = f"evt_{next(ids)}"
        log.append(KEY, encode(attrs.evolve(event, event_id=last, session_id=KEY[1])), last)
        await log.flush()
        if type(event) is ev.InterruptRequest:
            raise Lost  # killed while the person decides

    runner = ResponseRunner(endpoint, request, sink)
    port.emit = runner.emit
    with pytest.raises(Lost):
        await runner.run()
    # Its heartbeat never ran: the process the record names reads as gone.
    running = SessionRecord(agent="calc", running="resp_1", input=unstructure([QUESTION]))
    running.node = log.node
    log.put_record(KEY, running)
    await log.aclose()
    return last


class _LateReply(RedisEventLog):
    """A Redis log whose reply to one read of the record comes back late, once :attr:`armed`.

    The read is made while the continuation of this process still writes the
    log (the record says the response runs, here) and handed back only once
    the continuation has let go: its last write, that nothing runs, came
    between the read and its reply.
    """

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(url, prefix=prefix)
        self.armed = False
        #: Set when the late read has been made.
        self.reading = trio.Event()

    async def _load(self, key: LogKey) -> SessionRecord | None:
        record = await super()._load(key)
        if record is None or not self.armed or self.reading.is_set():
            return record
        if record.running is not None and record.node == self.node:
            self.reading.set()
            while self.writing(key):  # the continuation goes on meanwhile
                await trio.sleep(0.01)
        return record


def _terminal(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events if e["type"] in ("response.done", "response.error")]


async def test_a_continuation_that_lets_go_during_a_read_is_not_carried_on_again(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    calls: list[tuple[float, float]] = []
    endpoint = _calculator(calls)
    last = await _lost_while_asking(RedisEventLog(redis_url, prefix=prefix), endpoint)
    carried: list[str | None] = []
    carry_on = session_log.carry_on

    async def counted(*args: Any) -> None:
        carried.append(args[2].running)
        await carry_on(*args)

    monkeypatch.setattr(session_log, "carry_on", counted)
    log = _LateReply(redis_url, prefix)
    app = App([endpoint], stores=Stores(event_log=log))
    app.mount(uamp_ws.mount)
    url = "ws://127.0.0.1:{}/agents/calc/uamp"
    with trio.fail_after(TIMEOUT):
        async with wire.serving(app) as server, open_ws(url.format(server.port)) as ws:
            created = await resume_session(ws, KEY[1], last, client_capabilities=INTERRUPTS)
            assert created["extensions"] == {"resumed": True}
            asked = (await until(ws, "interrupt.request"))[-1]  # the carried-on run asks
            log.armed = True
            await log.reading.wait()  # a read of the record is on its way back
            answer = {"session_id": KEY[1], "interrupt_id": asked["interrupt_id"]}
            await send(ws, type="interrupt.answer", approved=True, **answer)
            rest = await until(ws, "response.done")
            # The session's next message is answered, with nothing of resp_1 first.
            await send(ws, type="interrupt.answer", approved=True, **answer)
            refused = await recv(ws)
            # The session is this connection's now: its next turn runs here.
            await wire.ask(ws, "what is 2+3?", session_id=KEY[1])
            again = await until(ws, "interrupt.request")
            answer["interrupt_id"] = again[-1]["interrupt_id"]
            await send(ws, type="interrupt.answer", approved=True, **answer)
            after = await until(ws, "response.done")
        entries = [decode(e.data) for e in await log.read(KEY, 0)]
        await log.aclose()
    assert log.reading.is_set()
    assert _terminal(rest) == ["response.done"] and rest[-1]["response_id"] == "resp_1"
    assert rest[-1]["response"]["output"][-1] == {"type": "text", "text": "2 + 3 = 5"}
    # Before: response.error interrupted for resp_1, carried on a second time.
    assert refused["type"] == "session.error", refused
    assert refused["error"]["code"] == "interrupt_not_found"
    assert carried == ["resp_1"]  # carried on once: by the process that found it lost
    assert _terminal(again + after) == ["response.done"]
    assert after[-1]["response_id"] != "resp_1"
    assert calls == [(2, 3), (2, 3)]  # once for resp_1 (after the loss), once for the next turn
    ends = [
        e.response_id
        for e in entries
        if isinstance(e, (ev.ResponseDone, ev.ResponseErrorEvent, ev.ResponseCancelled))
    ]
    assert ends.count("resp_1") == 1  # one end in the log too
