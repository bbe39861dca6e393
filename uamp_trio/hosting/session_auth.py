"""The session host's authentication: who each session acts for, and until when.

Theory of operation
-------------------
Spec 000 section 10.3, as ``docs/security.md`` tells it. A session acts for
the connection's principal (the authenticated upgrade or HTTP request), or
for the principal of a token of its own: a ``session.create`` that brings
one is answered only once the app's authenticator has verified it
(:meth:`AuthPart._admit`: ``session.created``, or ``session.error``
``unauthorized`` and no session), and so is a ``session.update`` that brings
a new one (:meth:`AuthPart._reauthenticate`: the same principal, else
refused, and the session keeps its former credential). A session never
changes hands. Meanwhile the session's ``verifying`` event is unset: its next
response waits for it (:meth:`AuthPart._verified`), and an HTTP+SSE request
answers only after every pending check (:meth:`AuthPart.admitted`).

A credential expires: on a session whose principal has expired, anything but
what lets it go on or end (:data:`_WHILE_EXPIRED`) is refused
``unauthorized`` (:meth:`AuthPart._lapsed`, asked by the dispatch). A fresh
credential of the same principal, verified by a later HTTP request, renews
the connection's and its sessions' (:meth:`AuthPart.renew`).

:class:`AuthPart` is that side of
:class:`~uamp_trio.hosting.sessions.SessionHost`, which subclasses it; the
state it uses is declared by :class:`~uamp_trio.hosting.session_state.HostState`.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Final

from uamp_proto import events as ev
from uamp_proto.errors import LocalProtocolError
from uamp_proto.principal import Principal

from ..trust.auth import Authenticator, AuthError
from .outbox import OutboxClosed, Overloaded
from .session_state import HostState, SessionGone, SessionState, session_error

__all__ = ["AuthPart"]

log = logging.getLogger("uamp_trio.sessions")

#: What a session whose credential expired may still send (spec 000 section
#: 10.3): a fresh token, its end, a cancel; ``response.create`` is answered
#: ``response.error`` ``unauthorized`` by the response itself. Anything else
#: -- chat posts, joins, typing, reads, voice, tool results -- is refused.
_WHILE_EXPIRED: Final = frozenset(
    {
        "session.update",
        "session.end",
        "response.cancel",
        "response.create",
        "session.create",
        "ping",
    }
)
#: The refusal of an action on a session whose credential expired.
_EXPIRED: Final = "The session's token has expired; send session.update with a fresh one."


class AuthPart(HostState):
    """The session host's authentication (module docstring): each session's
    credential verified before it is used, and refused once it has expired."""

    def _lapsed(self, event: ev.Event) -> bool:
        """Refuse ``event`` when its session's credential has expired; ``True`` if refused."""
        session = self._session_of(event)
        if session is None or not session.principal.expired(self._clock()):
            return False
        with contextlib.suppress(LocalProtocolError):
            self.owe_quietly(session_error(session.id, "unauthorized", _EXPIRED, "token"))
        return True

    def renew(self, principal: Principal) -> None:
        """A request of the same principal brought a credential verified now (HTTP+SSE POSTs).

        The connection's and its sessions' credentials become that one, so
        their expiry is its expiry; another principal's changes nothing.
        """
        if principal.key != self.principal.key:
            return
        self.principal = principal
        for session in self._sessions.values():
            if session.principal.key == principal.key:
                session.principal = principal

    async def _admit(
        self,
        auth: Authenticator | None,
        session: SessionState,
        token: str | None,
        resume: str | None = None,
    ) -> None:
        """Verify a ``session.create`` token: created, or ``session.error`` ``unauthorized``.

        With ``resume`` (the ``resume_from`` event id) the session is then
        resumed from its log (:meth:`_resume`). Without ``auth`` the
        connection's principal is the session's.
        """
        try:
            if auth is None or token is None:
                principal: Principal | None = session.principal
                reason = ""
            else:
                principal = await auth.authenticate(token)
                reason = ""
        except AuthError as exc:
            principal, reason = None, exc.message
        try:
            if self._sessions.get(session.id) is not session:
                return  # ended while it was being verified
            if principal is None:
                self.refusal = ("unauthorized", reason)
                self._owe(session_error(session.id, "unauthorized", reason, "token"))  # ends it
                self._drop(session.id)
                return
            session.principal, session.token = principal, token
            if resume is not None:
                await self._resume(session, resume)
            else:
                self._accept(session.id, session.agent)
        except (LocalProtocolError, Overloaded, OutboxClosed) as exc:
            log.info("session %s: cannot answer its session.create: %s", session.id, exc)
        finally:
            assert session.verifying is not None
            session.verifying.set()

    async def _reauthenticate(self, auth: Authenticator, session: SessionState, token: str) -> None:
        """Verify a ``session.update`` token: the same principal, or ``unauthorized``.

        A token for another principal than the session's is refused (a session
        never changes hands); the session keeps its former credential.
        """
        done = session.verifying
        try:
            try:
                principal = await auth.authenticate(token)
                same = (principal.id, principal.scheme) == (
                    session.principal.id,
                    session.principal.scheme,
                )
                reason = "" if same else "the token names another principal than the session's"
            except AuthError as exc:
                principal, reason = session.principal, exc.message
            if self._sessions.get(session.id) is not session:
                return
            ctx = self._contexts.get(session.id)
            if reason:
                if ctx is not None:
                    ctx.token = session.token  # the refused token is not the session's
                self._owe(session_error(session.id, "unauthorized", reason, "token"))
                return
            session.principal, session.token = principal, token
            if self.principal.key == principal.key:
                self.principal = principal  # the connection's new sessions go on with it
            self._owe(ev.SessionUpdated(session_id=session.id))
        except (LocalProtocolError, Overloaded, OutboxClosed) as exc:
            log.info("session %s: cannot answer its session.update: %s", session.id, exc)
        finally:
            if done is not None:
                done.set()

    async def _verified(self, session: SessionState) -> None:
        """Wait for the session's pending token check; raise if it ended meanwhile."""
        while session.verifying is not None and not session.verifying.is_set():
            await session.verifying.wait()
        if self._sessions.get(session.id) is not session:
            raise SessionGone

    async def admitted(self) -> None:
        """Wait until every session's pending token check is done (HTTP+SSE answers after it)."""
        for session in list(self._sessions.values()):
            if session.verifying is not None:
                await session.verifying.wait()
