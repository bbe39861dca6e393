"""JSON-RPC 2.0 messages and NDJSON framing, table-driven."""

from __future__ import annotations

import orjson
import pytest

from uamp_proto import jsonrpc as rpc

VALID = [
    ('{"jsonrpc":"2.0","id":1,"method":"m"}', rpc.Request(id=1, method="m")),
    (
        '{"jsonrpc":"2.0","id":"a","method":"m","params":{"x":1}}',
        rpc.Request(id="a", method="m", params={"x": 1}),
    ),
    ('{"jsonrpc":"2.0","method":"n","params":[1]}', rpc.Notification(method="n", params=[1])),
    ('{"jsonrpc":"2.0","id":3,"result":null}', rpc.Response(id=3, result=None)),
    (
        '{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"x"}}',
        rpc.ErrorResponse(id=None, error={"code": -1, "message": "x"}),
    ),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_messages_round_trip(text: str, expected: rpc.Message) -> None:
    batch = rpc.decode(text)
    assert batch.is_batch is False
    assert batch.items == [expected]
    assert orjson.loads(rpc.encode(expected)) == orjson.loads(text)


INVALID = [
    ("[1]", None),
    ('{"id":1,"method":"m"}', 1),  # no jsonrpc member
    ('{"jsonrpc":"1.0","id":1,"method":"m"}', 1),
    ('{"jsonrpc":"2.0","id":true,"method":"m"}', None),  # booleans are not ids
    ('{"jsonrpc":"2.0","id":1.5,"method":"m"}', None),
    ('{"jsonrpc":"2.0","id":null,"method":"m"}', None),  # a request id may not be null
    ('{"jsonrpc":"2.0","id":2,"method":""}', 2),
    ('{"jsonrpc":"2.0","id":2,"method":7}', 2),
    ('{"jsonrpc":"2.0","id":2,"method":"m","params":"x"}', 2),
    ('{"jsonrpc":"2.0","id":2}', 2),
    ('{"jsonrpc":"2.0","id":2,"result":1,"error":{"code":1,"message":"m"}}', 2),
    ('{"jsonrpc":"2.0","id":2,"error":"bad"}', 2),
    ('{"jsonrpc":"2.0","result":1}', None),
]


@pytest.mark.parametrize(("text", "error_id"), INVALID)
def test_invalid_messages_become_invalid_items(text: str, error_id: object) -> None:
    items = rpc.decode(text).items
    assert len(items) == 1
    item = items[-1]
    assert isinstance(item, rpc.Invalid)
    assert item.error.code == rpc.INVALID_REQUEST
    assert item.id == error_id
    answer = orjson.loads(rpc.encode(item.error.response(item.id)))
    assert answer["id"] == error_id and answer["error"]["code"] == -32600


def test_parse_error_and_empty_batch_raise() -> None:
    with pytest.raises(rpc.JSONRPCError) as info:
        rpc.decode(b"{nope")
    assert info.value.code == rpc.PARSE_ERROR
    assert orjson.loads(rpc.encode(info.value.response(None)))["id"] is None
    with pytest.raises(rpc.JSONRPCError) as info:
        rpc.decode("[]")
    assert info.value.code == rpc.INVALID_REQUEST


def test_batch_keeps_order_and_marks_bad_elements() -> None:
    batch = rpc.decode('[{"jsonrpc":"2.0","id":1,"method":"a"}, 5, {"jsonrpc":"2.0","method":"b"}]')
    assert batch.is_batch
    assert isinstance(batch.items[0], rpc.Request)
    assert isinstance(batch.items[1], rpc.Invalid)
    assert isinstance(batch.items[2], rpc.Notification)
    encoded = orjson.loads(rpc.encode([rpc.response(1, "x"), rpc.notification("n")]))
    assert encoded == [
        {"jsonrpc": "2.0", "id": 1, "result": "x"},
        {"jsonrpc": "2.0", "method": "n"},
    ]


def test_error_object_carries_data_only_when_given() -> None:
    err = rpc.error_response(7, -32402, "pay", {"accepts": []})
    assert err.code == -32402
    assert orjson.loads(rpc.encode(err))["error"] == {
        "code": -32402,
        "message": "pay",
        "data": {"accepts": []},
    }
    assert "data" not in rpc.JSONRPCError(-1, "x").error_object()


def _drain(buf: rpc.LineBuffer) -> list[bytes]:
    out = []
    while (line := buf.next_line()) is not None:
        out.append(line)
    return out


def test_line_buffer_whole_and_byte_by_byte() -> None:
    data = b'{"a":1}\n\n{"b":2}\r\n{"c":3}'
    whole = rpc.LineBuffer()
    whole.receive_data(data)
    assert _drain(whole) == [b'{"a":1}', b'{"b":2}']
    whole.receive_data(b"")
    assert _drain(whole) == [b'{"c":3}']
    assert whole.eof

    single = rpc.LineBuffer()
    got: list[bytes] = []
    for i in range(len(data)):
        single.receive_data(data[i : i + 1])
        got += _drain(single)
    single.receive_data(b"")
    got += _drain(single)
    assert got == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def test_line_buffer_refuses_long_lines_and_recovers() -> None:
    buf = rpc.LineBuffer(max_line=8)
    buf.receive_data(b"0123456789abc")
    with pytest.raises(rpc.LineTooLong):
        buf.next_line()
    buf.receive_data(b"def\nok\n")
    assert _drain(buf) == [b"ok"]
    buf.receive_data(b"0123456789\nfine\n")
    with pytest.raises(rpc.LineTooLong):
        buf.next_line()
    assert _drain(buf) == [b"fine"]
