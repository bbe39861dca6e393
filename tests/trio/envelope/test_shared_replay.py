"""Spec 003 across processes: two ``uamp serve`` on one real Redis.

With ``--store redis://...`` (as every worker of ``uamp serve --workers N``
has) an envelope id taken by one process is a replay for every other; an
envelope one process refused may be sent again elsewhere; and the stream of
an exchange one process runs is read and acknowledged through another, by
``POST /v1/stream/{id}`` or by a ``progress`` envelope (also with
``uamp serve --workers 2``, where the kernel picks the worker).
"""

from __future__ import annotations

import signal
from typing import Any

import httpx
import trio

from tests._support import cli
from tests._support.cli import uamp_serve
from tests._support.envelopes import envelope
from uamp_proto.adapters.envelope import read_error
from uamp_proto.envelope import (
    Delta,
    DeltaType,
    Envelope,
    decode_delta,
    decode_envelope,
    encode_envelope,
)
from uamp_proto.sse import SSEParser
from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner, Reply

HEADERS = {"content-type": "application/uamp+json;v=1"}
PATH = "/agents/demo/v1/messages"
#: A question the demo agent answers in several frames.
LONG = "please repeat these words back to me one by one in order"


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


async def _stream_acked_by_progress(
    stream_base: str, ack_bases: list[str], ask: Envelope, signer: EnvelopeSigner
) -> tuple[list[Delta], list[dict[str, Any]]]:
    """Post ``ask`` (window 1) at ``stream_base``, read its frames there, and acknowledge
    each with a ``progress`` envelope (spec 003 section 5) posted over a new connection
    to the next of ``ack_bases``. The answers to the acks come back too."""
    deltas: list[Delta] = []
    answers: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=stream_base, timeout=30) as at_stream:
        posted = await at_stream.post(PATH, content=encode_envelope(ask), headers=HEADERS)
        assert posted.status_code == 202, posted.text
        parser = SSEParser()
        async with at_stream.stream("GET", stream_base + posted.headers["location"]) as r:
            assert r.status_code == 200
            async for chunk in r.aiter_bytes():
                for event in parser.feed(chunk):
                    delta = decode_delta(event.data)
                    deltas.append(delta)
                    ack = signer.make(
                        "progress",
                        to="urn:uamp:agent:demo",
                        reply_to=ask.id,
                        stream_id=delta.stream_id,
                        ext={"delta_seq": delta.delta_seq},
                    )
                    base = ack_bases[len(deltas) % len(ack_bases)]
                    async with httpx.AsyncClient(base_url=base, timeout=30) as fresh:
                        acked = await fresh.post(
                            PATH, content=encode_envelope(ack), headers=HEADERS
                        )
                    assert acked.status_code == 202, acked.text
                    answers.append(acked.json())
    return deltas, answers


async def test_a_progress_envelope_acknowledges_an_exchange_another_process_runs(
    redis_url: str,
) -> None:
    # Window 1: the stream A serves ends only if every ack posted to B reaches A.
    signer = EnvelopeSigner.ephemeral()
    ask = signer.make("ask", LONG, to="urn:uamp:agent:demo", window=1)
    store = ("--store", redis_url)
    with uamp_serve(*store) as a, uamp_serve(*store) as b, trio.fail_after(60):
        deltas, answers = await _stream_acked_by_progress(a, [b], ask, signer)
        async with httpx.AsyncClient(base_url=b) as at_b:
            no_seq = signer.make("progress", "hi", to="urn:uamp:agent:demo", reply_to=ask.id)
            missing = await at_b.post(PATH, content=encode_envelope(no_seq), headers=HEADERS)
            unknown = signer.make(
                "progress", to="urn:uamp:agent:demo", reply_to=envelope().id, ext={"delta_seq": 0}
            )
            foreign = await at_b.post(PATH, content=encode_envelope(unknown), headers=HEADERS)
    assert deltas[-1].type is DeltaType.DONE and len(deltas) >= 3
    assert [d.delta_seq for d in deltas] == list(range(len(deltas)))
    # Each answer names the exchange A runs, as a local ack's would.
    assert {a["id"] for a in answers} == {ask.id} and answers[-1]["state"] == "completed"
    assert missing.status_code == 409  # 4.09: no delta_seq, wherever the exchange runs
    assert read_error(decode_envelope(missing.content))[0] == "4.09"
    assert foreign.status_code == 404  # an exchange no process runs
    assert read_error(decode_envelope(foreign.content))[0] == "4.04"


async def test_acks_reach_the_exchange_whichever_of_two_workers_takes_them(
    redis_url: str,
) -> None:
    # uamp serve --workers 2: the kernel gives each new connection to either
    # worker; each ack comes on a new connection, so some land on the worker
    # that does not run the exchange. Window 1: the stream ends only if all work.
    signer = EnvelopeSigner.ephemeral()
    sup = cli.spawn_serve("--workers", "2", "--store", redis_url)
    try:
        base = "http://" + cli.wait_for_line(sup, r"2 workers on ([\d.]+:\d+)").group(1)
        cli.wait_for_line(sup, r"serving on http://")
        cli.wait_for_line(sup, r"serving on http://")  # both workers are up
        with trio.fail_after(90):
            for _ in range(3):
                ask = signer.make("ask", LONG, to="urn:uamp:agent:demo", window=1)
                deltas, _ = await _stream_acked_by_progress(base, [base], ask, signer)
                assert deltas[-1].type is DeltaType.DONE
                assert [d.delta_seq for d in deltas] == list(range(len(deltas)))
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout=30)
