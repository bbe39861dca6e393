"""Content a tool produces, and the ``present`` tool that shows it (UAMP 8.5.4).

A tool that makes media (an image generator, a chart, a screenshot) returns a
:class:`StructuredToolResult`: text for the model and ``content_items``, each
with a ``content_id`` (given, a ``/api/content/<uuid>`` URL's UUID, or a new
UUID) and a ``description``. The model reads the text and one label per
item -- kind, content id, description -- never a URL (the spec's "text
purity": no ``/api/content/`` URL goes into text). The items stay in the
conversation (the tool message's ``content_items``), which is the only
registry: a later ``present`` call or a delegation's ``attachments`` find
them there by id.

:func:`present_tool` is the tool the model calls to show content to the
user: ``present(content_ids=[...])``. Its result carries the named items as
its ``content_items``; on UAMP they go out in the response's output as a
``tool_result`` content item with those ``content_items`` (section 8.4.2),
where a client shows them. Content a producer returned and nobody
presented reaches the model as labels only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from uamp_proto.content_ids import MEDIA_ITEMS, MediaItem, content_id_of, find_content, labels
from uamp_proto.ids import random_ids
from uamp_proto.types import ContentItem, ToolOutput

from .errors import ToolError
from .tools import Tool, ToolContext

__all__ = ["PRESENT", "StructuredToolResult", "present_tool"]

#: The name of the tool that shows content to the user.
PRESENT = "present"


@attrs.frozen
class StructuredToolResult:
    """What a content-producing tool returns; see the module docstring.

    Attributes:
        text: What the model reads (labels of the items are added).
        content_items: The media produced; ``description`` goes in each
            item's ``unknown`` (``{"description": ...}``) or use :meth:`of`.
    """

    text: str = ""
    content_items: Sequence[ContentItem] = ()

    @classmethod
    def of(cls, text: str, *items: tuple[MediaItem, str]) -> StructuredToolResult:
        """A result from ``(media item, description)`` pairs."""
        labelled: list[ContentItem] = [
            attrs.evolve(item, unknown={**item.unknown, "description": description})
            for item, description in items
        ]
        return cls(text, labelled)

    def as_tool_output(self, call_id: str) -> ToolOutput:
        """The tool output: text and labels for the model, identified items for the conversation."""
        items = [
            attrs.evolve(i, content_id=content_id_of(getattr(i, i.type), i.content_id, random_ids))
            if isinstance(i, MEDIA_ITEMS)
            else i
            for i in self.content_items
        ]
        text = "\n".join(part for part in (self.text, labels(items)) if part)
        return ToolOutput(call_id=call_id, result=text, content_items=items or None)


async def _present(context: ToolContext[Any], content_ids: list[str]) -> ToolOutput:
    conversation = context.conversation() if context.conversation is not None else []
    shown: list[ContentItem] = []
    for content_id in content_ids:
        item = find_content(conversation, content_id)
        if item is None:
            raise ToolError(f"{content_id!r} is no content id of this conversation")
        shown.append(item)
    text = "Shown to the user:\n" + labels(shown)
    return ToolOutput(call_id=context.call_id, result=text, content_items=shown or None)


def present_tool() -> Tool:
    """The ``present`` tool: shows content of the conversation to the user, by content id."""
    return Tool(
        name=PRESENT,
        description=(
            "Show images, audio, video or files of this conversation to the user, by their "
            "content ids (never paste their URLs into your text)."
        ),
        parameters={
            "type": "object",
            "properties": {
                "content_ids": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The content ids to show, in order",
                }
            },
            "required": ["content_ids"],
        },
        fn=_present,
        context_param="context",
        thread=False,
    )
