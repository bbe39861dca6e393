"""A room sees its agent's question; who may answer it is the room's setting (issue 30).

Alice owns the room, Bob is a member, both over real WebSockets with their
own API keys. Bob's message makes the demo agent ask before it runs ``add``:
both see the ``interrupt.request`` (with the room's ``chat_id``). Under
``chat.approvals`` ``caller`` (the default) only Bob may answer -- Alice's
answer is ``interrupt_not_found``, as for an id that does not exist; under
``owner`` Alice may; under ``members`` anyone in the room may.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.approvals import approving
from tests._support.wire import recv, send
from tests.trio.transports.test_chat_rooms import join, serving
from uamp_proto.chat import may_answer
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 20
ALICE, BOB, CAROL = ("api_key", "alice"), ("api_key", "bob"), ("api_key", "carol")


@pytest.mark.parametrize(
    ("setting", "who", "may"),
    [
        ("caller", BOB, True),
        ("caller", ALICE, False),
        ("owner", ALICE, True),
        ("owner", CAROL, False),
        ("owner", BOB, True),  # the caller always may
        ("members", CAROL, True),
        ("members", ("api_key", "eve"), False),
    ],
)
def test_who_may_answer(setting: str, who: tuple[str, str], may: bool) -> None:
    got = may_answer(setting, who, caller=BOB, owner=ALICE, members={ALICE, BOB, CAROL})
    assert got is may


async def _until(ws: Any, kind: str) -> dict[str, Any]:
    while True:
        event = await recv(ws)
        if event["type"] == kind:
            return event


@pytest.mark.parametrize(
    ("setting", "alice_may"), [(None, False), ("owner", True), ("members", True)]
)
async def test_the_room_sees_the_question_and_its_setting_says_who_answers(
    setting: str | None, alice_may: bool
) -> None:
    auth = APIKeyAuthenticator([("alice", "ka"), ("bob", "kb")])
    settings: dict[str, Any] = {"members": ["bob"], "respond": "every"}
    if setting is not None:
        settings["approvals"] = setting
    with trio.fail_after(TIMEOUT):
        async with serving(agents=[approving()], authenticator=auth) as host:
            url = f"ws://{host}/agents/demo/uamp"
            async with open_ws(url + "?token=ka") as a_ws, open_ws(url + "?token=kb") as b_ws:
                alice = await join(a_ws, "alice", settings=settings)
                bob = await join(b_ws, "bob")
                await send(b_ws, type="input.text", text="what is 2+3?", session_id=bob)
                seen_by_alice = await _until(a_ws, "interrupt.request")
                seen_by_bob = await _until(b_ws, "interrupt.request")
                assert seen_by_alice["interrupt_id"] == seen_by_bob["interrupt_id"]
                assert seen_by_alice["tool_name"] == "add" and seen_by_alice.get("chat_id")
                iid = seen_by_alice["interrupt_id"]
                await send(
                    a_ws, type="interrupt.answer", session_id=alice, interrupt_id=iid, approved=True
                )
                if not alice_may:
                    refused = await _until(a_ws, "session.error")
                    assert refused["error"]["code"] == "interrupt_not_found"
                    await send(
                        b_ws,
                        type="interrupt.answer",
                        session_id=bob,
                        interrupt_id=iid,
                        approved=True,
                    )
                resolved = await _until(b_ws, "interrupt.resolved")
                assert resolved["outcome"] == "approved"
                created = await _until(b_ws, "message.created")
                while "5" not in created["message"]["content"]:
                    created = await _until(b_ws, "message.created")
                assert "2 + 3 = 5" in created["message"]["content"]
