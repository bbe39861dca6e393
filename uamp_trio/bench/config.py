"""What one ``uamp bench`` run does, and the rules that read its URL and duration."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import attrs

from ..units import parse_duration
from .arrivals import ARRIVALS, RatePlan
from .lengths import Lengths
from .workload import Conversation, Workload

__all__ = [
    "TRANSPORTS",
    "BenchConfig",
    "chat_completions_url",
    "endpoint_url",
    "parse_goodput",
    "parse_header",
    "parse_warmup",
    "uamp_ws_url",
]

#: The transports ``--transport`` accepts.
TRANSPORTS = (
    "openai",
    "uamp-ws",
    "uamp-sse",
    "acp",
    "acp-stdio",
    "mcp",
    "realtime",
    "agui",
    "a2a",
    "a2a-0.3",
    "anthropic",
    "responses",
    "ai-sdk",
    "envelope-http",
    "envelope-ws",
)


def parse_header(text: str) -> tuple[str, str]:
    """``Name: value`` (curl's and oha's ``-H`` form) as a pair.

    Raises:
        ValueError: No colon, or an empty name.
    """
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"not a header: {text!r} (use 'Name: value')")
    return name.strip(), value.strip()


#: The SLOs ``--goodput`` takes.
SLOS = ("ttft", "tpot", "e2e")


def parse_goodput(items: Sequence[str]) -> dict[str, float]:
    """``["ttft:200", "e2e:1000"]`` (milliseconds) as seconds by SLO name.

    Raises:
        ValueError: Not ``NAME:MS``, an unknown name, or a limit that is not positive.
    """
    slo: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or name not in SLOS:
            raise ValueError(f"--goodput takes {'/'.join(SLOS)}:MS, not {item!r}")
        try:
            ms = float(value)
        except ValueError:
            raise ValueError(f"--goodput {item}: not a number of milliseconds") from None
        if not ms > 0:
            raise ValueError(f"--goodput {item}: the limit must be positive")
        slo[name] = ms / 1000
    return slo


def parse_warmup(text: str) -> tuple[int, float]:
    """``--warmup N`` (requests) or a duration (``10s``): (requests, seconds).

    Raises:
        ValueError: Neither a whole number nor a duration.
    """
    if text.isdigit():
        return int(text), 0.0
    return 0, parse_duration(text)


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _check(url: str, schemes: Sequence[str]) -> None:
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.netloc:
        raise ValueError(f"not an {' or '.join(schemes)} URL: {url!r}")


def chat_completions_url(url: str, agent: str | None = None) -> str:
    """The Chat Completions endpoint for what the user gave.

    * ``.../chat/completions`` is the endpoint itself and is kept;
    * a server root with ``agent`` becomes ``/agents/AGENT/v1/chat/completions``;
    * a path ending in ``/v1`` (vLLM, OpenAI-style bases) gets ``/chat/completions``;
    * any other path -- an agent's base ``/agents/NAME`` or a server root --
      gets ``/v1/chat/completions``.

    Raises:
        ValueError: Not an http(s) URL.
    """
    _check(url, ("http", "https"))
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/chat/completions"):
        return _with_path(url, path)
    if agent is not None:
        path = f"{path}/agents/{agent}"
    if path.endswith("/v1"):
        return _with_path(url, path + "/chat/completions")
    return _with_path(url, path + "/v1/chat/completions")


def endpoint_url(url: str, agent: str | None, route: str) -> str:
    """The endpoint ``route`` (``agui``, ``a2a``) of an agent, from what the user gave.

    A URL whose path already ends in ``/ROUTE`` is kept; a server root with
    ``agent`` becomes ``/agents/AGENT/ROUTE``; any other path (an agent's
    base, or a single-agent server's root) gets ``/ROUTE``.

    Raises:
        ValueError: Not an http(s) URL.
    """
    _check(url, ("http", "https"))
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/" + route):
        return _with_path(url, path)
    if agent is not None:
        path = f"{path}/agents/{agent}"
    return _with_path(url, f"{path}/{route}")


def uamp_ws_url(url: str, agent: str | None = None) -> tuple[str, str | None]:
    """The UAMP WebSocket URL and the agent to name in ``session.create``.

    ``ws(s)://`` URLs are kept. An http(s) agent base ``/agents/NAME`` becomes
    ``ws(s)://.../agents/NAME/uamp``; a server root becomes the multi-agent
    endpoint ``/ws`` (with ``agent``, if given, named in each session).

    Raises:
        ValueError: Not an http(s) or ws(s) URL.
    """
    _check(url, ("http", "https", "ws", "wss"))
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if parts.scheme in ("ws", "wss"):
        return url, agent
    if agent is None and "/agents/" in path:
        if not path.endswith("/uamp"):
            path += "/uamp"
    elif not path.endswith("/ws"):
        path += "/ws"
    return urlunsplit((scheme, parts.netloc, path, parts.query, "")), agent


def uamp_sse_url(url: str, agent: str | None = None) -> tuple[str, str]:
    """The server's base URL and the agent, for UAMP over HTTP+SSE.

    An agent base ``http://host/agents/NAME`` names the agent; a server
    root needs ``agent``.

    Raises:
        ValueError: Not an http(s) URL, or no agent.
    """
    _check(url, ("http", "https"))
    parts = urlsplit(url)
    base, _, rest = parts.path.rstrip("/").partition("/agents/")
    name = agent or rest.split("/")[0]
    if not name:
        raise ValueError("--transport uamp-sse needs an agent: /agents/NAME or --agent")
    return urlunsplit((parts.scheme, parts.netloc, base, "", "")), name


def realtime_url(url: str, agent: str | None = None) -> str:
    """The OpenAI Realtime WebSocket URL.

    ``ws(s)://`` URLs are kept. An http(s) agent base ``/agents/NAME`` (or a
    server root with ``agent``) becomes ``ws(s)://.../agents/NAME/realtime``;
    a server root without one ``/v1/realtime``; a URL already ending in
    ``/realtime`` keeps its path.

    Raises:
        ValueError: Not an http(s) or ws(s) URL.
    """
    _check(url, ("http", "https", "ws", "wss"))
    parts = urlsplit(url)
    if parts.scheme in ("ws", "wss"):
        return url
    scheme = {"http": "ws", "https": "wss"}[parts.scheme]
    path = parts.path.rstrip("/")
    if not path.endswith("/realtime"):
        if "/agents/" in path:
            path += "/realtime"
        elif agent is not None:
            path += f"/agents/{agent}/realtime"
        else:
            path += "/v1/realtime"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


@attrs.frozen
class BenchConfig:
    """One benchmark run.

    Attributes:
        url: What the user gave (see :func:`chat_completions_url`, :func:`uamp_ws_url`).
        transport: One of :data:`TRANSPORTS`.
        agent: The agent to address at a server root.
        model: Chat Completions ``model`` (default: the agent's name, else ``uamp``).
        concurrency: Requests in flight at once.
        requests: Stop after this many (when ``duration`` is ``None``).
        duration: Stop starting requests after this many seconds.
        prompt: The user message of every request.
        stream: Ask for a streamed response.
        http2: Speak HTTP/2 (h2c prior knowledge on ``http://``, ALPN on ``https://``).
        headers: Sent with every request (``Authorization`` ...).
        timeout: Seconds one request may take before it counts as a ``timeout``.
        max_tokens: Chat Completions ``max_tokens``, if set.
        insecure: Do not verify TLS certificates.
        rate: An open loop's rate plan (``None``: a closed loop; :mod:`.arrivals`).
        arrival: The open loop's arrival process (``poisson``, ``constant``, ``gamma``).
        burstiness: The gamma process's shape.
        seed: The open loop's random seed (``None``: a new one each run).
        warmup_requests: Requests run first and left out of the figures.
        warmup_s: Seconds run first and left out of the figures.
        slo: Seconds by ``ttft``/``tpot``/``e2e`` a request must meet to count as goodput.
        dataset: The conversations to play (empty: ``prompt``; :mod:`.workload`).
        turns: Turns per conversation (``None``: as many as its user messages).
        input_len: The synthetic prompts' lengths in words (:mod:`.lengths`).
        output_len: The output lengths the synthetic prompts ask for.
    """

    url: str
    transport: str = "openai"
    agent: str | None = None
    model: str | None = None
    concurrency: int = 10
    requests: int | None = 100
    duration: float | None = None
    prompt: str = "Say hello."
    stream: bool = True
    http2: bool = False
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = 60.0
    max_tokens: int | None = None
    insecure: bool = False
    rate: RatePlan | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    seed: int | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    slo: dict[str, float] = attrs.field(factory=dict)
    dataset: tuple[Conversation, ...] = ()
    turns: int | None = None
    input_len: Lengths | None = None
    output_len: Lengths | None = None

    def workload(self) -> Workload:
        """The run's conversations (seeded with ``seed``)."""
        return Workload(
            self.dataset or (Conversation((self.prompt,)),),
            self.turns,
            self.seed,
            input_len=self.input_len,
            output_len=self.output_len,
        )

    def __attrs_post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {self.transport!r}: one of {TRANSPORTS}")
        if self.concurrency < 1:
            raise ValueError("--concurrency must be at least 1")
        if not self.stream and self.transport not in ("openai", "anthropic", "responses"):
            raise ValueError(
                "--no-stream is for --transport openai, anthropic or responses, "
                f"not {self.transport}"
            )
        if (
            self.duration is None
            and self.rate is None
            and (self.requests is None or self.requests < 1)
        ):
            raise ValueError("--requests must be at least 1")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"unknown arrival {self.arrival!r}: one of {', '.join(ARRIVALS)}")
        if not self.burstiness > 0:
            raise ValueError("--burstiness must be positive")
        if self.turns is not None and self.turns < 1:
            raise ValueError("--turns must be at least 1")
        if self.dataset and (self.input_len is not None or self.output_len is not None):
            raise ValueError("--input-len/--output-len make their own prompts: not with --dataset")
        unknown = set(self.slo) - set(SLOS)
        if unknown:
            raise ValueError(f"unknown SLO {sorted(unknown)[0]!r}: one of {', '.join(SLOS)}")
