"""Exchanges across processes: one store shared by several servers (Redis), each
exchange run by the process that opened it.

With a shared store (``uamp serve --workers N``, or several servers on one
Redis) every accepted envelope id is claimed in the store under its sender
(:func:`replay_key`), so a replay is refused in every process, and each
exchange is registered under its caller's key (:func:`exchange_key`) with
the process that runs it as owner. Another process reaches it through the
store's inbox messages: a :class:`RemoteExchange` asks the owner, whose
service answers with :func:`answer_request` -- an ack frame applied (``ack``), a
``progress`` envelope applied (``progress``, which tells what it left:
:class:`RemoteAck`), or the next frames after a ``delta_seq`` (``frames``:
long polling, the owner waits up to a second for new ones). A refusal
travels as its section 9 code and message and is raised again on the
asking side.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from uamp_proto.adapters.envelope import BAD_REQUEST, NOT_FOUND, EnvelopeRefused
from uamp_proto.envelope import ERROR_CODES, Delta, ErrorCode, ExchangeState, encode_delta
from uamp_proto.principal import Principal
from uamp_stores.event_log import EventLog, LogKey

from .exchange import Exchange

if TYPE_CHECKING:
    from .service import EnvelopeService

__all__ = ["RemoteAck", "RemoteExchange", "answer_request", "exchange_key", "replay_key"]

#: Seconds the owner of an exchange waits for new frames for another process.
_REMOTE_WAIT: Final = 1.0

#: Every code an answer from another process may carry.
_CODES: Final[Mapping[str, ErrorCode]] = {**ERROR_CODES, "4.00": BAD_REQUEST, "4.04": NOT_FOUND}


def replay_key(principal: Principal, envelope_id: str) -> LogKey:
    """An envelope id taken in a shared store: per sender, as in the local memory."""
    return (principal.key, "replay:" + envelope_id)


def exchange_key(principal: Principal, exchange_id: str) -> LogKey:
    """The exchange's name in a shared store: only its owner's key finds it."""
    return (principal.key, "envelope:" + exchange_id)


async def answer_request(
    service: EnvelopeService, exchange: Exchange, principal: Principal, message: dict[str, Any]
) -> dict[str, Any]:
    """Another process's stream request for ``exchange``: an ack, or the next frames."""
    try:
        if exchange.agent not in message.get("agents", ()):
            raise EnvelopeRefused(NOT_FOUND, f"no exchange {exchange.id!r}")
        if message.get("op") == "ack":
            service.acknowledge(exchange, str(message["body"]).encode(), principal)
            return {"ok": True}
        if message.get("op") == "progress":
            stream_id, update = message.get("stream_id"), message.get("update")
            service.progress(
                exchange,
                int(message["seq"]),
                stream_id if isinstance(stream_id, str) else None,
                {str(k): str(v) for k, v in update.items()} if isinstance(update, dict) else None,
            )
            return {
                "id": exchange.id,
                "stream_id": exchange.stream_id,
                "state": exchange.state.value,
            }
        after = int(message["after"])
        alias = message.get("alias")
        if isinstance(alias, str):
            exchange.alias(alias)
        sent: list[Delta] = []
        with trio.move_on_after(_REMOTE_WAIT):
            async for batch in exchange.batches(after):
                sent = batch
                break
        last = sent[-1].delta_seq if sent else after
        return {
            "frames": [encode_delta(d, stream_id=alias).decode() for d in sent],
            "seqs": [d.delta_seq for d in sent],
            "last": last,
            "end": exchange.finished and last >= exchange.window.next_seq - 1,
        }
    except EnvelopeRefused as refused:
        return {"error": [refused.code, refused.message]}


@attrs.frozen
class RemoteAck:
    """The exchange another process runs, as a ``progress`` envelope acknowledging it left it."""

    id: str
    stream_id: str
    state: ExchangeState


class RemoteExchange:
    """An exchange another process runs, reached through the shared store's messages.

    The owner answers each request: an ack is applied there, and the frames
    come in batches (long polling: it waits up to a second for new ones).
    """

    def __init__(self, store: EventLog, node: str, key: LogKey) -> None:
        self.store = store
        self.node = node
        self.key = key

    async def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        answer = await self.store.ask(self.node, self.key, message)
        if answer is None:
            raise EnvelopeRefused(
                NOT_FOUND, f"no exchange {self.key[1].removeprefix('envelope:')!r}"
            )
        error = answer.get("error")
        if error is not None:
            code, text = error
            raise EnvelopeRefused(_CODES.get(code, BAD_REQUEST), str(text))
        return answer

    async def progress(
        self,
        seq: int,
        stream_id: str | None,
        update: dict[str, str] | None,
        agents: Sequence[str],
    ) -> RemoteAck:
        """Apply a ``progress`` envelope's ack (and update) at the owner.

        Raises:
            EnvelopeRefused: As the owner's own ``progress`` handling.
        """
        answer = await self._ask(
            {
                "op": "progress",
                "seq": seq,
                "stream_id": stream_id,
                "update": update,
                "agents": list(agents),
            }
        )
        return RemoteAck(
            id=str(answer["id"]),
            stream_id=str(answer["stream_id"]),
            state=ExchangeState(answer["state"]),
        )

    async def acknowledge(self, body: bytes, agents: Sequence[str]) -> None:
        """Apply an ack frame at the owner.

        Raises:
            EnvelopeRefused: As :meth:`EnvelopeService.acknowledge`.
        """
        await self._ask(
            {"op": "ack", "body": body.decode("utf-8", "replace"), "agents": list(agents)}
        )

    async def frames(
        self, after: int, agents: Sequence[str], alias: str | None = None
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        """``(delta_seq, frame JSON)`` batches after ``after``, until the final frame."""
        while True:
            answer = await self._ask(
                {"op": "frames", "after": after, "agents": list(agents), "alias": alias}
            )
            frames = [str(f).encode() for f in answer["frames"]]
            if frames:
                yield [(int(seq), f) for seq, f in zip(answer["seqs"], frames, strict=True)]
            after = int(answer["last"])
            if answer["end"]:
                return
