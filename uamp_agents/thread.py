"""Threads and thread trees: branching conversations (UAP section 7).

A :class:`Thread` is a list of uamp_proto messages with an id: the UPP
``Thread`` of UAP section 1.3, which uamp has no separate provider library
for, so it lives here. A :class:`ThreadTree` is a tree of
:class:`ThreadNode`, each holding one thread; the conversation seen from a
node (:meth:`ThreadTree.history`) is the messages of every node from the root
down to it, in that order. The tree has one *current* node, where new turns
go.

Both have ``to_json``/``from_json`` in the ``ThreadJSON``, ``ThreadNodeJSON``
and ``ThreadTreeJSON`` forms of UAP section 13.2; ``from_json`` validates the
whole structure (ids, parent/child links, reachability from the root) and
raises :class:`~uamp_agents.serialization.SerializationError` naming the path
of the first problem.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import attrs

from uamp_proto.types import Message

from .errors import UnknownNodeError
from .serialization import (
    Reader,
    SerializationError,
    extra_keys,
    message_to_json,
    new_id,
)

__all__ = ["Thread", "ThreadNode", "ThreadTree", "UnknownNodeError"]


class _HasMessages(Protocol):
    @property
    def messages(self) -> list[Message]: ...


_THREAD_KEYS = frozenset({"id", "messages"})
_NODE_KEYS = frozenset({"id", "parentId", "name", "thread", "children", "metadata"})
_TREE_KEYS = frozenset({"rootId", "currentId", "nodes"})


@attrs.define(kw_only=True)
class Thread:
    """An ordered conversation: messages with a thread id.

    It can be given to ``Agent.run(thread, input)`` as history (it has
    :meth:`history`), and a turn's messages are added with :meth:`append`.

    Attributes:
        id: The thread id (UUIDv4 for threads made here).
        messages: The messages, oldest first.
        extra: Keys of the ThreadJSON this implementation does not define,
            kept so that they are written back.
    """

    id: str = attrs.field(factory=new_id)
    messages: list[Message] = attrs.field(factory=list)
    extra: dict[str, Any] = attrs.field(factory=dict, repr=False)

    def append(self, turn: _HasMessages | Message | Iterable[Message]) -> None:
        """Add a turn's messages (or one message, or several) at the end."""
        if isinstance(turn, Message):
            self.messages.append(turn)
        elif hasattr(turn, "messages"):
            self.messages.extend(turn.messages)
        else:
            self.messages.extend(turn)

    def history(self) -> list[Message]:
        """A copy of the messages, oldest first."""
        return list(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def to_json(self) -> dict[str, Any]:
        """The ThreadJSON form: ``{"id", "messages"}`` plus kept extra keys."""
        return {
            **self.extra,
            "id": self.id,
            "messages": [message_to_json(m) for m in self.messages],
        }

    @classmethod
    def from_json(cls, data: Any, path: str = "") -> Thread:
        """Read a ThreadJSON value.

        Raises:
            SerializationError: ``data`` is not a valid ThreadJSON.
        """
        reader = Reader(data, path)
        return cls(
            id=reader.string("id"),
            messages=reader.messages("messages"),
            extra=extra_keys(reader.data, _THREAD_KEYS),
        )


@attrs.define(kw_only=True)
class ThreadNode:
    """One node of a thread tree (UAP section 7.1).

    Attributes:
        id: Node id (UUIDv4).
        parent_id: The parent node's id; ``None`` for the root.
        thread: The messages added while this node was current.
        name: Optional branch name.
        metadata: Free-form node metadata.
        children: Ids of the child nodes, in creation order.
        extra: Unknown ThreadNodeJSON keys, written back on save.
    """

    id: str = attrs.field(factory=new_id)
    parent_id: str | None = None
    thread: Thread = attrs.field(factory=Thread)
    name: str | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    children: list[str] = attrs.field(factory=list)
    extra: dict[str, Any] = attrs.field(factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The ThreadNodeJSON form (UAP section 13.2)."""
        return {
            **self.extra,
            "id": self.id,
            "parentId": self.parent_id,
            "name": self.name,
            "thread": self.thread.to_json(),
            "children": list(self.children),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, data: Any, path: str = "") -> ThreadNode:
        """Read one ThreadNodeJSON value (links to other nodes are not checked).

        Raises:
            SerializationError: ``data`` is not a valid ThreadNodeJSON.
        """
        reader = Reader(data, path)
        children = reader.opt_str_list("children")
        if children is None:
            raise SerializationError(reader.at("children"), "is required")
        return cls(
            id=reader.uuid4("id"),
            parent_id=reader.opt_uuid4("parentId"),
            name=reader.opt_str("name"),
            thread=Thread.from_json(reader.raw("thread"), reader.at("thread")),
            children=children,
            metadata=reader.opt_map("metadata"),
            extra=extra_keys(reader.data, _NODE_KEYS),
        )


class ThreadTree:
    """A tree of conversation threads with one current node (UAP section 7).

    A new tree has one root node, which is current. Messages of a run go to
    the current node's thread (``tree.current.thread.append(turn)``); the
    agent sees :meth:`history`, the messages from the root down to the
    current node.

    Attributes:
        nodes: Every node, by id.
    """

    def __init__(self, *, root_name: str | None = None) -> None:
        """Create a tree with a single, current root node named ``root_name``."""
        root = ThreadNode(name=root_name)
        self.nodes: dict[str, ThreadNode] = {root.id: root}
        self._root_id = root.id
        self._current_id = root.id
        self.extra: dict[str, Any] = {}

    @property
    def root(self) -> ThreadNode:
        """The root node."""
        return self.nodes[self._root_id]

    @property
    def current(self) -> ThreadNode:
        """The current node, where new messages go."""
        return self.nodes[self._current_id]

    def node(self, node_id: str) -> ThreadNode:
        """The node with id ``node_id``.

        Raises:
            UnknownNodeError: There is no such node.
        """
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNodeError(node_id) from None

    def branch(self, from_id: str, name: str | None = None) -> str:
        """Create an empty child node of ``from_id`` and return its id.

        The current node does not change; :meth:`checkout` the new id to
        continue the conversation there.

        Raises:
            UnknownNodeError: ``from_id`` is not in the tree.
        """
        parent = self.node(from_id)
        child = ThreadNode(parent_id=parent.id, name=name)
        self.nodes[child.id] = child
        parent.children.append(child.id)
        return child.id

    def checkout(self, node_id: str) -> None:
        """Make ``node_id`` the current node.

        Raises:
            UnknownNodeError: ``node_id`` is not in the tree.
        """
        self._current_id = self.node(node_id).id

    def path(self, node_id: str | None = None) -> list[ThreadNode]:
        """The nodes from the root down to ``node_id`` (default: current)."""
        node = self.node(self._current_id if node_id is None else node_id)
        out = [node]
        while node.parent_id is not None:
            node = self.nodes[node.parent_id]
            out.append(node)
        out.reverse()
        return out

    def history(self, node_id: str | None = None) -> list[Message]:
        """The conversation at ``node_id`` (default: current), oldest first.

        It is the messages of every node from the root down to that node, in
        that order (UAP section 7.3).
        """
        return [m for node in self.path(node_id) for m in node.thread.messages]

    def split(self, node_id: str, at: int) -> str:
        """Move the first ``at`` messages of a node into a new parent node.

        The new node takes the node's place under its parent (or becomes the
        root) and has the node as its only child, so the history of every
        existing node is unchanged. Used to branch from the middle of a
        thread.

        Returns:
            The new node's id.

        Raises:
            UnknownNodeError: ``node_id`` is not in the tree.
            ValueError: ``at`` is not between 0 and the number of messages.
        """
        node = self.node(node_id)
        if not 0 <= at <= len(node.thread.messages):
            raise ValueError(f"cannot split a thread of {len(node.thread)} messages at {at}")
        head = ThreadNode(
            parent_id=node.parent_id, thread=Thread(messages=node.thread.messages[:at])
        )
        del node.thread.messages[:at]
        if node.parent_id is None:
            self._root_id = head.id
        else:
            siblings = self.nodes[node.parent_id].children
            siblings[siblings.index(node.id)] = head.id
        node.parent_id = head.id
        head.children.append(node.id)
        self.nodes[head.id] = head
        return head.id

    def merge(self, source_id: str, target_id: str) -> None:
        """Bring the messages of ``source_id``'s branch into ``target_id``.

        The messages that ``source_id``'s conversation has and
        ``target_id``'s lacks -- those of the nodes below their common
        ancestor on the source side -- are appended to the target's thread in
        order, and ``source_id`` is recorded in the target's
        ``metadata["mergedFrom"]``. The source branch is left as it was. If
        the source is an ancestor of the target there is nothing to bring.

        Raises:
            UnknownNodeError: Either id is not in the tree.
            ValueError: ``source_id`` and ``target_id`` are the same node.
        """
        source = self.node(source_id)
        target = self.node(target_id)
        if source.id == target.id:
            raise ValueError("cannot merge a thread node into itself")
        source_path = self.path(source.id)
        target_path = self.path(target.id)
        shared = 0
        for a, b in zip(source_path, target_path, strict=False):
            if a.id != b.id:
                break
            shared += 1
        added = [m for node in source_path[shared:] for m in node.thread.messages]
        target.thread.messages.extend(added)
        merged = target.metadata.setdefault("mergedFrom", [])
        if isinstance(merged, list):
            merged.append(source.id)

    def to_json(self) -> dict[str, Any]:
        """The ThreadTreeJSON form: ``rootId``, ``currentId``, ``nodes``.

        Nodes are written parents before children (breadth first from the
        root), so a reader can build the tree in one pass.
        """
        ordered: list[ThreadNode] = []
        queue = [self._root_id]
        while queue:
            node = self.nodes[queue.pop(0)]
            ordered.append(node)
            queue.extend(node.children)
        return {
            **self.extra,
            "rootId": self._root_id,
            "currentId": self._current_id,
            "nodes": [node.to_json() for node in ordered],
        }

    @classmethod
    def from_json(cls, data: Any, path: str = "") -> ThreadTree:
        """Read and validate a ThreadTreeJSON value.

        Besides each node's fields it checks that ids are unique, that the
        root has no parent and every other node's parent exists and lists it
        among its children (and the other way round), and that every node is
        reachable from the root.

        Raises:
            SerializationError: Naming the path of the first problem.
        """
        reader = Reader(data, path)
        root_id = reader.uuid4("rootId")
        current_id = reader.uuid4("currentId")
        nodes: dict[str, ThreadNode] = {}
        where: dict[str, str] = {}
        for item_path, item in reader.array("nodes"):
            node = ThreadNode.from_json(item, item_path)
            if node.id in nodes:
                raise SerializationError(f"{item_path}.id", f"duplicate node id {node.id!r}")
            nodes[node.id] = node
            where[node.id] = item_path
        if root_id not in nodes:
            raise SerializationError(reader.at("rootId"), f"no node with id {root_id!r}")
        if current_id not in nodes:
            raise SerializationError(reader.at("currentId"), f"no node with id {current_id!r}")
        for node in nodes.values():
            node_path = where[node.id]
            if node.id == root_id:
                if node.parent_id is not None:
                    raise SerializationError(
                        f"{node_path}.parentId", "the root must have no parent"
                    )
            elif node.parent_id is None:
                raise SerializationError(
                    f"{node_path}.parentId", "only the root may have no parent"
                )
            elif node.parent_id not in nodes:
                raise SerializationError(
                    f"{node_path}.parentId", f"no node with id {node.parent_id!r}"
                )
            elif node.id not in nodes[node.parent_id].children:
                raise SerializationError(
                    f"{where[node.parent_id]}.children",
                    f"does not list child {node.id!r}",
                )
        for node in nodes.values():
            node_path = where[node.id]
            seen: set[str] = set()
            for index, child_id in enumerate(node.children):
                child_path = f"{node_path}.children[{index}]"
                if child_id in seen:
                    raise SerializationError(child_path, f"duplicate child {child_id!r}")
                seen.add(child_id)
                child = nodes.get(child_id)
                if child is None:
                    raise SerializationError(child_path, f"no node with id {child_id!r}")
                if child.parent_id != node.id:
                    raise SerializationError(child_path, f"node {child_id!r} has another parent")
        reached = {root_id}
        queue = [root_id]
        while queue:
            for child_id in nodes[queue.pop()].children:
                if child_id not in reached:
                    reached.add(child_id)
                    queue.append(child_id)
        for node_id, node_path in where.items():
            if node_id not in reached:
                raise SerializationError(node_path, "node is not reachable from the root (cycle)")
        tree = cls.__new__(cls)
        tree.nodes = nodes
        tree._root_id = root_id
        tree._current_id = current_id
        tree.extra = extra_keys(reader.data, _TREE_KEYS)
        return tree

    def __repr__(self) -> str:
        return (
            f"ThreadTree(nodes={len(self.nodes)}, root={self._root_id!r}, "
            f"current={self._current_id!r})"
        )
