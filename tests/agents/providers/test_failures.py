"""What every HTTP provider does alike when the server fails: retries, errors, cut streams.

Each test runs once per vendor (``provider_server``) against that vendor's
fake server and recorded error bodies; :data:`FAILURES` holds what differs
between the vendors (the wording of their errors, the retryable status
besides 429, the end marker of a stream), read from each vendor's
``failures.json`` beside its recorded bodies.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import pytest

from uamp_agents.providers import ModelRequest, ModelResponse, Provider, ProviderError

from . import fakeserver as fake
from .conftest import PROVIDERS
from .fakeserver import ASK

Mode = Literal["generate", "stream"]
MODES = pytest.mark.parametrize("mode", ["generate", "stream"])


def _pairs(pairs: list[list[str]]) -> tuple[tuple[str, str], ...]:
    return tuple((name, value) for name, value in pairs)


def _file_and_status(pair: list[Any]) -> tuple[str, int]:
    return str(pair[0]), int(pair[1])


@attrs.frozen(kw_only=True)
class Failures:
    """How one vendor's server words its failures (``fixtures/VENDOR/failures.json``).

    Attributes:
        rate_limit_headers: Headers sent with the recorded 429.
        retry_after: The wait the provider should read from that 429 (Gemini
            gives it in the body's ``google.rpc.RetryInfo``, not a header).
        rate_limit_words: Part of the 429's message.
        also_retryable: A recorded error body besides 429 that is retried
            (Anthropic's 529 "overloaded" ...), and its status.
        bad_request_words: Part of the recorded 400's message.
        ending: Named in the error of a stream cut before its end.
        bad_json: A plain response body that is not whole JSON.
    """

    rate_limit_headers: tuple[tuple[str, str], ...] = attrs.field(converter=_pairs)
    retry_after: float
    rate_limit_words: str
    also_retryable: tuple[str, int] = attrs.field(converter=_file_and_status)
    bad_request_words: str
    ending: str
    bad_json: str


FAILURES = {name: Failures(**fake.fixture_json(f"{name}/failures.json")) for name in PROVIDERS}


async def call(provider: Provider, mode: Mode) -> ModelResponse:
    """One call of ``mode``; a stream's text deltas must add up to its answer."""
    if mode == "generate":
        return await provider.generate(ModelRequest(messages=ASK))
    events, final = await fake.collect(provider.stream(ModelRequest(messages=ASK)))
    assert "".join(fake.texts(events)) == final.message.content
    return final


def answer(name: str, mode: Mode) -> fake.Reply:
    """The vendor's recorded "Paris" answer, whole or streamed."""
    if mode == "generate":
        return fake.json_reply(f"{name}/text.json")
    return fake.sse_reply(f"{name}/text.sse")


@MODES
async def test_429_and_overload_are_retried_then_succeed(
    provider_server: tuple[str, fake.FakeServer], mode: Mode
) -> None:
    name, server = provider_server
    overloaded = FAILURES[name].also_retryable
    server.queue(
        fake.json_reply(f"{name}/error_429.json", status=429, headers=(("retry-after", "0"),)),
        fake.json_reply(f"{name}/{overloaded[0]}", status=overloaded[1]),
        answer(name, mode),
    )
    result = await call(PROVIDERS[name](server), mode)
    assert result.message.content == "Paris is the capital of France."
    assert len(server.requests) == 3


async def test_429_reports_how_long_to_wait(provider_server: tuple[str, fake.FakeServer]) -> None:
    name, server = provider_server
    failures = FAILURES[name]
    server.queue(
        fake.json_reply(f"{name}/error_429.json", status=429, headers=failures.rate_limit_headers)
    )
    error = await fake.provider_error(call(PROVIDERS[name](server, max_retries=0), "generate"))
    assert error.status == 429
    assert error.retryable
    assert error.retry_after == failures.retry_after
    assert failures.rate_limit_words in error.message


@MODES
async def test_500_exhausts_retries(
    provider_server: tuple[str, fake.FakeServer], mode: Mode
) -> None:
    name, server = provider_server
    server.queue(*[fake.json_reply(f"{name}/error_500.json", status=500)] * 2)
    error = await fake.provider_error(call(PROVIDERS[name](server, max_retries=1), mode))
    assert error.retryable
    assert error.status == 500
    assert len(server.requests) == 2


@MODES
async def test_400_is_not_retried(provider_server: tuple[str, fake.FakeServer], mode: Mode) -> None:
    name, server = provider_server
    server.queue(fake.json_reply(f"{name}/error_400.json", status=400))
    error = await fake.provider_error(call(PROVIDERS[name](server), mode))
    assert not error.retryable
    assert error.status == 400
    assert FAILURES[name].bad_request_words in error.message
    assert len(server.requests) == 1


async def test_stream_cut_before_its_end_is_an_error_and_not_replayed(
    provider_server: tuple[str, fake.FakeServer],
) -> None:
    name, server = provider_server
    server.queue(fake.sse_reply(f"{name}/cut.sse"))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as info:
        async for item in PROVIDERS[name](server).stream(ModelRequest(messages=ASK)):
            seen.append(item)
    assert info.value.retryable
    assert FAILURES[name].ending in info.value.message
    # Text had been yielded, so the call is not replayed, and nothing is final.
    assert fake.texts(seen)
    assert not any(isinstance(i, ModelResponse) for i in seen)
    assert len(server.requests) == 1


async def test_malformed_json(provider_server: tuple[str, fake.FakeServer]) -> None:
    name, server = provider_server
    server.queue(
        fake.sse_reply(f"{name}/malformed.sse"),
        fake.Reply(
            body=FAILURES[name].bad_json.encode(), headers=(("content-type", "application/json"),)
        ),
    )
    streamed, plain = await fake.malformed_json_errors(PROVIDERS[name](server))
    assert "malformed JSON" in streamed.message
    assert "malformed JSON" in plain.message
    assert not plain.retryable
    assert len(server.requests) == 2


@MODES
async def test_stalled_server_times_out(
    provider_server: tuple[str, fake.FakeServer], mode: Mode
) -> None:
    name, server = provider_server
    server.queue(fake.Reply(stall=True))
    error = await fake.provider_error(
        call(PROVIDERS[name](server, timeout=0.2, max_retries=0), mode)
    )
    assert error.retryable
    assert "timed out" in error.message
    assert len(server.requests) == 1
