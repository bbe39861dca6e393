"""The host's pending interrupts (uamp_trio.hosting.interrupts), table-driven where it fits."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from uamp_proto import events as ev
from uamp_proto.interrupts import APPROVAL, Answer, Interrupt
from uamp_proto.principal import Principal
from uamp_proto.responder import TurnRequest
from uamp_trio.hosting.interrupts import InterruptNotFound, Interrupts, InvalidAnswer

ALICE = Principal(scheme="bearer", id="alice")
BOB = Principal(scheme="bearer", id="bob")


def _request(principal: Principal = ALICE, session: str = "s1", response: str = "r1") -> Any:
    return TurnRequest(
        agent="demo", session_id=session, response_id=response, messages=[], principal=principal
    )


def _approval(key: str = "call_1#0", n: int = 0) -> Interrupt:
    return Interrupt(
        id=f"int_{key}_{n}",
        kind=APPROVAL,
        key=key,
        prompt="Allow add?",
        tool_name="add",
        arguments={"a": 2, "b": 3},
    )


class Asker:
    """One response's port, with the events it emitted."""

    def __init__(self, host: Interrupts, request: Any, *, supported: bool = True) -> None:
        self.port = host.port(request, supported=supported)
        self.events: list[ev.Event] = []
        self.port.emit = self._emit
        self.shown = trio.Event()
        self.answers: list[Answer] = []

    async def _emit(self, event: ev.Event) -> None:
        self.events.append(event)
        if isinstance(event, ev.InterruptRequest):
            self.shown.set()

    async def ask(self, interrupt: Interrupt) -> None:
        self.answers.append(await self.port.ask(interrupt))

    @property
    def asked(self) -> ev.InterruptRequest:
        return next(e for e in self.events if isinstance(e, ev.InterruptRequest))


async def _paused(nursery: trio.Nursery, host: Interrupts, **kw: Any) -> Asker:
    asker = Asker(host, _request(**kw))
    nursery.start_soon(asker.ask, _approval())
    await asker.shown.wait()
    return asker


async def test_the_owner_answers_and_the_run_goes_on() -> None:
    host = Interrupts(clock=lambda: 1000.0)
    async with trio.open_nursery() as nursery:
        asker = await _paused(nursery, host)
        asked = asker.asked
        assert asked.session_id is None and asked.response_id == "r1"
        assert asked.expires_at == 1000.0 + host.expiry  # type: ignore[operator]
        assert [i.id for i in (await host.paused(ALICE, "s1"))] == [asked.interrupt_id]
        assert [i.id for i in (await host.pending(ALICE))] == [asked.interrupt_id]
        found = await host.answer(ALICE, asked.interrupt_id, Answer(approved=True))
        assert found.tool_name == "add"
    assert asker.answers == [Answer(approved=True)]
    assert (await host.paused(ALICE, "s1")) == [] and len(host) == 0
    resolved = [e for e in asker.events if isinstance(e, ev.InterruptResolved)]
    assert [(r.interrupt_id, r.outcome) for r in resolved] == [(asked.interrupt_id, "approved")]


async def test_another_principals_id_reads_exactly_like_a_missing_one() -> None:
    host = Interrupts()
    async with trio.open_nursery() as nursery:
        asker = await _paused(nursery, host)
        real = asker.asked.interrupt_id
        with pytest.raises(InterruptNotFound) as theirs:
            await host.answer(BOB, real, Answer(approved=True))
        with pytest.raises(InterruptNotFound) as missing:
            await host.answer(BOB, "int_nothing", Answer(approved=True))
        assert str(theirs.value).replace(real, "X") == str(missing.value).replace(
            "int_nothing", "X"
        )
        assert host.get(BOB, real) is None and (await host.pending(BOB)) == []
        assert await host.paused(ALICE, "s1")  # still waiting for alice
        await host.answer(ALICE, real, Answer(approved=False))
    assert asker.answers[0].approved is False


# (answer, problem)
BAD_ANSWERS = {
    "no verdict": (Answer(), "approved"),
    "arguments not an object": (Answer(approved=True, arguments=[1]), "object"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
async def test_an_answer_that_does_not_fit_is_refused_and_it_stays_pending(case: str) -> None:
    answer, problem = BAD_ANSWERS[case]
    host = Interrupts()
    async with trio.open_nursery() as nursery:
        asker = await _paused(nursery, host)
        with pytest.raises(InvalidAnswer, match=problem):
            await host.answer(ALICE, asker.asked.interrupt_id, answer)
        assert await host.paused(ALICE, "s1")
        await host.answer(ALICE, asker.asked.interrupt_id, Answer(approved=True))


async def test_an_interrupt_expires_and_ends_as_a_refusal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    host = Interrupts(expiry=30, clock=lambda: 1000.0)
    asker = Asker(host, _request())
    await asker.ask(_approval())  # nobody answers; the clock jumps
    [answer] = asker.answers
    assert answer.expired and not answer.approved
    assert [e.outcome for e in asker.events if isinstance(e, ev.InterruptResolved)] == ["expired"]
    assert len(host) == 0
    with pytest.raises(InterruptNotFound):
        await host.answer(ALICE, asker.asked.interrupt_id, Answer(approved=True))


async def test_each_principal_has_a_bound_on_pending_interrupts() -> None:
    host = Interrupts(max_pending=2)
    async with trio.open_nursery() as nursery:
        first = await _paused(nursery, host, response="r1")
        second = await _paused(nursery, host, response="r2")
        refused = Asker(host, _request(response="r3"))
        await refused.ask(_approval())  # the third is refused at once, nothing shown
        assert refused.answers[0].approved is False and "too many" in (
            refused.answers[0].reason or ""
        )
        assert refused.events == []
        others = await _paused(nursery, host, principal=BOB, session="s9")  # bob is not bound
        for asker, who in ((first, ALICE), (second, ALICE), (others, BOB)):
            await host.answer(who, asker.asked.interrupt_id, Answer(approved=True))


# (client declares interrupts, policy, whether the run pauses)
POLICY = {
    "declared": (True, "deny", True),
    "not declared, deny": (False, "deny", False),
    "not declared, wait": (False, "wait", True),
}


@pytest.mark.parametrize("case", list(POLICY))
async def test_the_policy_for_clients_that_do_not_declare_interrupts(case: str) -> None:
    supported, policy, pauses = POLICY[case]
    host = Interrupts(policy=policy)  # type: ignore[arg-type]
    asker = Asker(host, _request(), supported=supported)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(asker.ask, _approval())
        await trio.testing.wait_all_tasks_blocked()
        assert bool(await host.paused(ALICE, "s1")) is pauses
        if pauses:
            await host.answer(ALICE, asker.asked.interrupt_id, Answer(approved=True))
    assert asker.answers[0].approved is pauses


async def test_asking_again_with_the_same_key_keeps_the_id() -> None:
    host = Interrupts()
    async with trio.open_nursery() as nursery:
        first = await _paused(nursery, host)
        again = Asker(host, _request())
        nursery.start_soon(again.ask, _approval(n=1))  # a resumed run asks again
        await again.shown.wait()
        assert again.asked.interrupt_id == first.asked.interrupt_id
        assert len(host) == 1
        await host.answer(ALICE, first.asked.interrupt_id, Answer(approved=True))
    assert first.answers == again.answers == [Answer(approved=True)]


def test_a_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        Interrupts(policy="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expiry"):
        Interrupts(expiry=0)


async def test_pending_and_paused_answer_across_processes_per_principal(redis_url: str) -> None:
    """Two hosts on one real Redis (as two ``uamp serve --store redis://...`` processes)."""
    import uuid
    from contextlib import AsyncExitStack

    from uamp_trio.stores.interrupts_redis import RedisInterruptRelay

    prefix = f"t{uuid.uuid4().hex[:8]}"
    here, there = Interrupts(), Interrupts()
    with trio.fail_after(10):
        async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
            for host in (here, there):
                relay = RedisInterruptRelay(redis_url, prefix=prefix)
                stack.push_async_callback(relay.aclose)
                host.relay = relay
            alices = await _paused(nursery, here)  # alice's run waits on the first process
            bobs = await _paused(
                nursery, there, principal=BOB
            )  # bob's, same session id, on the other
            alice_id, bob_id = alices.asked.interrupt_id, bobs.asked.interrupt_id
            # Each process sees each principal's own, wherever it waits, and nobody else's.
            for host in (here, there):
                assert [i.id for i in await host.pending(ALICE)] == [alice_id]
                assert [i.id for i in await host.paused(ALICE, "s1")] == [alice_id]
                assert [i.id for i in await host.pending(BOB)] == [bob_id]
                assert [i.id for i in await host.paused(BOB, "s1")] == [bob_id]
                assert await host.paused(ALICE, "s2") == []
            assert (await there.pending(ALICE))[0].tool_name == "add"
            await there.answer(ALICE, alice_id, Answer(approved=True))
            await there.answer(BOB, bob_id, Answer(approved=False))
    assert alices.answers == [Answer(approved=True)] and bobs.answers[0].approved is False
    for host in (here, there):
        assert await host.pending(ALICE) == [] and await host.pending(BOB) == []
