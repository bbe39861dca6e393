"""An A2A agent that behaves as the A2A conformance kit's scenarios describe.

The A2A project tests its SDKs with an agent scripted by the *message id*:
a message whose ``messageId`` starts with ``tck-artifact-file`` makes the
agent answer with a file artifact, ``tck-input-required`` makes it ask for
more input, and so on (the kit's ``scenarios/*.feature``). This module is
that agent, written with uamp's public API only: a
:class:`~uamp_proto.responder.Responder` that emits UAMP events, using the
A2A helpers of :mod:`uamp_proto.adapters.a2a` where A2A says more than text
(artifacts with file and data parts, a direct message instead of a task)
and :class:`~uamp_proto.responder.ResponderError` codes to pause or refuse a
task. The A2A ids and metadata of the message are in
``request.metadata["a2a"]``.

Serve it (every transport, A2A's three bindings included)::

    cd examples && uamp serve --agent a2a_scenarios:agent

then point the conformance kit at ``http://127.0.0.1:8765`` (docs/a2a.md).
"""

from __future__ import annotations

import base64

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.a2a import artifact_delta, data_item, message_delta
from uamp_proto.responder import Emit, ResponderError, TurnRequest

#: How long the long-running scenario works (the kit waits 2 x its 2 s streaming timeout).
LONG_RUN = 4.0

_FILE = ty.FileContent(
    file=base64.b64encode(b"tck").decode(), filename="output.txt", mime_type="text/plain"
)
_FILE_URL = ty.FileContent(
    file=ty.MediaURL(url="https://example.com/output.txt"),
    filename="output.txt",
    mime_type="text/plain",
)


def _text(text: str) -> ty.TextContent:
    return ty.TextContent(text=text)


def _say(text: str) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=ty.DeltaText(text=text))


def _working(text: str) -> ev.Progress:
    return ev.Progress(target="response", stage="working", message=text)


#: message id prefix -> what the agent emits, in order (longest prefixes first).
SCRIPTS: list[tuple[str, list[ev.Event]]] = [
    (
        "tck-stream-artifact-chunked",
        [
            _working("Working"),
            artifact_delta([_text("chunk-1 ")], artifact_id="chunked", append=True),
            artifact_delta([_text("chunk-2")], artifact_id="chunked", append=True, last_chunk=True),
        ],
    ),
    (
        "tck-stream-artifact-text",
        [_working("Working"), artifact_delta([_text("Streamed text content")])],
    ),
    ("tck-stream-artifact-file", [_working("Working"), artifact_delta([_FILE])]),
    ("tck-stream-ordering-001", [_working("Working"), artifact_delta([_text("Ordered output")])]),
    ("tck-stream-001", [_working("Working"), artifact_delta([_text("Stream hello from TCK")])]),
    ("tck-stream-002", []),
    ("tck-stream-003", [_working("Working"), artifact_delta([_text("Stream task lifecycle")])]),
    ("tck-artifact-file-url", [artifact_delta([_FILE_URL])]),
    ("tck-artifact-text", [artifact_delta([_text("Generated text content")])]),
    ("tck-artifact-file", [artifact_delta([_FILE])]),
    ("tck-artifact-data", [artifact_delta([data_item({"key": "value", "count": 42})])]),
    ("tck-message-response", [message_delta([_text("Direct message response")])]),
    ("tck-complete-task", [_say("Hello from TCK")]),
]

#: message id prefix -> the ResponderError that ends the turn (a pause or a refusal).
ENDINGS: dict[str, ResponderError] = {
    "tck-input-required": ResponderError("input_required", "Please send more input."),
    "tck-auth-required": ResponderError("auth_required", "Please authorize: sign in first."),
    "tck-reject-task": ResponderError("rejected", "rejected"),
}


class ScenarioAgent:
    """The conformance kit's scripted agent (see the module docstring)."""

    name = "a2a-scenarios"
    description = "Behaves as the A2A conformance kit's scenarios describe, by message id."

    def capabilities(self) -> ty.Capabilities:
        """Text and files in and out; streams."""
        return ty.Capabilities(
            id=self.name,
            provider="uamp examples",
            modalities=["text", "file"],
            supports_streaming=True,
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Play the script the message id names; otherwise echo the message id."""
        message_id = str(request.metadata.get("a2a", {}).get("messageId", ""))
        for prefix, error in ENDINGS.items():
            if message_id.startswith(prefix):
                raise error
        if message_id.startswith("test-resubscribe-message-id"):
            await emit(_working("Working on it"))
            await trio.sleep(LONG_RUN)
            return
        for prefix, events in SCRIPTS:
            if message_id.startswith(prefix):
                for event in events:
                    await emit(event)
                return
        await emit(_say(f"Unhandled messageId prefix: {message_id}"))


agent = ScenarioAgent()
