"""Several relay processes on one Redis: a client of any of them reaches a daemon on another.

Theory of operation
-------------------
With ``uamp serve --relay --store redis://...`` the relay processes of a
deployment share the Redis of the :class:`~uamp_stores.event_log_redis.RedisEventLog`
(the UAMP sessions' logs, docs/resume.md). A daemon's socket lives in one
process, its *owner*; the others reach its agents through that Redis, using
the store's process id (``node``), heartbeat (``alive``) and per-process
inbox (:meth:`~uamp_stores.event_log.EventLog.ask`):

*Routes.* The owner writes each agent its daemons serve into the hash
``{prefix}:relay:agents`` (field: the name; value: JSON ``{"node", "online",
"capabilities"}``) when a daemon registers it or declares capabilities, and
sets ``online`` false when the daemon goes -- only while the field still
names this process, so a newer registration elsewhere wins. Every process
reads the hash every :data:`POLL` seconds and mirrors it into its registry
(:meth:`Relay.route <uamp_trio.relay.platform.Relay.route>`): a name another
live process serves becomes a :class:`~uamp_trio.relay.platform.RemoteAgent`
whose link is a :class:`PeerLink` to that process; a name whose daemon left,
or whose owner stopped beating, is offline (503 ``agent_offline``). So
``GET /agents`` lists the same agents in the same states on every process,
one poll later at most.

*Turns.* :meth:`PeerLink.run_turn` asks the owner to start the turn with
the ``input.text`` this process built (the conversation, the client's tools,
the caller), then reads the turn's events from the stream
``{prefix}:relay:out:TURN`` with blocking ``XREAD`` s and emits them to its
client. The owner runs the turn on its daemon's link as for a client of its
own (:meth:`DaemonLink.run_turn <uamp_trio.relay.platform.DaemonLink.run_turn>`
with the forwarded ``input.text``); an :class:`_OwnedTurn` writes what the
link emits to the stream in order, one pipeline per round, then one end
entry (done, or the error's code and message). The client's cancel (its
turn's task cancelled here) is a ``cancel`` message to the owner, whose
link then sends ``response.cancel`` to the daemon. A mid-stream
``payment.required`` parks the owner's turn until this process sends the
token the client paid with (``paid``). An owner that stops beating fails the
turn here with ``interrupted`` (its daemon reconnects, through the load
balancer, to a live process; until it has, the name is ``agent_offline``).

*Take-over.* A daemon that registers a name here while another process
serves it replaces that registration, as within one process: the other
process is told (``replaced``), ends the older daemon's registration
(``session.end`` ``replaced``) and routes the name here.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any, Final, TypeVar

import orjson
import trio

from uamp_proto import codec
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import DecodeError, from_dict, unstructure
from uamp_proto.relay import turn_input, turn_request
from uamp_proto.responder import PAID_TOKEN, Emit, ResponderError, TurnRequest
from uamp_proto.resume import INTERRUPTED
from uamp_stores._redis import open_redis, redis_where
from uamp_stores.event_log import LogKey
from uamp_stores.event_log_redis import RedisEventLog
from uamp_stores.health import STORE_TIMEOUT, StoreHealth, call_store

from ..hosting.agents import AGENT_OFFLINE
from .platform import DaemonLink, Link, Relay, RemoteAgent

__all__ = ["POLL", "PeerLink", "SharedRoutes"]

log = logging.getLogger("uamp_trio.relay")

T = TypeVar("T")

#: Seconds between two reads of the shared routes.
POLL: Final = 0.25
#: Whom the relay's messages go to in a process's inbox.
RELAY_KEY: Final[LogKey] = (("relay", "relay"), "turns")
#: How long a turn's event stream outlives its last entry.
OUT_TTL_MS: Final = 60_000
#: Events one ``XREAD`` takes at most.
READ_BATCH: Final = 512
#: Events of one turn the owner buffers before the link's ``emit`` waits.
MAX_PENDING: Final = 1024
#: Seconds a cancel message waits for the owner.
CANCEL_TIMEOUT: Final = 2.0

# Sets the route offline, but only while it still names this process.
_WITHDRAW: Final = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and cjson.decode(v)['node'] == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 0
"""


class PeerLink:
    """Serves a name whose daemon is connected to another relay process (see the module docstring).

    Args:
        shared: This process's shared routes.
        node: The owner's process id.
        name: The agent.
    """

    def __init__(self, shared: SharedRoutes, node: str, name: str) -> None:
        self.shared = shared
        self.node = node
        self.name = name

    async def run_turn(self, request: TurnRequest, emit: Emit) -> None:
        """Run ``request`` on the owner's daemon; its events go to ``emit``.

        Raises:
            ResponderError: ``agent_offline`` (the owner or its daemon is
                gone), ``interrupted`` (the owner stopped mid-turn), or the
                turn's own error.
        """
        shared = self.shared
        turn = "rly_" + uuid.uuid4().hex
        start = codec.to_dict(turn_input(request, turn))
        answer = await shared.tell(
            self.node, {"op": "turn", "turn": turn, "agent": self.name, "input": start}
        )
        if answer is None:
            raise ResponderError(AGENT_OFFLINE, "The relay process serving the agent is gone.")
        if answer.get("code") is not None:
            raise ResponderError(str(answer["code"]), str(answer.get("message", "")))
        finished = False
        last: bytes | str = "0-0"
        try:
            while True:
                last, rows = await shared.read(turn, self.node, last)
                for fields in rows:
                    data = fields.get(b"e")
                    if data is None:
                        finished = True
                        end = orjson.loads(fields[b"end"])
                        if end["code"] is None:
                            return
                        raise ResponderError(end["code"], end["message"], end.get("details"))
                    event = codec.decode(data)
                    if not isinstance(event, ev.Event):
                        continue
                    await emit(event)
                    if type(event) is ev.PaymentRequired:  # paid: the owner's turn goes on
                        token = request.metadata.get(PAID_TOKEN, request.payment_token)
                        await shared.tell(self.node, {"op": "paid", "turn": turn, "token": token})
        finally:
            if not finished:
                with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_TIMEOUT):
                    await shared.tell(self.node, {"op": "cancel", "turn": turn}, CANCEL_TIMEOUT)


class _OwnedTurn:
    """A turn the owner runs for another process: what its link emits goes to the stream."""

    def __init__(self, shared: SharedRoutes, turn: str, request: TurnRequest) -> None:
        self.shared = shared
        self.turn = turn
        self.request = request
        self.scope = trio.CancelScope()
        self.pending: list[bytes] = []
        self.end: bytes | None = None
        self.wake = trio.Event()
        self.room = trio.lowlevel.ParkingLot()
        self.paid: trio.Event | None = None

    async def emit(self, event: ev.Event) -> None:
        """Queue ``event`` for the stream; a ``payment.required`` waits for the client's payment."""
        while len(self.pending) >= MAX_PENDING:
            await self.room.park()
        self._put(codec.encode(event))
        if type(event) is ev.PaymentRequired:
            self.paid = paid = trio.Event()
            await paid.wait()

    def pay(self, token: str | None) -> None:
        """The client paid the open ``payment.required`` with ``token``."""
        if token is not None:
            self.request.metadata[PAID_TOKEN] = token
        if self.paid is not None:
            self.paid.set()
            self.paid = None

    def finish(self, code: str | None, message: str = "", details: Any = None) -> None:
        """The turn ended (``code`` ``None``: done)."""
        self.end = orjson.dumps({"code": code, "message": message, "details": details})
        self.wake.set()

    def _put(self, data: bytes) -> None:
        self.pending.append(data)
        self.wake.set()

    async def write(self) -> None:
        """Write what was queued, one pipeline per round, until the end entry is written."""
        shared = self.shared
        key = shared.out_key(self.turn)
        while True:
            await self.wake.wait()
            self.wake = trio.Event()
            batch, self.pending, end = self.pending, [], self.end
            if self.room:
                self.room.unpark_all()
            await shared.call(functools.partial(shared.append, key, batch, end))
            if end is not None:
                return


class SharedRoutes:
    """The relay routes of one process, shared through Redis (see the module docstring).

    Args:
        relay: This process's relay (its :attr:`~uamp_trio.relay.platform.Relay.shared` is set).
        store: The Redis event log the processes share.
        poll: Seconds between two reads of the routes.
    """

    def __init__(self, relay: Relay, store: RedisEventLog, *, poll: float = POLL) -> None:
        self.relay = relay
        self.store = store
        self.poll = poll
        self.node = store.node
        # Typed loosely: redis-py's stubs union every reply shape.
        self._redis: Any = open_redis(store.url)
        #: Whether reading or writing the shared routes fails now (logged once per outage).
        self.health = StoreHealth("the relay's shared routes")
        self._routes = f"{store.prefix}:relay:agents"
        self._writes: dict[str, bytes | None] = {}
        self._dirty = trio.Event()
        self._turns: dict[str, _OwnedTurn] = {}
        self._seen: dict[str, tuple[bytes, ty.Capabilities | None]] = {}
        self._nursery: trio.Nursery | None = None
        relay.shared = self

    def out_key(self, turn: str) -> str:
        """The stream a turn's events go to."""
        return f"{self.store.prefix}:relay:out:{turn}"

    async def call(self, fn: Callable[..., T], *args: Any, timeout: float = STORE_TIMEOUT) -> T:
        """``fn(*args)`` in a worker thread (redis-py's client blocks), within ``timeout`` s."""
        return await call_store(fn, *args, where=redis_where(self.store.url), timeout=timeout)

    async def tell(
        self, node: str, message: dict[str, Any], timeout: float = 10.0
    ) -> dict[str, Any] | None:
        """The relay of process ``node`` 's answer to ``message`` (``None``: nobody answered)."""
        return await self.store.ask(node, RELAY_KEY, message, timeout)

    # --- what this process serves --------------------------------------------------

    def publish(self, name: str, agent: RemoteAgent) -> None:
        """A daemon here serves ``name`` (or declared capabilities); written by :meth:`run`."""
        caps = unstructure(agent.declared) if agent.declared is not None else None
        self._writes[name] = orjson.dumps({"node": self.node, "online": True, "capabilities": caps})
        self._dirty.set()

    def withdraw(self, name: str) -> None:
        """No daemon here serves ``name`` any more; written by :meth:`run`."""
        self._writes[name] = None
        self._dirty.set()

    def replace(self, name: str, link: Link) -> None:
        """A daemon here took ``name`` over from another process: that one is told."""
        if isinstance(link, PeerLink) and self._nursery is not None:
            message = {"op": "replaced", "agent": name, "node": self.node}
            self._nursery.start_soon(self.tell, link.node, message)

    def _write_routes(self, writes: dict[str, bytes | None]) -> None:
        pipe = self._redis.pipeline(transaction=False)
        offline = orjson.dumps({"node": self.node, "online": False, "capabilities": None})
        for name, value in writes.items():
            if value is None:
                pipe.eval(_WITHDRAW, 1, self._routes, name, self.node, offline)
            else:
                pipe.hset(self._routes, name, value)
        pipe.execute()

    def append(self, key: str, batch: list[bytes], end: bytes | None) -> None:
        """Append a turn's events (and its end entry) to its stream, in one pipeline."""
        pipe = self._redis.pipeline(transaction=False)
        command = pipe.execute_command
        for data in batch:
            command("XADD", key, "*", "e", data)
        if end is not None:
            command("XADD", key, "*", "end", end)
        pipe.pexpire(key, OUT_TTL_MS)
        pipe.execute()

    async def _write_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            writes, self._writes = self._writes, {}
            try:
                await self.call(self._write_routes, writes)
            except Exception as exc:  # Redis away: try again with the next change
                self._failed(exc)
                for name, value in writes.items():
                    self._writes.setdefault(name, value)
                await trio.sleep(self.poll)
                self._dirty.set()

    # --- what the other processes serve ----------------------------------------------

    async def mirror(self) -> None:
        """Read the routes once and mirror them into this process's registry."""
        rows: dict[bytes, bytes] = await self.call(self._redis.hgetall, self._routes)
        alive: dict[str, bool] = {}
        for field, value in rows.items():
            name = field.decode()
            entry = orjson.loads(value)
            node = entry.get("node")
            if not isinstance(node, str) or node == self.node:
                continue
            online = bool(entry.get("online"))
            if online:
                if node not in alive:
                    alive[node] = await self.store.alive(node)
                online = alive[node]
            seen = self._seen.get(name)
            if seen is None or seen[0] != value:
                caps = entry.get("capabilities")
                seen = (value, from_dict(ty.Capabilities, caps) if caps else None)
                self._seen[name] = seen
            self.relay.route(name, self._peer(name, node) if online else None, seen[1])

    def _peer(self, name: str, node: str) -> PeerLink:
        agent = self.relay.agents.get(name)
        link = agent.link if agent is not None else None
        if isinstance(link, PeerLink) and link.node == node:
            return link
        return PeerLink(self, node, name)

    # --- turns other processes ask this one to run -------------------------------------

    async def _answer(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        turn = self._turns.get(str(message.get("turn")))
        if op == "turn":
            return self._start(message)
        if op == "cancel" and turn is not None:
            turn.scope.cancel()
        elif op == "paid" and turn is not None:
            token = message.get("token")
            turn.pay(token if isinstance(token, str) else None)
        elif op == "replaced":
            self._replaced(str(message.get("agent")), str(message.get("node")))
        return {}

    def _start(self, message: dict[str, Any]) -> dict[str, Any]:
        name, turn_id = str(message.get("agent")), str(message.get("turn"))
        agent = self.relay.agents.get(name)
        link = agent.link if agent is not None else None
        if not isinstance(link, DaemonLink) or self._nursery is None:
            return {"code": AGENT_OFFLINE, "message": "The agent's daemon is not connected."}
        try:
            forwarded = codec.decode_object(message.get("input"))
            if not isinstance(forwarded, ev.InputText):
                raise DecodeError("a turn starts with input.text")
            proposed = forwarded.unknown.get("response_id")
            response_id = proposed if isinstance(proposed, str) else "resp_" + uuid.uuid4().hex
            request = turn_request(forwarded, name, response_id)
        except DecodeError as exc:
            return {"code": "invalid_event", "message": str(exc)}
        turn = self._turns[turn_id] = _OwnedTurn(self, turn_id, request)
        self._nursery.start_soon(self._run_turn, turn, link, forwarded)
        return {}

    async def _run_turn(self, turn: _OwnedTurn, link: DaemonLink, forwarded: ev.InputText) -> None:
        try:
            with turn.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(turn.write)
                    try:
                        await link.run_turn(turn.request, turn.emit, forwarded)
                        turn.finish(None)
                    except ResponderError as exc:
                        turn.finish(exc.code, exc.message, exc.details)
        except Exception as exc:  # Redis away: the asker sees the owner's silence
            log.warning("relay: a turn for another process failed: %s", exc)
        finally:
            del self._turns[turn.turn]

    def _replaced(self, name: str, node: str) -> None:
        agent = self.relay.agents.get(name)
        if agent is None:
            return
        link, sid = agent.link, agent.registration
        if isinstance(link, DaemonLink) and sid is not None:
            agent.link = agent.registration = None
            self.relay.end_registration(link, sid, name)
        self.relay.route(name, self._peer(name, node), None)

    # --- running ---------------------------------------------------------------------

    async def read(
        self, turn: str, node: str, last: bytes | str
    ) -> tuple[bytes | str, list[dict[bytes, bytes]]]:
        """The fields of the entries of ``turn`` 's stream after ``last``, and the new ``last``.

        Waits for at least one entry.

        Raises:
            ResponderError: ``interrupted`` once ``node`` stops beating.
        """
        key = self.out_key(turn)
        while True:
            read = functools.partial(self._redis.xread, {key: last}, count=READ_BATCH, block=1000)
            found = await self.call(read)
            if found:
                rows = found[0][1]
                return rows[-1][0], [fields for _, fields in rows]
            if not await self.store.alive(node):
                raise ResponderError(
                    INTERRUPTED, "The relay process running this turn stopped before it finished."
                )

    def _failed(self, exc: Exception) -> None:
        """Redis did not answer: one warning per outage, each failure at debug level."""
        if not self.health.down:
            self.health.failed(exc)
        log.debug("relay: the shared routes failed: %s", exc)

    async def run(self) -> None:
        """Serve the shared routes until cancelled (an app service, see :attr:`Host.services`)."""
        self.store.register(RELAY_KEY, self._answer)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.store.ensure_running(nursery)
                nursery.start_soon(self._write_loop)
                while True:
                    try:
                        await self.mirror()
                    except Exception as exc:  # Redis away: the routes stay as they were
                        self._failed(exc)
                    else:
                        self.health.ok()
                    await trio.sleep(self.poll)
        finally:
            self._nursery = None
            self.store.unregister(RELAY_KEY, self._answer)
