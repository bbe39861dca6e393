from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    def __init__(self, json: _Optional[bytes] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ("delta_seq", "stream_id", "ts", "type", "payload")
    DELTA_SEQ_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    delta_seq: int
    stream_id: str
    ts: str
    type: str
    payload: bytes
    def __init__(self, delta_seq: _Optional[int] = ..., stream_id: _Optional[str] = ..., ts: _Optional[str] = ..., type: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...
