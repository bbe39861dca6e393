"""``TaskRun.more_text``, the streamed text's shortcut, gives what ``TaskRun.feed`` gives.

Two runs of the same task are fed the same events: one always through
``feed``, the other trying ``more_text`` first for each text delta, as the
A2A service does. Their updates, and the tasks they leave, must be equal.
"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.a2a import A2ATask, Dialect, TaskRun, Trigger, Update, render_task
from uamp_proto.adapters.a2a_records import task_to_json


def _ids() -> object:
    count = itertools.count()
    return lambda prefix: f"{prefix}-{next(count)}"


_CHARS = st.characters(blacklist_categories=("Cs",))
_EVENTS = st.lists(
    st.one_of(
        st.builds(
            lambda text: ev.ResponseDelta(delta=ty.DeltaText(text=text), response_id="resp-1"),
            st.one_of(st.text(_CHARS, max_size=6), st.just("")),
        ),
        st.builds(
            lambda message: ev.Progress(target="response", stage="working", message=message),
            st.one_of(st.none(), st.text(_CHARS, min_size=1, max_size=5)),
        ),
        st.builds(
            lambda text: ev.ResponseDelta(
                delta=ty.DeltaToolProgress(tool_progress=ty.ToolProgress(call_id="c1", text=text)),
                response_id="resp-1",
            ),
            st.text(_CHARS, max_size=5),
        ),
        st.builds(
            lambda kind, text: ev.ResponseDelta(
                delta=ty.DeltaUnknown(
                    raw={"type": kind, "content": [{"type": "text", "text": text}]}
                ),
                response_id="resp-1",
            ),
            st.sampled_from(["message", "artifact"]),
            st.text(_CHARS, min_size=1, max_size=5),
        ),
        # An artifact of the agent's under the text artifact's own id.
        st.builds(
            lambda text, append: ev.ResponseDelta(
                delta=ty.DeltaUnknown(
                    raw={
                        "type": "artifact",
                        "artifact_id": "resp-1-text",
                        "append": append,
                        "content": [{"type": "text", "text": text}],
                    }
                ),
                response_id="resp-1",
            ),
            st.text(_CHARS, min_size=1, max_size=5),
            st.booleans(),
        ),
    ),
    max_size=25,
)


def _task() -> A2ATask:
    return A2ATask(id="task-1", context_id="ctx-1", agent="a")


@given(events=_EVENTS, uamp_events=st.booleans())
def test_more_text_then_feed_is_feed(events: list[ev.Event], uamp_events: bool) -> None:
    general, fast = _task(), _task()
    general_run = TaskRun(general, _ids(), uamp_events=uamp_events)  # type: ignore[arg-type]
    fast_run = TaskRun(fast, _ids(), uamp_events=uamp_events)  # type: ignore[arg-type]
    took_shortcut = 0
    for event in events:
        expected = general_run.feed(event)
        got: list[Update] | None = None
        if type(event) is ev.ResponseDelta and type(event.delta) is ty.DeltaText:
            update = fast_run.more_text(event.delta.text)
            if update is not None:
                took_shortcut += 1
                got = [update]
        if got is None:
            got = fast_run.feed(event)
        assert got == expected
        assert render_task(fast, Dialect.V1) == render_task(general, Dialect.V1)
    assert fast_run.reply == general_run.reply
    texts = [e for e in events if type(e) is ev.ResponseDelta and type(e.delta) is ty.DeltaText]
    if sum(1 for e in texts if e.delta.text) >= 2 and general_run.reply is None:  # type: ignore[union-attr]
        assert took_shortcut  # the shortcut is not a path that never runs


@given(events=_EVENTS, uamp_events=st.booleans())
def test_grow_changes_the_task_as_more_text_does(events: list[ev.Event], uamp_events: bool) -> None:
    """``grow`` is ``more_text`` without the update: the task alike, the update the next chunk.

    The A2A stream writes that chunk from the template of the chunk before
    it, so it must be a text chunk of the same shape (``append``, not
    ``lastChunk``, the same artifact) carrying the delta's text.
    """
    general, grown = _task(), _task()
    general_run = TaskRun(general, _ids(), uamp_events=uamp_events)  # type: ignore[arg-type]
    grown_run = TaskRun(grown, _ids(), uamp_events=uamp_events)  # type: ignore[arg-type]
    previous: Update | None = None
    said = ""
    for event in events:
        expected = general_run.feed(event)
        if any(u.text for u in expected):
            # The model: the text artifact is the turn's text so far, one item.
            said += "".join(u.text for u in expected if u.text)
            text_artifact = general_run._text  # (the run's own, whatever else has its id)
            assert text_artifact is not None and text_artifact in general.artifacts
            assert text_artifact.items == [ty.TextContent(text=said)]
        delta = event.delta if type(event) is ev.ResponseDelta else None  # type: ignore[attr-defined]
        text = delta.text if type(delta) is ty.DeltaText else None
        if text is not None and grown_run.grow(text):
            assert len(expected) == 1
            (chunk,) = expected
            assert chunk.text == text and chunk.append and not chunk.last_chunk
            assert previous is not None and previous.artifact is not None
            assert chunk.artifact is not None
            assert chunk.artifact.artifact_id == previous.artifact.artifact_id
            assert chunk.artifact.name == previous.artifact.name
            assert render_task(grown, Dialect.V1) == render_task(general, Dialect.V1)
            previous = chunk
            continue
        assert grown_run.feed(event) == expected
        assert render_task(grown, Dialect.V1) == render_task(general, Dialect.V1)
        texts = [u for u in expected if u.text is not None]
        if texts:
            previous = texts[-1]
    assert grown_run.reply == general_run.reply


@given(events=_EVENTS, choices=st.lists(st.booleans(), min_size=50, max_size=50))
def test_the_growers_texts_join_the_task_when_it_is_read_or_the_run_goes_on(
    events: list[ev.Event], choices: list[bool]
) -> None:
    """Texts given to ``grower`` instead of ``grow`` leave the task the same, once settled.

    Each choice: take the grower for a text delta that continues the text
    (what the stream's pen does), and whether to read the task then; the
    run goes on with ``feed`` for everything else and completes.
    """
    general, fast = _task(), _task()
    general.move(Trigger.START)
    fast.move(Trigger.START)
    general_run = TaskRun(general, _ids())  # type: ignore[arg-type]
    fast_run = TaskRun(fast, _ids())  # type: ignore[arg-type]
    grow = None
    took = 0
    for i, event in enumerate(events):
        expected = general_run.feed(event)
        delta = event.delta if type(event) is ev.ResponseDelta else None  # type: ignore[attr-defined]
        text = delta.text if type(delta) is ty.DeltaText else ""
        continues = [u.text for u in expected] == [text] and expected[0].append
        if text and continues and choices[i % 50]:
            if grow is None:
                grow = fast_run.grower()
            grow(text)
            took += 1
        else:
            assert fast_run.feed(event) == expected
        if choices[(i + 25) % 50]:
            assert render_task(fast, Dialect.V1) == render_task(general, Dialect.V1)
        elif choices[(i + 10) % 50]:
            assert task_to_json(fast) == task_to_json(general)
    assert fast_run.complete([], "t") == general_run.complete([], "t")
    assert render_task(fast, Dialect.V03) == render_task(general, Dialect.V03)
    assert fast.history == general.history and fast.artifacts == general.artifacts
    assert fast._unsettled is None  # the run is over: the task forgets it


def test_text_after_an_artifact_delta_under_the_texts_id_is_again_its_one_item() -> None:
    """The text artifact is the turn's text, one item, after each text delta (as it always was)."""

    def text(t: str) -> ev.Event:
        return ev.ResponseDelta(delta=ty.DeltaText(text=t), response_id="resp-1")

    def agents(t: str, append: bool) -> ev.Event:
        raw = {"type": "artifact", "artifact_id": "resp-1-text", "append": append}
        content = [{"type": "text", "text": t}]
        return ev.ResponseDelta(delta=ty.DeltaUnknown(raw={**raw, "content": content}))

    for append in (True, False):
        task = _task()
        run = TaskRun(task, _ids())  # type: ignore[arg-type]
        for event in (text("a"), agents("X", append), text("b")):
            delta = event.delta  # type: ignore[attr-defined]
            if not (type(delta) is ty.DeltaText and run.grow(delta.text)):
                run.feed(event)
        (artifact,) = task.artifacts
        assert artifact.items == [ty.TextContent(text="ab")]
