"""A base for the tests' scripted agents.

Most tests need an agent that does one odd thing (stalls, floods, fails half
way); the rest of the ``Responder`` protocol is the same every time. Subclass
:class:`TestAgent`, set ``name`` (and ``modalities`` or ``provider`` where the
test looks at them) and write ``respond``.
"""

from __future__ import annotations

from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest


class TestAgent:
    """A ``Responder`` whose capabilities are its name, ``provider`` and ``modalities``."""

    __test__ = False  # not a test class, whatever its name says

    name: str = "test"
    provider: str = "test"
    modalities: tuple[str, ...] = ("text",)

    def capabilities(self) -> ty.Capabilities:
        """The capability declaration built from the class attributes."""
        return ty.Capabilities(
            id=self.name, provider=self.provider, modalities=list(self.modalities)
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Subclasses produce the response here."""
        raise NotImplementedError
