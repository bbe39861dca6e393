"""Finding content by id in the conversation (UAMP 8.5.4), the UUID fallback included."""

from __future__ import annotations

import pytest

from uamp_proto import types as ty
from uamp_proto.content_ids import find_content

STORED = "550e8400-e29b-41d4-a716-446655440000"  # a /api/content/ uuid
OTHER = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"  # a uuid the conversation does not hold
GIVEN = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"  # a content id that is a uuid, no URL

PHOTO = ty.ImageContent(
    image=ty.MediaURL(url=f"https://host.example/api/content/{STORED}?sig=x"), content_id="photo-1"
)
CHART = ty.ImageContent(image=ty.MediaURL(url="https://cdn.example/chart.png"), content_id=GIVEN)
REPORT = ty.FileContent(
    file=ty.MediaURL(url=f"/api/content/{OTHER}/download"), filename="r.pdf", mime_type="x/y"
)
RESULT = ty.ToolResultContent(
    tool_result=ty.ToolOutput(call_id="c1", result="drew it", content_items=[CHART])
)
CONVERSATION = [
    ty.Message(role="user", content_items=[ty.TextContent(text="look"), PHOTO]),
    ty.Message(role="tool", content_items=[RESULT]),
]


@pytest.mark.parametrize(
    ("reference", "found"),
    [
        ("photo-1", PHOTO),  # its content id
        ("PHOTO-1", PHOTO),  # ids compare without case
        (GIVEN, CHART),  # a tool result's item, by its id
        (STORED, PHOTO),  # fallback: the UUID of its content URL
        (STORED.upper(), PHOTO),
        (f"/api/content/{STORED}", PHOTO),  # fallback: the content URL itself
        (f"https://elsewhere.example/api/content/{STORED}", PHOTO),
        (f"/api/content/{GIVEN}", CHART),  # a content URL naming an id
        (f" {STORED} ", PHOTO),
        (OTHER, None),  # a uuid of content this conversation does not hold
        (f"/api/content/{OTHER}", None),
        ("no-such-id", None),
        ("", None),
        (f"{STORED}x", None),  # not a UUID, names nothing
        (f"/api/content/{STORED}extra", None),
    ],
)
def test_a_reference_finds_the_conversations_content_or_nothing(
    reference: str, found: ty.ContentItem | None
) -> None:
    assert find_content(CONVERSATION, reference) == found


def test_the_file_of_another_conversation_is_found_only_there() -> None:
    mine = [*CONVERSATION, ty.Message(role="user", content_items=[REPORT])]
    assert find_content(mine, OTHER) == REPORT
    assert find_content(CONVERSATION, OTHER) is None


def test_an_exact_id_wins_over_the_fallback_and_the_newest_item_wins() -> None:
    # An item whose content id is STORED beats an older one whose URL holds it.
    named = ty.ImageContent(image=ty.MediaURL(url="https://x.example/a.png"), content_id=STORED)
    older_named = [ty.Message(role="user", content_items=[named]), *CONVERSATION]
    assert find_content(older_named, STORED) == named
    newer = ty.ImageContent(image=ty.MediaURL(url=f"/api/content/{STORED}"), content_id="photo-1")
    twice = [*CONVERSATION, ty.Message(role="user", content_items=[newer])]
    assert find_content(twice, "photo-1") == newer
