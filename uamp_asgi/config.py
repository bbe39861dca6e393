"""What an embedding app configures: the options of ``uamp serve`` that apply to ASGI.

The names are those of :func:`uamp_trio.create_app` and its ``ServerConfig``
(``authenticator``, ``allow_anonymous``, ``payment_policy``,
``response_signer``, ``max_body_size``, the stores' ``event_log``), so one set
of objects configures either server. Transport limits a Trio server enforces in its engines
(header sizes, connection counts, timeouts) are the ASGI server's here, except the
WebSocket send timeout (``websocket_send_timeout``), which the app keeps itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from uamp_proto.adapters.a2a_push import MAX_CONFIG_BYTES, MAX_CONFIGS
from uamp_proto.busy import BusyError, parse_policy
from uamp_proto.history import MAX_OWNER_HISTORY_BYTES
from uamp_proto.payment import PaymentPolicy
from uamp_proto.principal import Principal
from uamp_proto.response import MAX_OUTPUT_BYTES
from uamp_stores import EventLog, MemoryEventLog, MemoryTaskStore, TaskStore
from uamp_stores.a2a_push import PushSender

if TYPE_CHECKING:
    from uamp_proto.adapters.a2a import A2ATask, Update
    from uamp_proto.jose import JWKS, PrivateKey
    from uamp_proto.signing import ResponseSigner

__all__ = ["TRANSPORTS", "Authenticator", "CardKey", "Config", "PushDelivery"]

#: Every transport this package serves, by name (``Config.transports``).
TRANSPORTS = (
    "completions",
    "responses",
    "anthropic",
    "agui",
    "uamp",
    "sse_events",
    "realtime",
    "mcp",
    "a2a",
    "acp",
    "ai_sdk",
)


class Authenticator(Protocol):
    """Turns a bearer token (or none) into a principal; raises a ``UampError`` to refuse.

    ``uamp_trio.trust.auth``'s authenticators (API keys, JWT) satisfy it and
    import no event loop.
    """

    async def authenticate(self, token: str | None) -> Principal:
        """The caller's principal."""
        ...


class CardKey(Protocol):
    """The key A2A agent cards are signed with (P-256 or Ed25519), its id and public set.

    ``uamp serve``'s envelope key (``uamp_trio.envelope.keys.EnvelopeKey``,
    which ``serve_options(["--a2a-sign-cards", ...])`` gives) satisfies it.
    """

    @property
    def key(self) -> PrivateKey:
        """The private key."""
        ...

    @property
    def kid(self) -> str:
        """Its key id (the signatures' ``kid``)."""
        ...

    def jwks(self) -> JWKS:
        """Its public half, published at ``/.well-known/jwks.json``."""
        ...


class PushDelivery(Protocol):
    """Delivers A2A push notifications: ``uamp serve``'s webhook client.

    :class:`uamp_stores.a2a_push.PushSender` (anyio, no Trio: the default;
    ``serve_options`` gives one with ``--a2a-push-allow``) satisfies it.
    """

    def check_target(self, url: str) -> None:
        """Refuse a webhook URL it will not deliver to (raises ``A2AError``)."""
        ...

    def notify(self, nursery: Any, task: A2ATask, update: Update) -> None:
        """POST ``update`` to each of ``task``'s webhooks, in tasks of ``nursery``."""
        ...


def _busy_policy(_: object, __: object, value: str) -> None:
    """Refuse an ``on_busy`` that names no policy (ValueError)."""
    try:
        parse_policy(value)
    except BusyError as exc:
        raise ValueError(f"on_busy: {exc}") from None


def _positive(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    """Refuse a duration that is not above zero (ValueError; ``math.inf`` is one)."""
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, not {value!r}")


def _memory_log() -> EventLog:
    """The default event log: this process's memory, bounded per principal."""
    return MemoryEventLog(max_sessions=4096, max_sessions_per_principal=256)


def _memory_tasks() -> TaskStore:
    """The default A2A task store: this process's memory, bounded per principal."""
    return MemoryTaskStore(max_tasks=4096, max_per_principal=512)


@attrs.define(kw_only=True)
class Config:
    """How :func:`uamp_asgi.app` serves its agents.

    Attributes:
        authenticator: Verifies the caller's bearer token (``Authorization``,
            or Anthropic's ``x-api-key``); ``None``: everyone is anonymous.
            When set, no agent runs for a caller it refuses (401), except on
            public routes (agent cards).
        payment_policy: Consulted before every response (a ledger-backed
            policy locks and settles money); ``None``: free.
        response_signer: Signs responses (spec 004), as ``uamp serve --sign-key``.
        max_body_size: Largest request body read, bytes (413 above it).
        max_sessions: UAMP WebSocket sessions one connection may hold.
        websocket_max_message_size: Largest WebSocket message taken, bytes:
            a bigger one closes the connection with 1009, as under ``uamp
            serve``. The ASGI server assembles a message before the app sees
            it, so set its own bound to match (uvicorn ``--ws-max-size``).
        websocket_send_timeout: Longest a WebSocket send may wait for a peer
            that leaves its messages unread (seconds): then the peer is
            dropped -- its handler's tasks, running responses included, are
            cancelled and the ASGI server closes the connection -- as ``uamp
            serve --ws-send-timeout`` drops it (``math.inf``: never).
        transports: The transports served (names of :data:`TRANSPORTS`).
        sse_max_sessions: UAMP HTTP+SSE sessions one principal may hold; one
            more ``session.create`` gets 429 ``too_many_sessions``.
        sse_session_idle_timeout: An HTTP+SSE session with no stream, no
            running turn and no POST for this long (seconds) is forgotten.
        payment_wait: How long a UAMP or Realtime response held for payment waits
            (seconds; the ``payment.required``'s ``expires_at``), as ``uamp
            serve``'s sessions (``SessionLimits.payment_wait``).
        a2a_card_key: Sign every A2A agent card with this key (``uamp serve
            --a2a-sign-cards``); its public half joins the JWKS the
            signatures' ``jku`` names.
        a2a_push: Deliver A2A push notifications with this webhook client:
            by default ``uamp serve``'s (:class:`~uamp_stores.a2a_push.PushSender`,
            public targets only; ``PushSender(allow=["127.0.0.1/32"])`` admits
            a local receiver). ``None``: the config methods answer
            ``PushNotificationNotSupportedError`` and the card says
            ``pushNotifications: false``.
        a2a_max_push_configs: Push-notification configs one A2A task may hold.
        a2a_max_push_config_bytes: Largest push-notification config (JSON bytes).
        metrics: Serve ``GET /metrics`` (Prometheus text, ``uamp serve``'s
            instruments; needs ``prometheus-client``). Behind the
            authenticator, as under ``uamp serve``.
        on_busy: What a message for a conversation whose response is
            running does (docs/busy.md), as ``uamp serve --on-busy``:
            ``reject``, ``enqueue`` (the default), ``interrupt`` or
            ``rollback``; a request may name its own (``uamp.on_busy``).
            Realtime and the AI SDK stream apply it; the other transports
            here refuse such a message (``reject``).
        busy_max_queued: Messages one conversation may hold waiting.
        busy_max_queued_per_principal: Messages one principal may hold waiting.
        event_log: Where resumable UAMP sessions are logged (docs/resume.md):
            ``uamp_stores.open_event_log(WHERE)``, the store ``uamp serve
            --store WHERE`` opens -- a SQLite file (survives a restart) or
            ``redis://HOST:PORT/DB`` (shared by several processes). The
            default keeps them in this process's memory (4096 sessions, 256
            a principal).
        a2a_tasks: Where A2A tasks are kept: ``uamp_stores.open_task_store(WHERE,
            max_tasks, max_per_principal)``, the store ``uamp serve --store
            WHERE --a2a-max-tasks N --a2a-max-tasks-per-principal M`` opens --
            ``redis://HOST:PORT/DB`` shares them (and their updates and cancel
            requests) with every process on that Redis, ``uamp serve``'s too.
            The default keeps them in this process's memory (4096 tasks, 512
            a principal).
        a2a_extended_card: Card members an authenticated caller gets from
            ``GetExtendedAgentCard`` (skills added, description and the other
            extendable members replaced; ``uamp serve --a2a-extended-card``).
            Served, and announced by the card's
            ``capabilities.extendedAgentCard``, only with an ``authenticator``.
        anthropic_ping_interval: Seconds of agent silence after which an
            Anthropic Messages stream gets a ``ping`` event (``math.inf``:
            never), as ``uamp serve``'s.
        max_history_bytes_per_principal: Bytes all of one principal's live
            UAMP sessions (WebSocket and HTTP+SSE, every connection) keep of
            their conversations; past it, its least recently used sessions
            start afresh, as ``uamp serve``'s
            (``ServerConfig.max_history_bytes_per_principal``). Read once,
            when the app is built: every connection counts against that budget.
        max_response_output_bytes: Most output one response keeps, on every
            transport (its text, arguments, thinking, audio...): past it the
            agent is stopped and the response ends with the protocol's error
            (UAMP ``response.error`` ``output_too_large``), as ``uamp serve``'s
            (``ServerConfig.max_response_output_bytes``).
    """

    authenticator: Authenticator | None = None
    payment_policy: PaymentPolicy | None = None
    response_signer: ResponseSigner | None = None
    max_body_size: int = 4 * 1024 * 1024
    max_sessions: int = 64
    websocket_max_message_size: int = 4 * 1024 * 1024
    websocket_send_timeout: float = attrs.field(default=30.0, validator=_positive)
    transports: tuple[str, ...] = TRANSPORTS
    sse_max_sessions: int = 64
    sse_session_idle_timeout: float = 300.0
    metrics: bool = False
    payment_wait: float = 600.0
    a2a_card_key: CardKey | None = None
    a2a_push: PushDelivery | None = attrs.field(factory=PushSender)
    a2a_max_push_configs: int = MAX_CONFIGS
    a2a_max_push_config_bytes: int = MAX_CONFIG_BYTES
    event_log: EventLog = attrs.field(factory=_memory_log)
    a2a_tasks: TaskStore = attrs.field(factory=_memory_tasks)
    anthropic_ping_interval: float = 10.0
    a2a_extended_card: Mapping[str, Any] | None = None
    on_busy: str = attrs.field(default="enqueue", validator=_busy_policy)
    busy_max_queued: int = 8
    busy_max_queued_per_principal: int = 32
    max_history_bytes_per_principal: int = attrs.field(
        default=MAX_OWNER_HISTORY_BYTES, validator=attrs.validators.ge(1)
    )
    max_response_output_bytes: int = attrs.field(
        default=MAX_OUTPUT_BYTES, validator=attrs.validators.ge(1)
    )
