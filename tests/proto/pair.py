"""A client and a server connection wired back to back, for the connection tests."""

from __future__ import annotations

from typing import Any

from uamp_proto import events as ev
from uamp_proto.connection import NEED_DATA, ClientConnection, ConnectionConfig, ServerConnection
from uamp_proto.ids import counter_ids


class Pair:
    """A client and a server wired back to back in memory."""

    def __init__(self, **client_options: Any) -> None:
        self.client = ClientConnection(ConnectionConfig(ids=counter_ids(1000), **client_options))
        self.server = ServerConnection(ConnectionConfig(ids=counter_ids(1)))

    def to_server(self, data: bytes) -> ev.Event:
        self.server.receive(data)
        event = self.server.next_event()
        assert event is not NEED_DATA
        self.flush_server()
        return event  # type: ignore[return-value]

    def to_client(self, data: bytes) -> ev.Event:
        self.client.receive(data)
        event = self.client.next_event()
        assert event is not NEED_DATA
        for owed in self.client.data_to_send():
            self.to_server(owed)
        return event  # type: ignore[return-value]

    def flush_server(self) -> list[ev.Event]:
        got = []
        for owed in self.server.data_to_send():
            self.client.receive(owed)
            got.append(self.client.next_event())
        return got  # type: ignore[return-value]

    def client_sends(self, event: ev.Event) -> ev.Event:
        return self.to_server(self.client.send(event))

    def server_sends(self, event: ev.Event) -> ev.Event:
        return self.to_client(self.server.send(event))

    def open(self, **fields: Any) -> str:
        created = self.to_server(self.client.create_session(**fields))
        assert isinstance(created, ev.SessionCreate)
        sid = created.session_id
        assert sid is not None
        self.to_client(self.server.accept(sid))
        return sid

    def start_response(self, sid: str | None = None, text: str = "hi") -> str:
        self.client_sends(ev.InputText(session_id=sid, text=text))
        self.client_sends(ev.ResponseCreate(session_id=sid))
        tracker = self.server.session(sid).response
        assert tracker is not None
        self.server_sends(ev.ResponseCreated(session_id=sid, response_id=tracker.response_id))
        return tracker.response_id
