"""The paying agent (uamp_proto.topup): both ways of asking for money, one object per response."""

from __future__ import annotations

import pytest

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.responder import PAID_TOKEN, Emit, TurnRequest
from uamp_proto.topup import MAX_PAYMENT_ROUNDS, PayingAgent, PaymentStops

REQUIRED = ty.PaymentRequirements(amount="0.10", currency="USD")


def request(text: str = "hi") -> TurnRequest:
    return TurnRequest(
        agent="a",
        session_id="s",
        response_id="r",
        messages=[ty.Message(role="user", content=text)],
    )


class Script:
    """An agent that plays ``steps``: ``"delta"``, ``"topup"`` (emit) or ``"raise"``."""

    name = "a"

    def __init__(self, *rounds: list[str]) -> None:
        self.rounds = list(rounds)
        self.seen: list[TurnRequest] = []
        self.emit: Emit | None = None

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id="a")

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.seen.append(request)
        self.emit = emit
        for step in self.rounds.pop(0):
            if step == "delta":
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text="x")))
            elif step == "topup":
                await emit(ev.PaymentRequired(requirements=REQUIRED, extra={"action": "topup"}))
            else:
                raise PaymentRequiredError(REQUIRED)


class Server:
    """The server's side, recorded: holds, next requests, the token now."""

    def __init__(self) -> None:
        self.held: list[ev.PaymentRequired] = []
        self.nexts = 0
        self.token_now: str | None = None

    async def hold(self, required: ev.PaymentRequired) -> None:
        self.held.append(required)
        self.token_now = f"tok{len(self.held)}"

    def again(self) -> TurnRequest:
        self.nexts += 1
        return request(f"again {self.nexts}")


def paying(agent: Script, server: Server) -> PayingAgent:
    return PayingAgent(
        agent,
        stops=PaymentStops(),
        hold=server.hold,
        again=server.again,
        charge=lambda: None,
        token=lambda: server.token_now,
    )


async def run(agent: Script, server: Server) -> tuple[PayingAgent, list[ev.Event], TurnRequest]:
    emitted: list[ev.Event] = []

    async def emit(event: ev.Event) -> None:
        emitted.append(event)

    wrapper = paying(agent, server)
    first = request()
    await wrapper.respond(first, emit)
    return wrapper, emitted, first


@pytest.mark.parametrize(
    ("rounds", "deltas", "held", "nexts", "runs"),
    [
        ([["delta", "delta"]], 2, 0, 0, 1),
        ([["delta", "topup", "delta"]], 2, 1, 0, 1),
        ([["delta", "raise"], ["delta"]], 2, 1, 1, 2),
        ([["topup", "raise"], ["topup", "delta"]], 1, 3, 1, 2),
    ],
)
async def test_a_round_goes_through_holds_and_runs_again_as_asked(
    rounds: list[list[str]], deltas: int, held: int, nexts: int, runs: int
) -> None:
    agent, server = Script(*rounds), Server()
    _, emitted, _ = await run(agent, server)
    assert [type(e) for e in emitted] == [ev.ResponseDelta] * deltas  # payment.required held
    assert len(server.held) == held
    assert server.nexts == nexts
    assert len(agent.seen) == runs
    for required in server.held:  # stamped with the response's ids
        assert (required.response_id, required.session_id) == ("r", "s")


async def test_the_token_that_paid_a_top_up_goes_into_the_current_round_s_request() -> None:
    agent, server = Script(["raise"], ["topup", "delta"]), Server()
    _, _, first = await run(agent, server)
    assert PAID_TOKEN not in first.metadata  # the raise was answered by a new round
    assert agent.seen[1].metadata[PAID_TOKEN] == "tok2"  # the top-up of that round


async def test_raised_stops_past_the_limit_go_to_the_caller() -> None:
    agent, server = Script(*[["raise"]] * (MAX_PAYMENT_ROUNDS + 1)), Server()
    with pytest.raises(PaymentRequiredError):
        await run(agent, server)
    assert len(server.held) == MAX_PAYMENT_ROUNDS


async def test_the_round_s_request_and_emit_are_let_go_when_respond_returns() -> None:
    agent, server = Script(["delta"]), Server()
    wrapper, _, _ = await run(agent, server)
    # Nothing of the round stays on the agent (no cycle through the runner's emit).
    assert wrapper._current is None and wrapper._emit is None
    assert agent.emit is not None
    with pytest.raises(RuntimeError, match="after the agent's respond"):
        await agent.emit(ev.ResponseDelta(delta=ty.DeltaText(text="late")))
