"""``--input-len`` / ``--output-len``: the distributions, the synthetic prompts, and a real
server answering each prompt with the length it asked for, on several transports."""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

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
from uamp_trio.bench.lengths import VOCABULARY, Lengths, parse_lengths, synthetic_prompt
from uamp_trio.bench.workload import Conversation, Workload


@pytest.mark.parametrize(
    ("text", "lengths"),
    [
        ("7", Lengths("const", 7)),
        ("const:12", Lengths("const", 12)),
        ("uniform:3:9", Lengths("uniform", 3, 9)),
        ("uniform:4:4", Lengths("uniform", 4, 4)),
        ("normal:100:20.5", Lengths("normal", 100, 20.5)),
    ],
)
def test_distributions_parse(text: str, lengths: Lengths) -> None:
    assert parse_lengths(text) == lengths


@pytest.mark.parametrize(
    "text",
    ["", "0", "x", "const", "const:0", "const:1.5", "uniform:5", "uniform:9:3", "uniform:0:3",
     "normal:10", "normal:10:-1", "normal:0:1", "gauss:1:2", "const:2000000"],
)  # fmt: skip
def test_bad_distributions_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_lengths(text)


@given(st.integers(1, 500), st.integers(0, 500), st.integers(0, 2**32))
def test_uniform_draws_stay_in_their_range(low: int, width: int, seed: int) -> None:
    lengths = parse_lengths(f"uniform:{low}:{low + width}")
    rng = random.Random(seed)
    assert all(low <= lengths.draw(rng) <= low + width for _ in range(20))


def test_a_normal_length_has_its_mean_and_never_drops_below_one() -> None:
    rng = random.Random(3)
    draws = [Lengths("normal", 50, 10).draw(rng) for _ in range(5000)]
    assert statistics.fmean(draws) == pytest.approx(50, abs=1)
    assert statistics.pstdev(draws) == pytest.approx(10, abs=1)
    assert min(Lengths("normal", 1, 5).draw(rng) for _ in range(500)) == 1


def test_a_synthetic_prompt_has_its_words_and_leads_with_the_length_asked() -> None:
    rng = random.Random(1)
    prompt = synthetic_prompt(10, 42, rng).split()
    assert len(prompt) == 10 and prompt[0] == "42" and set(prompt[1:]) <= set(VOCABULARY)
    assert len(synthetic_prompt(5, None, rng).split()) == 5
    assert synthetic_prompt(1, 7, rng) == "7"

    # A seeded workload makes the same prompts again.
    def prompts(seed: int) -> list[str]:
        sizes = {"input_len": Lengths("uniform", 2, 9), "output_len": Lengths("const", 3)}
        workload = Workload((Conversation(("unused",)),), 2, seed, **sizes)
        script = workload.script()
        return [script.next().prompt for _ in range(6)]

    assert prompts(5) == prompts(5) != prompts(6)


class Sized(TestAgent):
    """Answers as many words as the last prompt's first word says; notes each turn's max_tokens."""

    name = "sized"

    def __init__(self) -> None:
        self.limits: list[object] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.limits.append(request.metadata.get("max_tokens"))
        words = request.messages[-1].text.split()
        for _ in range(int(words[0])):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="w ")))


@pytest.mark.parametrize("transport", ["openai", "anthropic", "uamp-ws", "a2a", "acp"])
async def test_each_reply_has_the_length_its_prompt_asked(serve_app: Any, transport: str) -> None:
    agent = Sized()
    server = await serve_app(create_app([agent]))
    config = BenchConfig(
        url=server.url, agent="sized", transport=transport, concurrency=2, requests=10, seed=8,
        input_len=parse_lengths("uniform:3:9"), output_len=parse_lengths("uniform:1:12"),
    )  # fmt: skip
    summary, samples = await run_bench(config)
    assert summary.ok == 10, summary.errors_by_kind
    asked = [s.output_asked for s in samples]
    assert all(isinstance(a, int) and 1 <= a <= 12 for a in asked) and len(set(asked)) > 2
    assert all(len(s.deltas) == s.output_asked for s in samples)
    assert all(s.prompt_words is not None and 3 <= s.prompt_words <= 9 for s in samples)
    if transport in ("openai", "anthropic"):  # the output limit travels too
        assert sorted(agent.limits) == sorted(asked)  # type: ignore[type-var]


def test_the_demo_agent_is_cut_to_the_output_length(tmp_path: Path) -> None:
    saved = tmp_path / "r.jsonl"
    with uamp_serve() as url:
        done = uamp(
            "bench", f"{url}/agents/demo", "-c", "2", "-n", "6", "--input-len", "6",
            "--output-len", "4", "--save-requests", str(saved), "--no-progress",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        bad = uamp("bench", url, "--input-len", "6", "--prompt", "x")
        assert bad.returncode == 2 and "replace --prompt" in bad.stderr
        bad = uamp("bench", url, "--output-len", "uniform:9:3")
        assert bad.returncode == 2 and "A <= B" in bad.stderr
    lines = [orjson.loads(line) for line in saved.read_bytes().splitlines()]
    # "You said: " and the 6 words, cut by max_tokens to the 4 asked.
    assert [(r["prompt_words"], r["output_asked"], r["deltas"]) for r in lines] == [(6, 4, 4)] * 6
