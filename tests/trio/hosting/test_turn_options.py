"""Turn options: the host builds them once from its config; every way to start a turn keeps them.

The end-to-end paths (each transport under ``uamp serve`` and ``uamp_asgi``
with ``--max-response-output-bytes``) are in
``tests/trio/transports/test_output_bound_paths.py`` and the
``test_output_bound`` modules; this is the object they all go through.
"""

from __future__ import annotations

from contextlib import aclosing

import trio

import uamp_asgi
import uamp_asgi.turns
from tests._support.endless import Endless
from uamp_proto import types as ty
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import TurnRequest
from uamp_proto.response import MAX_OUTPUT_BYTES
from uamp_trio.app import App
from uamp_trio.engines.server import ServerConfig
from uamp_trio.hosting.agents import ServedAgent
from uamp_trio.hosting.host import PolicyTransport
from uamp_trio.hosting.parked import ParkedTurns, turn_key
from uamp_trio.hosting.turns import DEFAULT_TURN_OPTIONS, TurnOptions

TIMEOUT = 10
#: Smaller than one of the endless agent's deltas: its first is refused.
SMALL = 4096


def _request() -> TurnRequest:
    return TurnRequest(
        agent="endless",
        session_id="s1",
        response_id="r1",
        messages=[ty.Message(role="user", content="forever")],
    )


def _too_large(outcome: ResponseOutcome | None) -> None:
    assert outcome is not None and outcome.status == "failed"
    assert outcome.error is not None and outcome.error.code == "output_too_large"
    assert str(SMALL) in outcome.error.message
    assert outcome.tracker.max_output_bytes == SMALL


def test_the_host_builds_its_turn_options_once_per_config() -> None:
    agent = Endless()
    host = App([agent])
    assert host.turns == DEFAULT_TURN_OPTIONS  # before a server configures it
    assert host.turns.max_output_bytes == MAX_OUTPUT_BYTES
    host.server_config = ServerConfig(max_response_output_bytes=SMALL)
    turns = host.turns
    assert turns.max_output_bytes == SMALL
    assert host.turns is turns  # one object, read by each turn as it starts
    # What the host hands on follows it: parked turns, connections' served agents.
    assert host.parked.turns is turns
    assert PolicyTransport(host).served(agent).turns is turns
    host.server_config = ServerConfig()
    assert host.turns.max_output_bytes == MAX_OUTPUT_BYTES
    assert host.parked.turns is host.turns
    # A served agent with no host (stdio ACP and MCP) runs on the defaults.
    assert ServedAgent(agent).turns is DEFAULT_TURN_OPTIONS


async def test_every_way_to_start_a_turn_keeps_the_bound() -> None:
    turns = TurnOptions(max_output_bytes=SMALL)
    with trio.fail_after(TIMEOUT):
        _too_large(await turns.runner(Endless(), _request(), None).run())
        _too_large(await turns.run(Endless(), _request(), None, stamp=False))
        async with turns.open(Endless(), _request()) as opened:
            async for _ in opened:
                pass
        _too_large(opened.outcome)
        lot = ParkedTurns(turns=turns)
        async with trio.open_nursery() as nursery:
            parked = lot.start(
                nursery.start_soon, Endless(), _request(), key=turn_key("endless", "s1", ANONYMOUS)
            )
            async with aclosing(parked.read()) as events:
                async for _ in events:
                    pass
        _too_large(parked.outcome)


async def test_the_asgi_host_builds_its_turn_options_from_its_config() -> None:
    app = uamp_asgi.app([Endless()], config=uamp_asgi.Config(max_response_output_bytes=SMALL))
    turns = app.host.turns
    assert turns == uamp_asgi.turns.TurnOptions(max_output_bytes=SMALL)
    with trio.fail_after(TIMEOUT):
        _too_large(await turns.run(Endless(), _request()))
        _too_large(await turns.turn(Endless(), _request(), None).run())
    default = uamp_asgi.app([Endless()]).host.turns
    assert default == uamp_asgi.turns.DEFAULT_TURN_OPTIONS
    assert default.max_output_bytes == MAX_OUTPUT_BYTES
