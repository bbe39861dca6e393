"""Spec 003 across processes: two ``uamp serve`` on one real Redis.

With ``--store redis://...`` (as every worker of ``uamp serve --workers N``
has) an envelope id taken by one process is a replay for every other; an
envelope one process refused may be sent again elsewhere; and the stream of
an exchange one process runs is read and acknowledged through another.
"""

from __future__ import annotations

import httpx
import trio

from tests._support.cli import uamp_serve
from tests._support.envelopes import envelope
from uamp_proto.adapters.envelope import read_error
from uamp_proto.envelope import DeltaType, decode_envelope, encode_envelope
from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner, Reply

HEADERS = {"content-type": "application/uamp+json;v=1"}
PATH = "/agents/demo/v1/messages"


async def test_an_id_taken_by_one_process_is_a_replay_for_another(redis_url: str) -> None:
    ask = encode_envelope(envelope(text="what is 2+3?"))
    refused = encode_envelope(envelope("progress", "about nothing"))  # 4.00: no reply_to
    store = ("--store", redis_url)
    with uamp_serve(*store) as a, uamp_serve(*store) as b, trio.fail_after(60):
        async with httpx.AsyncClient(base_url=a) as at_a, httpx.AsyncClient(base_url=b) as at_b:
            first = await at_a.post(PATH, content=ask, headers=HEADERS)
            again = await at_b.post(PATH, content=ask, headers=HEADERS)
            bad_a = await at_a.post(PATH, content=refused, headers=HEADERS)
            bad_b = await at_b.post(PATH, content=refused, headers=HEADERS)
    assert first.status_code == 202
    assert again.status_code == 403
    assert read_error(decode_envelope(again.content))[0] == "4.03"
    # Refused on A, so not taken: B judges it on its own merits (4.00, not a replay).
    for answer in (bad_a, bad_b):
        assert answer.status_code == 400
        assert read_error(decode_envelope(answer.content))[0] == "4.00"


async def test_the_stream_of_an_exchange_is_read_and_acked_through_another_process(
    redis_url: str,
) -> None:
    signer = EnvelopeSigner.ephemeral()
    # A window of 1: every frame waits for the ack of the one before, so the
    # stream only ends if B's acks reach A, which runs the exchange.
    ask = signer.make("ask", "what is 2+3?", to="urn:uamp:agent:demo", window=1)
    store = ("--store", redis_url)
    reply = Reply(ask)
    with uamp_serve(*store) as a, uamp_serve(*store) as b, trio.fail_after(60):
        async with httpx.AsyncClient(base_url=a) as at_a:
            posted = await at_a.post(PATH, content=encode_envelope(ask), headers=HEADERS)
        assert posted.status_code == 202
        location = b + posted.headers["location"]
        async with EnvelopeHTTPClient(f"{b}/agents/demo", signer) as at_b:
            async for delta in at_b.deltas(location, window=1, reply=reply):
                reply.deltas.append(delta)
            unknown = await at_b.http.get(f"{b}/agents/demo/v1/stream/{envelope().id}")
            elsewhere = await at_b.http.get(location.replace("/agents/demo/", "/agents/x/"))
    assert reply.final is not None and reply.final.type is DeltaType.DONE
    assert "5" in reply.text and len(reply.deltas) >= 2
    assert [d.delta_seq for d in reply.deltas] == list(range(len(reply.deltas)))
    assert reply.acks == [d.delta_seq for d in reply.deltas]
    assert {d.stream_id for d in reply.deltas} == {ask.id}
    assert unknown.status_code == 404
    assert elsewhere.status_code == 404


async def test_copies_sent_at_once_to_two_processes_are_taken_once(redis_url: str) -> None:
    # Each process decides its own copies in one step, and the store's SET NX
    # decides between them: of 20 copies split over A and B, one is taken.
    ask = encode_envelope(envelope(text="once"))
    store = ("--store", redis_url)
    statuses: list[int] = []
    with uamp_serve(*store) as a, uamp_serve(*store) as b, trio.fail_after(60):
        async with httpx.AsyncClient(base_url=a) as at_a, httpx.AsyncClient(base_url=b) as at_b:

            async def post(client: httpx.AsyncClient) -> None:
                statuses.append((await client.post(PATH, content=ask, headers=HEADERS)).status_code)

            async with trio.open_nursery() as nursery:
                for n in range(20):
                    nursery.start_soon(post, at_a if n % 2 else at_b)
    assert sorted(statuses) == [202] + [403] * 19
