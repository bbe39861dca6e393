"""An AI SDK answer's frames, kept in one buffer, reach every reader whole and in order.

The answer keeps its frames back to back in one ``bytearray`` and each
reader its own offset in it; whatever the interleaving of pushes, reader
starts and checkpoints, every reader must write exactly ``start``
(+ the continued message's earlier parts, for a replay), every frame after
it, then ``[DONE]``.
"""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto.adapters.ai_sdk import DONE
from uamp_stores.chat_answers import Answer

_frames = st.lists(st.binary(min_size=1, max_size=12), max_size=6)
#: One step of the answer: push these frames (one at a time or as a list),
#: start a reader (replay or not) here, or pass a checkpoint.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("push"), _frames),
        st.tuples(st.just("push_one"), st.binary(min_size=1, max_size=12)),
        st.tuples(st.just("reader"), st.booleans()),
        st.tuples(st.just("checkpoint"), st.none()),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(steps=_steps, prefix=_frames)
def test_every_reader_writes_the_whole_answer(
    steps: list[tuple[str, object]], prefix: list[bytes]
) -> None:
    async def main() -> None:
        answer = Answer((("anonymous", ""), "agent", "chat"), "leg", b"START|", prefix)
        pushed: list[bytes] = []
        readers: list[tuple[bool, list[bytes]]] = []

        async def read(replay: bool, out: list[bytes]) -> None:
            async def send(data: bytes) -> None:
                out.append(bytes(data))
                await trio.lowlevel.checkpoint()

            await answer.follow(send, replay=replay)

        async with trio.open_nursery() as nursery:
            for kind, value in steps:
                if kind == "push":
                    assert isinstance(value, list)
                    answer.push(value)
                    pushed.extend(value)
                elif kind == "push_one":
                    assert isinstance(value, bytes)
                    answer.push_one(value)
                    pushed.append(value)
                elif kind == "reader":
                    out: list[bytes] = []
                    readers.append((bool(value), out))
                    nursery.start_soon(read, bool(value), out)
                else:
                    await trio.lowlevel.checkpoint()
            answer.close()
        body = b"".join(pushed)
        for replay, out in readers:
            shown = b"".join(prefix) if replay and prefix else b""
            assert b"".join(out) == b"START|" + shown + body + DONE
        assert answer.size == len(b"START|") + len(b"".join(prefix)) + len(body)
        assert answer.start == b"START|"

    trio.run(main)
