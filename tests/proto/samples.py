"""A minimal valid instance of every event type, for table-driven tests."""

from __future__ import annotations

from typing import Any

import orjson

from uamp_proto import decode
from uamp_proto import events as ev

_CAPS = {"id": "m", "provider": "p", "modalities": ["text"]}

MINIMAL: dict[str, dict[str, Any]] = {
    "session.create": {"uamp_version": "1.0", "session": {"modalities": ["text"]}},
    "session.update": {},
    "session.end": {},
    "capabilities.query": {},
    "client.capabilities": {"capabilities": _CAPS},
    "input.text": {"text": "hi"},
    "input.audio": {"audio": "AAAA", "format": "pcm16"},
    "input.image": {"image": {"url": "https://example.com/a.png"}},
    "input.video": {"video": {"url": "https://example.com/a.mp4"}},
    "input.file": {"file": "AAAA", "filename": "a.txt", "mime_type": "text/plain"},
    "input.typing": {"is_typing": True},
    "response.create": {},
    "response.cancel": {},
    "tool.result": {"call_id": "call_1", "result": "{}"},
    "interrupt.answer": {"interrupt_id": "int_1", "approved": True},
    "payment.submit": {"payment": {"scheme": "token", "token": "tok"}},
    "voice.invite": {},
    "voice.accept": {},
    "voice.decline": {},
    "voice.end": {},
    "ping": {},
    "message.read": {},
    "session.created": {"uamp_version": "1.0", "session": {"id": "s", "status": "active"}},
    "session.updated": {},
    "session.error": {"error": {"code": "timeout", "message": "m"}},
    "capabilities": {"capabilities": _CAPS},
    "response.created": {"response_id": "resp_x"},
    "response.delta": {"delta": {"type": "text", "text": "t"}},
    "response.done": {"response": {"status": "completed", "output": []}},
    "response.error": {"error": {"code": "c", "message": "m"}},
    "response.cancelled": {},
    "tool.call": {"call_id": "call_1", "name": "f", "arguments": "{}"},
    "tool.call_done": {"call_id": "call_1"},
    "interrupt.request": {"interrupt_id": "int_1", "kind": "approval", "prompt": "Run add?"},
    "interrupt.resolved": {"interrupt_id": "int_1", "outcome": "approved"},
    "progress": {"target": "tool"},
    "thinking": {"content": "hmm"},
    "audio.delta": {"audio": "AAAA"},
    "audio.done": {},
    "transcript.delta": {"transcript": "t"},
    "transcript.done": {},
    "usage.delta": {"delta": {"output_tokens": 1}},
    "rate_limit": {},
    "presence.typing": {"is_typing": True},
    "presence.online": {},
    "presence.offline": {},
    "message.created": {},
    "payment.required": {"requirements": {"amount": "1.00"}},
    "payment.accepted": {},
    "payment.balance": {},
    "payment.error": {"code": "token_invalid", "message": "m"},
    "pong": {},
    "system.error": {},
    "system.stop": {},
    "system.cancel": {},
    "system.ping": {},
    "system.pong": {},
    "system.unroutable": {},
}

assert set(MINIMAL) == set(ev.EVENT_TYPES), set(ev.EVENT_TYPES) ^ set(MINIMAL)


def sample(event_type: str, **fields: Any) -> ev.Event:
    """A valid event of ``event_type`` with ``fields`` overriding the minimum."""
    event = decode(orjson.dumps({"type": event_type, **MINIMAL[event_type], **fields}))
    assert isinstance(event, ev.Event)
    return event
