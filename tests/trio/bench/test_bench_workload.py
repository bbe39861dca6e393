"""``--dataset`` and ``--turns``: the dataset's reading, each worker's script, and every
transport carrying a conversation's turns to a real server (which sees the history)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._support.agents import TestAgent
from tests._support.cli import uamp, uamp_serve
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.bench import BenchConfig, run_bench
from uamp_trio.bench.processes import split
from uamp_trio.bench.workload import Conversation, Workload, parse_dataset, share


def _lines(*values: object) -> list[bytes]:
    return [orjson.dumps(v) if not isinstance(v, bytes) else v for v in values]


def test_a_dataset_holds_prompts_and_whole_conversations() -> None:
    chat = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "left out"},
            {"role": "user", "content": "two"},
        ]
    }
    got = parse_dataset(_lines({"prompt": "hi"}, b"  ", chat))
    assert got == (Conversation(("hi",)), Conversation(("one", "two")))


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"{", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"prompt": ""}', "non-empty"),
        (b'{"prompt": 3}', "non-empty"),
        (b'{"other": 1}', "needs 'prompt' or 'messages'"),
        (b'{"messages": [{"content": "x"}]}', "'role'"),
        (b'{"messages": [{"role": "assistant", "content": "x"}]}', "no user message"),
        (b'{"messages": [{"role": "user", "content": [1]}]}', "non-empty string"),
    ],
)
def test_a_bad_line_names_its_place(line: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says) as caught:
        parse_dataset([b'{"prompt": "ok"}', line], "d.jsonl")
    assert "d.jsonl:2" in str(caught.value)
    with pytest.raises(ValueError, match="no conversation"):
        parse_dataset([b"", b"\n"])


@given(st.lists(st.binary(max_size=40), max_size=5))
def test_any_bytes_are_a_dataset_or_a_value_error(lines: list[bytes]) -> None:
    with contextlib.suppress(ValueError):
        parse_dataset(lines)


def test_a_script_plays_turns_wrapping_and_keeps_the_history() -> None:
    script = Workload((Conversation(("a", "b")),), turns=3).script()
    turns = []
    for _ in range(4):
        turn = script.next()
        turns.append(turn)
        script.answered(turn, f"re {turn.prompt}")
    assert [(t.index, t.prompt) for t in turns] == [(0, "a"), (1, "b"), (2, "a"), (0, "a")]
    assert len({t.thread for t in turns[:3]}) == 1 and turns[3].thread != turns[0].thread
    assert turns[2].history == (
        ("user", "a"),
        ("assistant", "re a"),
        ("user", "b"),
        ("assistant", "re b"),
    )
    assert turns[3].history == () and script.started == 2
    # Without --turns, a conversation lasts its user messages.
    plain = Workload((Conversation(("x", "y", "z")),)).script()
    assert [plain.next().index for _ in range(4)] == [0, 1, 2, 0]


def test_a_seed_fixes_the_sequence_of_conversations() -> None:
    pool = tuple(Conversation((str(i),)) for i in range(50))

    def drawn(seed: int) -> list[str]:
        script = Workload(pool, seed=seed).script()
        return [script.next().prompt for _ in range(30)]

    assert drawn(7) == drawn(7) != drawn(8)
    assert len(set(drawn(7))) > 5


class Remembering(TestAgent):
    """Answers ``re PROMPT`` and notes, per turn, the conversation the server handed it."""

    name = "mem"

    def __init__(self) -> None:
        self.seen: list[list[tuple[str, str]]] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.seen.append([(m.role, m.text) for m in request.messages])
        prompt = request.messages[-1].text
        for word in ("re ", prompt):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=word)))


@pytest.mark.parametrize(
    "transport",
    [
        "openai",
        "anthropic",
        "responses",
        "agui",
        "ai-sdk",
        "a2a",
        "a2a-0.3",
        "uamp-ws",
        "uamp-sse",
        "acp",
        "mcp",
        "envelope-http",
        "envelope-ws",
    ],
)
async def test_each_transport_carries_a_conversation(serve_app: Any, transport: str) -> None:
    agent = Remembering()
    server = await serve_app(create_app([agent]))
    dataset = (Conversation(("p", "q")), Conversation(("r",)))
    config = BenchConfig(
        url=server.url, agent="mem", transport=transport, concurrency=2, requests=12,
        dataset=dataset, turns=3, seed=1,
    )  # fmt: skip
    summary, _samples = await run_bench(config)
    data = summary.to_json()
    assert data["ok"] == 12, data["errors_by_kind"]
    assert len(agent.seen) == 12
    for seen in agent.seen:
        users = [text for role, text in seen if role == "user"]
        replies = [text for role, text in seen if role == "assistant"]
        # Turn k of a conversation: the k earlier prompts and their replies came along.
        assert len(users) in (1, 2, 3) and len(replies) == len(users) - 1, seen
        assert replies == [f"re {u}" for u in users[:-1]]
        assert users in (["p"], ["p", "q"], ["p", "q", "p"], ["r"], ["r", "r"], ["r", "r", "r"])
    # Every conversation ran its three turns (two workers, two conversations each).
    assert sum(len([t for r, t in s if r == "user"]) == 3 for s in agent.seen) == 4


def test_the_command_reads_a_dataset(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_bytes(b'{"prompt": "one"}\n{"messages": [{"role": "user", "content": "two"}]}\n')
    saved = tmp_path / "r.jsonl"
    with uamp_serve() as url:
        done = uamp(
            "bench", url, "--agent", "demo", "-c", "2", "-n", "6", "--dataset", str(dataset),
            "--turns", "2", "--seed", "3", "--save-requests", str(saved), timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert len(saved.read_bytes().splitlines()) == 6
        bad = uamp("bench", url, "--dataset", str(dataset), "--prompt", "x")
        assert bad.returncode == 2 and "--dataset replaces" in bad.stderr
        (tmp_path / "e.jsonl").write_bytes(b"{}\n")
        bad = uamp("bench", url, "--dataset", str(tmp_path / "e.jsonl"))
        assert bad.returncode == 2 and "e.jsonl:1" in bad.stderr


def test_the_processes_share_a_dataset_out_by_the_seed() -> None:
    pool = tuple(Conversation((f"c{i}",)) for i in range(10))
    config = BenchConfig(url="http://x", requests=30, dataset=pool, seed=4)
    shares = [part.dataset for part in split(config, 3)]
    dealt = [c for s in shares for c in s]
    # Disjoint, covering, and the same again for the same seed (another for another).
    assert sorted(dealt, key=lambda c: c.turns) == sorted(pool, key=lambda c: c.turns)
    assert len(set(dealt)) == 10 and [len(s) for s in shares] == [4, 3, 3]
    assert [p.dataset for p in split(config, 3)] == shares
    assert [p.dataset for p in split(attrs.evolve(config, seed=5), 3)] != shares
    # Without a seed, file order dealt round; fewer conversations than processes: one each.
    unseeded = [p.dataset for p in split(attrs.evolve(config, seed=None), 3)]
    assert unseeded[1] == (pool[1], pool[4], pool[7])
    few = [p.dataset for p in split(attrs.evolve(config, dataset=pool[:2]), 3)]
    assert few == [(pool[0],), (pool[1],), (pool[0],)]
    assert share(pool, 1, 0, 4) == pool


async def test_each_request_says_its_conversation_and_turn(serve_app: Any) -> None:
    server = await serve_app(create_app([Remembering()]))
    dataset = (Conversation(("p", "q")), Conversation(("r",)))
    config = BenchConfig(url=server.url, agent="mem", transport="uamp-ws", concurrency=1,
                         requests=12, dataset=dataset, turns=3, seed=2)  # fmt: skip
    _summary, samples = await run_bench(config)
    by_conversation: dict[str | None, list[int | None]] = {}
    for sample in sorted(samples, key=lambda s: s.start):
        by_conversation.setdefault(sample.conversation, []).append(sample.turn)
    assert None not in by_conversation and len(by_conversation) == 4
    assert all(turns == [0, 1, 2] for turns in by_conversation.values())
    record = samples[0].record()
    assert record["conversation"] == samples[0].conversation and record["tool_calls"] == []
    assert record["process"] == 0


def test_no_conversation_is_split_across_processes(tmp_path: Path) -> None:
    dataset, saved = tmp_path / "d.jsonl", tmp_path / "r.jsonl"
    dataset.write_bytes(b"".join(b'{"prompt": "say %d"}\n' % i for i in range(6)))
    with uamp_serve() as url:
        done = uamp(
            "bench", url, "--agent", "demo", "-c", "2", "-n", "24", "--dataset", str(dataset),
            "--turns", "3", "--seed", "9", "--processes", "2", "--save-requests", str(saved),
            "--no-progress", timeout=180,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in saved.read_bytes().splitlines()]
    assert len(lines) == 24 and {line["process"] for line in lines} == {0, 1}
    where: dict[str, set[int]] = {}
    turns: dict[str, list[int]] = {}
    for line in sorted(lines, key=lambda line: (line["process"], line["start"])):
        where.setdefault(line["conversation"], set()).add(line["process"])
        turns.setdefault(line["conversation"], []).append(line["turn"])
    assert all(len(processes) == 1 for processes in where.values())
    assert all(t == list(range(len(t))) for t in turns.values())
