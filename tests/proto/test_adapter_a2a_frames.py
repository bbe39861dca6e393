"""Text chunk frames from templates are the frames the general path makes (issue 38)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import types as ty
from uamp_proto.adapters.a2a import (
    Artifact,
    Dialect,
    TaskState,
    Update,
    render_update,
    result_response,
)
from uamp_proto.adapters.a2a_frames import _MARK, TextChunkFrames, plain_text
from uamp_proto.sse import encode_json

#: JSON text: no lone surrogates (orjson refuses them on either path).
_CHARS = st.characters(blacklist_categories=("Cs",))
_TEXT = st.one_of(st.text(_CHARS), st.sampled_from(["", "tok ", _MARK, f"a{_MARK}b", '"\\\n']))
_IDS = st.one_of(st.sampled_from(["t1", "t2"]), st.text(_CHARS, max_size=8), st.just(_MARK))


def _artifact_update(text: str, items: int, ids: tuple[str, str, str, str | None]) -> Update:
    task_id, context_id, artifact_id, description = ids
    parts: list[ty.ContentItem] = [ty.TextContent(text=text) for _ in range(items)]
    return Update(
        kind="artifact",
        task_id=task_id,
        context_id=context_id,
        artifact=Artifact(
            artifact_id=artifact_id, name="response", items=parts, description=description
        ),
    )


_UPDATES = st.one_of(
    st.builds(
        lambda text, items, ids, append, last: _with(
            _artifact_update(text, items, ids), append=append, last_chunk=last
        ),
        _TEXT,
        st.sampled_from([1, 1, 1, 0, 2]),
        st.tuples(_IDS, _IDS, _IDS, st.one_of(st.none(), st.text(_CHARS, max_size=4))),
        st.booleans(),
        st.booleans(),
    ),
    st.builds(
        lambda state, final: Update(
            kind="status", task_id="t1", context_id="c1", state=state, final=final
        ),
        st.sampled_from(list(TaskState)),
        st.booleans(),
    ),
)


def _with(update: Update, **changes: Any) -> Update:
    import attrs

    return attrs.evolve(update, **changes)


@given(
    st.lists(_UPDATES, max_size=20),
    st.sampled_from(list(Dialect)),
    st.one_of(st.integers(-(2**53), 2**53), st.text(_CHARS, max_size=6)),
)
@settings(max_examples=300)
def test_frame_is_the_frame_the_general_path_makes(
    updates: list[Update], dialect: Dialect, request_id: int | str
) -> None:
    def encode(result: dict[str, Any]) -> bytes:
        return encode_json(orjson.dumps(result_response(request_id, result)))

    frames = TextChunkFrames(dialect, encode)
    for update in updates:
        assert frames.frame(update) == encode(render_update(update, dialect))


def test_a_plain_text_chunk_takes_the_template() -> None:
    calls: list[dict[str, Any]] = []

    def encode(result: dict[str, Any]) -> bytes:
        calls.append(result)
        return encode_json(orjson.dumps(result_response(7, result)))

    frames = TextChunkFrames(Dialect.V1, encode)
    chunk = _with(_artifact_update("a", 1, ("t", "c", "r-text", None)), append=True)
    frames.frame(chunk)
    assert len(calls) == 1  # the template, made once
    out = frames.frame(
        _with(chunk, artifact=_with(chunk.artifact, items=[ty.TextContent(text="b")]))
    )
    assert len(calls) == 1
    assert out.endswith(b'"parts":[{"text":"b"}]},"append":true}}}\n\n')


def test_plain_text_is_one_text_part_only() -> None:
    assert plain_text(_artifact_update("x", 1, ("t", "c", "a", None))) == "x"
    assert plain_text(_artifact_update("x", 2, ("t", "c", "a", None))) is None
    assert plain_text(_artifact_update("x", 0, ("t", "c", "a", None))) is None
    assert plain_text(Update(kind="status", task_id="t", context_id="c")) is None


@given(
    _UPDATES,
    st.lists(_TEXT, max_size=5),
    st.sampled_from(list(Dialect)),
    st.one_of(st.integers(-(2**53), 2**53), st.text(_CHARS, max_size=6)),
)
@settings(max_examples=300)
def test_a_template_frames_every_text_of_its_shape(
    update: Update, texts: list[str], dialect: Dialect, request_id: int | str
) -> None:
    """What the A2A stream's turn writes with a template is the frame of that chunk."""

    def encode(result: dict[str, Any]) -> bytes:
        return encode_json(orjson.dumps(result_response(request_id, result)))

    frames = TextChunkFrames(dialect, encode)
    template = frames.template(update)
    if plain_text(update) is None:
        assert template is None
        return
    if template is None:  # the marker is part of the shape itself: no template
        return
    head, tail = template
    assert update.artifact is not None
    for text in texts:
        chunk = _with(update, artifact=_with(update.artifact, items=[ty.TextContent(text=text)]))
        assert head + orjson.dumps(text) + tail == encode(render_update(chunk, dialect))
