"""Replayed envelope ids across processes: two ``uamp serve`` on one real Redis.

With ``--store redis://...`` (as every worker of ``uamp serve --workers N``
has) an envelope id taken by one process is a replay for every other; an
envelope one process refused may be sent again elsewhere.
"""

from __future__ import annotations

import httpx
import trio

from tests._support.cli import uamp_serve
from tests._support.envelopes import envelope
from uamp_proto.adapters.envelope import read_error
from uamp_proto.envelope import decode_envelope, encode_envelope

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
