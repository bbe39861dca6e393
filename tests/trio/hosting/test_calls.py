"""Asking an agent about its calls (uamp_trio.hosting.calls): hook, capabilities, failures."""

from __future__ import annotations

import logging

import pytest
import trio

from tests._support.agents import Switchboard, TestAgent
from uamp_proto import types as ty
from uamp_proto.voice import CallAnswer, CallEnded, CallOffer
from uamp_trio.hosting.calls import answer_call, call_ended, has_call_hook

OFFER = CallOffer(call_id="call_1", sdp="v=0 offer")


class _Plain(TestAgent):
    name = "plain"


class _Realtime(TestAgent):
    name = "rt"

    def capabilities(self) -> ty.Capabilities:
        audio = ty.AudioCapabilities(supports_realtime=True)
        return ty.Capabilities(id="rt", provider="test", modalities=["text"], audio=audio)


class _Hooked(TestAgent):
    """A hook that misbehaves as told."""

    name = "hooked"

    def __init__(self, how: str) -> None:
        self.how = how

    async def take_call(self, offer: CallOffer) -> object:
        if self.how == "raise":
            raise RuntimeError("no line")
        if self.how == "slow":
            await trio.sleep_forever()
        return "yes please"  # not a CallAnswer

    async def call_ended(self, ended: CallEnded) -> None:
        raise RuntimeError("cannot hang up")


@pytest.mark.parametrize(
    ("agent", "answer"),
    [
        (_Plain(), CallAnswer(accept=False, reason="agent 'plain' does not take calls")),
        (_Realtime(), CallAnswer()),
        (Switchboard(), CallAnswer(sdp=Switchboard.SDP)),
        (Switchboard(decline="busy"), CallAnswer(accept=False, reason="busy")),
        (_Hooked("raise"), CallAnswer(accept=False, reason="the agent could not take the call")),
        (_Hooked("wrong"), CallAnswer(accept=False, reason="the agent could not take the call")),
        (_Hooked("slow"), CallAnswer(accept=False, reason="the agent did not answer")),
    ],
    ids=["no-calls", "realtime-audio", "hook-sdp", "hook-declines", "raises", "wrong", "slow"],
)
async def test_who_answers_a_call(agent: TestAgent, answer: CallAnswer) -> None:
    assert has_call_hook(agent) == hasattr(agent, "take_call")
    with trio.fail_after(5):
        assert await answer_call(agent, OFFER, timeout=0.2) == answer


async def test_a_failing_call_ended_hook_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ended = CallEnded(call_id="call_1", duration_ms=1200.0, reason="closed")
    with caplog.at_level(logging.INFO, logger="uamp_trio.calls"):
        await call_ended(_Hooked("raise"), ended)
    messages = [r.getMessage() for r in caplog.records]
    assert "call call_1 of agent 'hooked' ended (closed) after 1200 ms" in messages
    assert any("call_ended failed" in m for m in messages)
    board = Switchboard()
    await call_ended(board, ended)
    assert board.ended == [ended]
