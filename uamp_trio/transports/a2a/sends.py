"""A send admitted: its message checked, its task created or resumed, its place and price held.

:func:`prepare` is the first step of every send (``SendMessage``,
``SendStreamingMessage``, the REST form's ``POST .../tasks``), whatever the
binding. It checks the message (a ``user`` message, media types the agent
accepts, metadata, an inline push config within the limits) and then:

* a message with a ``taskId`` continues that task (the caller's own; another
  principal's does not exist): it answers the person the task waits for
  (``input-required`` with pending interrupts), here or, with a shared store,
  in the process whose turn waits (the send then follows that turn instead
  of running one); else it resumes a paused task with a new turn;
* a message without one starts a task in its ``contextId``: only the
  caller's own conversation continues (another principal's ``contextId`` is
  a fresh context, as an unknown one is), within the caller's task quota.

The message takes its place in its context under the busy policy
(docs/busy.md; refused: 409 / 429), and a new or resumed turn is paid before
it runs: the app's :class:`~uamp_proto.payment.PaymentPolicy` (or the
transport's) with the ``X-PAYMENT`` header. JSON-RPC answers error
``-32402`` with ``data`` ``{"status_code": 402, "accepts": [...]}``; the REST
form stores the task as failed and streams ``task.failed`` with ``code:
"payment_required"`` (:class:`PaymentRefused`). What it holds (the place,
the charge) is released if the send never starts
(:meth:`~.tasks.Prepared.release_unstarted`).
"""

from __future__ import annotations

from typing import Any

import trio

from uamp_proto import types as ty
from uamp_proto.adapters import a2a, a2a_card, a2a_human, a2a_params, a2a_push
from uamp_proto.adapters._human import AnswerError
from uamp_proto.adapters.a2a import A2AError, A2ATask, Trigger, Update
from uamp_proto.busy import INVALID_POLICY, POLICY_KEY, QUEUE_FULL, BusyError
from uamp_proto.errors import UampError
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import TurnRequest
from uamp_stores.busy import Slot

from ...hosting.interrupts import InterruptNotFound, InvalidAnswer
from .call import Call
from .tasks import SUBSCRIBER_BUFFER, Live, Prepared, Tasks, timestamp

__all__ = ["PaymentRefused", "prepare"]


def _enter(
    tasks: Tasks, call: Call, context_id: str, metadata: Any, message: a2a.A2AMessage
) -> Slot:
    """The message's place in its context under the busy policy (docs/busy.md).

    Raises:
        A2AError: refused (``conversation_busy`` 409, ``queue_full`` 429)
            or a bad ``uamp.on_busy`` (invalid params).
    """
    gate = tasks.app.conversations
    principal = call.request.principal
    # The send's metadata, else the message's, may name the policy.
    named = isinstance(metadata, dict) and POLICY_KEY in metadata
    try:
        policy = gate.policy(metadata if named else message.metadata)
        key = ("a2a", principal.key, call.agent.name, context_id)
        return gate.enter(key, principal, policy)
    except BusyError as exc:
        if exc.code == INVALID_POLICY:
            raise A2AError(a2a.INVALID_PARAMS, str(exc), data={"code": exc.code}) from None
        status = 429 if exc.code == QUEUE_FULL else 409
        raise A2AError(
            a2a.UNSUPPORTED_OPERATION,
            f"{exc!s} (context {context_id})",
            data={"code": exc.code, "contextId": context_id},
            http_status=status,
        ) from None


async def prepare(tasks: Tasks, call: Call, params: dict[str, Any], *, rest: bool) -> Prepared:
    """Validate a send and create (or resume) its task, holding its place in the context.

    ``rest``: spec 004's task form, whose messages need no ``messageId``
    and whose payment refusal is a stored failed task.
    """
    holder: list[Slot] = []
    try:
        prepared = await _prepare_held(tasks, call, params, rest=rest, holder=holder)
    except BaseException:
        for slot in holder:
            slot.close()
        raise
    prepared.slot = holder[0] if holder else None
    return prepared


async def _prepare_held(
    tasks: Tasks, call: Call, params: dict[str, Any], *, rest: bool, holder: list[Slot]
) -> Prepared:
    """The body of :func:`prepare`; the place it takes goes into ``holder``."""
    agent, request, dialect = call.agent, call.request, call.dialect
    if params.get("message") is None:
        raise A2AError(a2a.INVALID_PARAMS, "'message' is required.")
    message = a2a.parse_message(params.get("message"), message_id=tasks.ids("msg") if rest else "")
    if message.role != "user":
        raise A2AError(a2a.INVALID_PARAMS, "'message.role' must be user for a new message.")
    modes = a2a_card.input_modes(agent.capabilities())
    for media_type in message.media_types:
        if not a2a.accepts_media(modes, media_type):
            raise A2AError(
                a2a.CONTENT_TYPE_NOT_SUPPORTED,
                f"This agent does not accept {media_type} (it accepts {', '.join(modes)}).",
                data={"mediaType": media_type},
            )
    config = a2a_params.send_configuration(params)
    history_length = a2a.opt_int(config, "historyLength")
    metadata = params.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise A2AError(a2a.INVALID_PARAMS, "'metadata' must be an object.")
    push_config = a2a_params.inline_push_config(config, dialect, tasks.ids)
    if push_config is not None:
        a2a_push.check_config(push_config, tasks.push_limits, tasks.push.check_target)
    tools = a2a.parse_tools(metadata)
    token = request.headers.get("x-payment")
    principal = request.principal
    stored = a2a.stored_message(message)
    now = timestamp()
    if message.task_id is not None:
        task = await tasks.find(agent, message.task_id, principal)
        if message.context_id and message.context_id != task.context_id:
            raise A2AError(
                a2a.INVALID_PARAMS,
                f"Context {message.context_id} is not the context of task {task.id}.",
            )
        live = tasks.live.get(task.id)
        if live is not None and live.task is not None and live.task.pending_interrupts:
            return await _answer(tasks, live, live.task, message, stored, history_length, principal)
        if (
            live is None
            and task.state is a2a.TaskState.INPUT_REQUIRED
            and task.pending_interrupts
            and tasks.store.shared
        ):
            return await _answer_elsewhere(tasks, call, task, message, history_length)
        if task.id in tasks.live:
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION, f"Task {task.id} is still working on a message."
            )
        a2a.transition(task.state, Trigger.RESUME)  # raises unless paused
        holder.append(_enter(tasks, call, task.context_id, metadata, message))
        base = list(task.conversation)
        if push_config is not None:
            a2a_push.make_room(task, push_config, tasks.push_limits)  # before any money
        if task.pending_tool_calls:
            added = a2a.parse_tool_results(message, task.pending_tool_calls)
        else:
            added = [message.to_uamp()]
        # A resumed task runs the agent again: it is paid like a new one.
        # Nothing after the lock can fail, so nothing can leave it held.
        response_id = tasks.ids("resp")
        try:
            charge = await tasks.charge(agent, token, response_id, principal)
        except PaymentRequiredError as error:
            raise a2a.payment_error(error) from None
        task.history.append(stored)
        task.conversation.extend(added)
        task.pending_tool_calls = []
        if tools:
            task.tools = tools
        if push_config is not None:
            task.push_configs[push_config["id"]] = push_config
            await tasks.store.save_push_configs(task)
        new = False
    else:
        context_id = message.context_id or tasks.ids("ctx")
        # Only the caller's own conversation continues: another principal's
        # contextId is a fresh context, as an unknown one is.
        earlier = await tasks.store.latest_in_context(context_id, owner=principal)
        if earlier is not None and earlier.agent != agent.name:
            raise A2AError(a2a.INVALID_PARAMS, f"Context {context_id} belongs to another agent.")
        holder.append(_enter(tasks, call, context_id, metadata, message))
        base = list(earlier.conversation) if earlier is not None else []
        task = A2ATask(
            id=tasks.ids("task"),
            context_id=context_id,
            agent=agent.name,
            timestamp=now,
            history=[stored],
            conversation=[
                *(earlier.conversation if earlier is not None else []),
                message.to_uamp(),
            ],
            tools=tools or (earlier.tools if earlier is not None else []),
        )
        if push_config is not None:
            task.push_configs[push_config["id"]] = push_config
        await tasks.store.check_quota(principal)  # before any money is locked
        response_id = tasks.ids("resp")
        try:
            charge = await tasks.charge(agent, token, response_id, principal)
        except PaymentRequiredError as error:
            if not rest:
                raise a2a.payment_error(error) from None
            task.error = ty.ErrorInfo(code="payment_required", message="Payment required")
            task.move(Trigger.FAIL, now)
            task.status_message = a2a.StoredMessage(
                message_id=tasks.ids("msg"),
                role="agent",
                items=[ty.TextContent(text="Payment required: retry with an X-PAYMENT header.")],
                metadata={"code": "payment_required"},
            )
            await tasks.store.add(task, owner=principal)
            raise PaymentRefused(task, error) from None
        try:
            await tasks.store.add(task, owner=principal)
        except BaseException:
            if charge is not None:  # the store refused the task: free its lock
                await charge.settle(None, used=False)
            raise
        new = True
    turn = TurnRequest(
        agent=agent.name,
        principal=principal,
        session_id=task.context_id,
        response_id=response_id,
        messages=list(task.conversation),
        tools=list(task.tools),
        payment_token=token,
        metadata={
            "a2a_task_id": task.id,
            "a2a_context_id": task.context_id,
            "a2a": a2a_params.turn_context(task, message, metadata, call.extensions),
        },
    )
    return Prepared(
        task=task,
        turn=turn,
        history_length=history_length,
        new=new,
        request_bytes=request.body,
        charge=charge,
        uamp_events=a2a.UAMP_EVENTS_EXTENSION in call.extensions,
        base=base,
    )


async def _answer(
    tasks: Tasks,
    live: Live,
    task: A2ATask,
    message: a2a.A2AMessage,
    stored: a2a.StoredMessage,
    history_length: int | None,
    principal: Principal,
) -> Prepared:
    """A message on a task whose turn waits for a person: its answers.

    The answers go to ``app.interrupts`` (the paused turn goes on); the
    send then follows that turn instead of running one. Its follower is
    attached before the answer is given, so it misses no update.
    """
    try:
        answers = a2a_human.parse_answers(message.data, message.text, task.pending_interrupts)
    except AnswerError as exc:
        raise A2AError(a2a.INVALID_PARAMS, exc.args[0]) from None
    send, receive = trio.open_memory_channel[Update](SUBSCRIBER_BUFFER)
    if live.primary is not None:
        live.primary.close()
    live.primary = send
    live.pen = None  # the earlier request's
    paused_at = live.paused
    live.answers.append(stored)
    try:
        for iid, answer in answers:
            await tasks.app.interrupts.answer(principal, iid, answer)
    except (InterruptNotFound, InvalidAnswer) as exc:
        raise A2AError(a2a.INVALID_PARAMS, str(exc)) from None
    return Prepared(
        task=task,
        turn=None,
        history_length=history_length,
        new=False,
        answering=live,
        follow=receive,
        paused_at=paused_at,
        started=True,
    )


async def _answer_elsewhere(
    tasks: Tasks,
    call: Call,
    task: A2ATask,
    message: a2a.A2AMessage,
    history_length: int | None,
) -> Prepared:
    """A message answering a turn paused on another process (a shared store).

    The answers go through ``app.interrupts`` (its relay hands them to the
    process whose run waits); the send then follows the task's updates
    from the store, attached before the answer is given.

    Raises:
        A2AError: invalid params: no answer to the pending interrupts in
            the message, or none of them waits any more (the process that
            ran the turn is gone).
    """
    principal = call.principal
    try:
        answers = a2a_human.parse_answers(message.data, message.text, task.pending_interrupts)
    except AnswerError as exc:
        raise A2AError(a2a.INVALID_PARAMS, exc.args[0]) from None
    tasks.store.ensure_running(tasks.app.background)
    if await tasks.lost(task):
        raise A2AError(
            a2a.UNSUPPORTED_OPERATION,
            f"The server running task {task.id} stopped while it waited; it ended failed.",
        )
    task, feed = await tasks.follow(call.agent, task.id, principal)
    try:
        for iid, answer in answers:
            await tasks.app.interrupts.answer(principal, iid, answer)
    except (InterruptNotFound, InvalidAnswer) as exc:
        feed.close()
        raise A2AError(a2a.INVALID_PARAMS, str(exc)) from None
    except BaseException:
        feed.close()
        raise
    return Prepared(
        task=task,
        turn=None,
        history_length=history_length,
        new=False,
        started=True,
        elsewhere=feed,
        principal=principal,
    )


class PaymentRefused(UampError):
    """A REST task refused for want of payment (already stored as failed)."""

    def __init__(self, task: A2ATask, error: PaymentRequiredError) -> None:
        super().__init__("payment required")
        self.task = task
        self.error = error
