"""One response as a UAMP client sees it: its events, its result, and the errors it raises.

:class:`ResponseStream` is what :meth:`ClientSession.respond
<uamp_trio.client.session.ClientSession.respond>` returns: iterating it sends
the turn, then yields the response's events up to its terminal one, gathering
the text, thinking and client tool calls into a :class:`ResponseResult` (a
signature checked against the session's JWKS when ``verify=`` was given,
:class:`SignatureVerificationError` when it does not verify).
:class:`ClientError` is what every client raises for a refusal the server
sent or a link that ended. The session hands the stream its events
(``ClientSession._receive``) and takes its turn back when it ends. Every
public name here also imports from :mod:`uamp_trio.client.session`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.errors import UampError
from uamp_proto.saved_response import SavedResponse
from uamp_proto.signing import JWKS, Reason, SignatureError, verify_response_signature

if TYPE_CHECKING:
    from .session import ClientSession

__all__ = ["ClientError", "ResponseResult", "ResponseStream", "SignatureVerificationError"]

_TERMINAL: Final = frozenset({"response.done", "response.cancelled", "response.error"})


class ClientError(UampError):
    """An error the server reported (``session.error`` / ``response.error``) or a closed link.

    Attributes:
        code: The UAMP error code (``agent_offline``, ``invalid_event`` ...).
        message: The server's message.
        event: The error event, when there is one.
        reason: The server's more precise code (``details.reason``, e.g.
            ``agent_not_found`` beside ``agent_offline``), or ``None``.
    """

    def __init__(
        self, code: str, message: str, event: ev.Event | None = None, *, details: Any = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.event = event
        if details is None:
            details = getattr(getattr(event, "error", None), "details", None)
        reason = details.get("reason") if isinstance(details, dict) else None
        self.reason: str | None = reason if isinstance(reason, str) else None


class SignatureVerificationError(ClientError):
    """A response's signature is missing or does not verify (``verify=`` was given).

    Attributes:
        reason: Why (:class:`~uamp_proto.signing.Reason`: ``unsigned``,
            ``tampered``, ``bad_signature``, ``unknown_kid``...).
        result: The response as received.
    """

    def __init__(self, error: SignatureError, result: ResponseResult) -> None:
        super().__init__("bad_signature", f"response signature refused: {error}")
        self.reason = error.reason
        self.result = result


@attrs.frozen(kw_only=True)
class ResponseResult:
    """What one response produced.

    Attributes:
        response_id: The response id.
        status: ``completed``, ``cancelled`` or ``failed``.
        text: The text deltas joined.
        thinking: The thinking content joined.
        output: The final output items (``response.done``) or the partial
            output (``response.cancelled``).
        usage: The usage of ``response.done``, if any.
        tool_calls: The client tool calls the server asked for.
        error: The error of a failed response.
        signature: ``response.done``'s ``signature``, if it carried one.
        request: The bytes that carried ``response.create`` (what a
            signature covers).
        verified: Whether the signature was checked and verified.
    """

    response_id: str | None
    status: str
    text: str
    thinking: str = ""
    output: list[ty.ContentItem] = attrs.field(factory=list)
    usage: ty.UsageStats | None = None
    tool_calls: list[ty.ToolInvocation] = attrs.field(factory=list)
    error: ty.ErrorInfo | None = None
    signature: str | None = None
    request: bytes | None = None
    verified: bool = False

    def saved(self) -> SavedResponse:
        """What ``uamp verify`` checks: text, signature and request bytes."""
        return SavedResponse(
            text=self.text, signature=self.signature, request=self.request, transport="uamp"
        )


class _End:
    """Put on a session's channel when the session or the link ends."""

    def __init__(self, error: ClientError) -> None:
        self.error = error


class ResponseStream:
    """The events of one response, as an async iterator.

    Iterating sends the input and ``response.create`` first, then yields
    every event of the response up to and including its terminal event
    (``response.done``, ``response.cancelled`` or ``response.error``).
    :attr:`result` is set once it ended.

    Raises (while iterating):
        ClientError: The server refused the request (``session.error`` before
            ``response.created``, e.g. ``response_in_progress``), or the
            session or connection ended.
        SignatureVerificationError: With ``verify=``, instead of a
            ``response.done`` whose signature is missing or bad.
    """

    def __init__(self, session: ClientSession, start: list[ev.Event]) -> None:
        self._session = session
        self._start = start
        self._started = False
        self._finished = False
        self._created = False
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: list[ty.ToolInvocation] = []
        self._request: bytes | None = None
        #: The response id, once ``response.created`` arrived.
        self.response_id: str | None = None
        #: The outcome, once the terminal event arrived.
        self.result: ResponseResult | None = None

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> ev.Event:
        if self._finished:
            raise StopAsyncIteration
        session = self._session
        if not self._started:
            self._started = True
            await session._claim(self)
            self._request = await session.send(*self._start)
        item = await session._receive()
        if isinstance(item, _End):
            self._finish()
            raise item.error
        event = item
        etype = event.type
        if etype == "session.error" and not self._created:
            self._finish()
            assert isinstance(event, ev.SessionErrorEvent)
            raise ClientError(event.error.code, event.error.message, event)
        if etype == "response.created":
            self._created = True
            self.response_id = getattr(event, "response_id", None)
        elif etype == "response.delta":
            delta = event.delta  # type: ignore[attr-defined]
            if isinstance(delta, ty.DeltaText):
                self._text.append(delta.text)
        elif etype == "thinking":
            self._thinking.append(event.content)  # type: ignore[attr-defined]
        elif etype == "tool.call":
            assert isinstance(event, ev.ToolCall)
            self._calls.append(
                ty.ToolInvocation(id=event.call_id, name=event.name, arguments=event.arguments)
            )
        elif etype in _TERMINAL:
            self._conclude(event)
        return event

    def _conclude(self, event: ev.Event) -> None:
        output: list[ty.ContentItem] = []
        usage = None
        error = None
        signature = None
        if isinstance(event, ev.ResponseDone):
            status, output, usage = "completed", list(event.response.output), event.response.usage
            signature = event.signature
        elif isinstance(event, ev.ResponseCancelled):
            status, output = "cancelled", list(event.partial_output or [])
        else:
            assert isinstance(event, ev.ResponseErrorEvent)
            status, error = "failed", event.error
        self.result = ResponseResult(
            response_id=getattr(event, "response_id", None) or self.response_id,
            status=status,
            text="".join(self._text),
            thinking="".join(self._thinking),
            output=output,
            usage=usage,
            tool_calls=list(self._calls),
            error=error,
            signature=signature,
            request=self._request,
        )
        self._finish()
        jwks = self._session._jwks
        if jwks is not None and status == "completed":
            self.result = self._verify(self.result, jwks)

    @staticmethod
    def _verify(result: ResponseResult, jwks: JWKS) -> ResponseResult:
        """``result`` marked verified, or :class:`SignatureVerificationError`."""
        try:
            if result.signature is None:
                raise SignatureError(Reason.UNSIGNED, "response.done carries no signature")
            verify_response_signature(result.signature, result.text, result.request or b"", jwks)
        except SignatureError as exc:
            raise SignatureVerificationError(exc, result) from None
        return attrs.evolve(result, verified=True)

    def _finish(self) -> None:
        self._finished = True
        self._session._turn = None
        self._session._release(self)

    async def collect(self) -> ResponseResult:
        """Consume the rest of the response and return its result."""
        async for _ in self:
            pass
        assert self.result is not None
        return self.result
