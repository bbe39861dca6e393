"""Level 3 (UAP section 7): thread trees, their history and their JSON form."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import orjson
import pytest

from uamp_agents.serialization import SerializationError
from uamp_agents.thread import Thread, ThreadNode, ThreadTree, UnknownNodeError
from uamp_proto.types import (
    ImageContent,
    Message,
    TextContent,
    ToolCallContent,
    ToolInvocation,
)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def bot(text: str) -> Message:
    return Message(role="assistant", content=text)


def is_uuid4(value: str) -> bool:
    return uuid.UUID(value).version == 4 and str(uuid.UUID(value)) == value


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


def build_sample() -> tuple[ThreadTree, dict[str, str]]:
    """root -> A -> B and root -> C -> D (spec section 7.3)."""
    tree = ThreadTree(root_name="main")
    tree.root.thread.append([user("r1"), bot("r2")])
    ids = {"root": tree.root.id}
    ids["A"] = tree.branch(ids["root"], "a")
    tree.node(ids["A"]).thread.append(user("a1"))
    ids["B"] = tree.branch(ids["A"], "b")
    tree.node(ids["B"]).thread.append(user("b1"))
    ids["C"] = tree.branch(ids["root"], "c")
    tree.node(ids["C"]).thread.append(user("c1"))
    ids["D"] = tree.branch(ids["C"])
    tree.node(ids["D"]).thread.append([user("d1"), bot("d2")])
    return tree, ids


def test_new_tree_has_one_current_root() -> None:
    tree = ThreadTree()
    assert tree.current is tree.root
    assert tree.root.parent_id is None
    assert list(tree.nodes) == [tree.root.id]
    assert is_uuid4(tree.root.id)
    assert is_uuid4(tree.root.thread.id)
    assert tree.history() == []


def test_branch_creates_child_with_parent_and_does_not_switch() -> None:
    tree = ThreadTree()
    child_id = tree.branch(tree.root.id, "alt")
    child = tree.nodes[child_id]
    assert is_uuid4(child_id)
    assert child.parent_id == tree.root.id
    assert child.name == "alt"
    assert tree.root.children == [child_id]
    assert tree.current is tree.root


def test_checkout_switches_current() -> None:
    tree, ids = build_sample()
    tree.checkout(ids["B"])
    assert tree.current.id == ids["B"]


def test_history_is_root_to_current_in_order() -> None:
    tree, ids = build_sample()
    tree.checkout(ids["B"])
    assert texts(tree.history()) == ["r1", "r2", "a1", "b1"]
    tree.checkout(ids["D"])
    assert texts(tree.history()) == ["r1", "r2", "c1", "d1", "d2"]
    assert texts(tree.history(ids["A"])) == ["r1", "r2", "a1"]
    assert [n.id for n in tree.path(ids["D"])] == [ids["root"], ids["C"], ids["D"]]


def test_unknown_ids_raise() -> None:
    tree = ThreadTree()
    missing = str(uuid.uuid4())
    with pytest.raises(UnknownNodeError):
        tree.checkout(missing)
    with pytest.raises(UnknownNodeError):
        tree.branch(missing)
    with pytest.raises(UnknownNodeError):
        tree.merge(missing, tree.root.id)
    with pytest.raises(UnknownNodeError):
        tree.history(missing)


def test_merge_appends_the_source_branch_to_the_target() -> None:
    tree, ids = build_sample()
    tree.merge(ids["D"], ids["B"])
    assert texts(tree.history(ids["B"])) == ["r1", "r2", "a1", "b1", "c1", "d1", "d2"]
    assert tree.nodes[ids["B"]].metadata["mergedFrom"] == [ids["D"]]
    # The source branch is unchanged.
    assert texts(tree.history(ids["D"])) == ["r1", "r2", "c1", "d1", "d2"]


def test_merge_from_descendant_into_ancestor() -> None:
    tree, ids = build_sample()
    tree.merge(ids["B"], ids["root"])
    assert texts(tree.root.thread.messages) == ["r1", "r2", "a1", "b1"]


def test_merge_from_ancestor_adds_nothing() -> None:
    tree, ids = build_sample()
    tree.merge(ids["A"], ids["B"])
    assert texts(tree.history(ids["B"])) == ["r1", "r2", "a1", "b1"]


def test_merge_into_itself_is_refused() -> None:
    tree, ids = build_sample()
    with pytest.raises(ValueError, match="itself"):
        tree.merge(ids["A"], ids["A"])


def test_split_keeps_every_history() -> None:
    tree, ids = build_sample()
    before = {node_id: tree.history(node_id) for node_id in tree.nodes}
    new_root = tree.split(ids["root"], 1)
    assert tree.root.id == new_root
    assert texts(tree.root.thread.messages) == ["r1"]
    assert tree.nodes[ids["root"]].parent_id == new_root
    for node_id, history in before.items():
        assert tree.history(node_id) == history
    mid = tree.split(ids["D"], 1)
    assert tree.nodes[ids["C"]].children == [mid]
    assert tree.history(ids["D"]) == before[ids["D"]]
    with pytest.raises(ValueError):
        tree.split(ids["D"], 5)


def test_thread_append_accepts_turn_like_message_and_list() -> None:
    class TurnLike:
        messages = [user("x"), bot("y")]

    thread = Thread()
    thread.append(TurnLike())
    thread.append(user("z"))
    thread.append([bot("w")])
    assert texts(thread.messages) == ["x", "y", "z", "w"]
    assert len(thread) == 4
    assert thread.history() == thread.messages
    assert thread.history() is not thread.messages


def rich_messages() -> list[Message]:
    return [
        Message(
            role="user",
            content_items=[
                TextContent(text="look"),
                ImageContent(image="aGVsbG8=", format="png"),
            ],
            unknown={"x-provider": {"anthropic": {"cache": True}}},
        ),
        Message(
            role="assistant",
            tool_calls=[ToolInvocation(id="call_1", name="read", arguments='{"p": 1}')],
            content_items=[
                ToolCallContent(
                    tool_call=ToolInvocation(id="call_1", name="read", arguments='{"p": 1}')
                )
            ],
        ),
        Message(role="tool", tool_call_id="call_1", content="ok"),
    ]


def test_json_round_trip_preserves_the_whole_tree() -> None:
    tree, ids = build_sample()
    tree.node(ids["B"]).thread.append(rich_messages())
    tree.node(ids["C"]).metadata["k"] = [1, 2]
    tree.checkout(ids["D"])
    data = orjson.loads(orjson.dumps(tree.to_json()))
    assert set(data) == {"rootId", "currentId", "nodes"}
    assert data["rootId"] == ids["root"]
    assert data["currentId"] == ids["D"]
    node_json = data["nodes"][0]
    assert set(node_json) == {"id", "parentId", "name", "thread", "children", "metadata"}
    assert node_json["parentId"] is None
    assert set(node_json["thread"]) == {"id", "messages"}

    back = ThreadTree.from_json(data)
    assert back.root.id == ids["root"]
    assert back.current.id == ids["D"]
    assert set(back.nodes) == set(tree.nodes)
    for node_id, node in tree.nodes.items():
        other = back.nodes[node_id]
        assert other.parent_id == node.parent_id
        assert other.children == node.children
        assert other.name == node.name
        assert other.metadata == node.metadata
        assert other.thread.id == node.thread.id
        assert other.thread.messages == node.thread.messages
    assert back.history(ids["B"])[-3:] == rich_messages()
    assert back.history(ids["B"])[-3].unknown == {"x-provider": {"anthropic": {"cache": True}}}
    assert back.to_json() == data


def test_unknown_keys_are_kept() -> None:
    tree = ThreadTree()
    data = tree.to_json()
    data["x-tree"] = 1
    data["nodes"][0]["x-node"] = {"a": 1}
    data["nodes"][0]["thread"]["createdAt"] = "2024-01-01T00:00:00Z"
    again = ThreadTree.from_json(data).to_json()
    assert again["x-tree"] == 1
    assert again["nodes"][0]["x-node"] == {"a": 1}
    assert again["nodes"][0]["thread"]["createdAt"] == "2024-01-01T00:00:00Z"


def test_node_json_defaults() -> None:
    node = ThreadNode.from_json(
        {"id": str(uuid.uuid4()), "thread": {"id": "t", "messages": []}, "children": []}
    )
    assert node.parent_id is None
    assert node.name is None
    assert node.metadata == {}


# --- every deserialization error path ----------------------------------------


def sample_json() -> dict[str, Any]:
    return build_sample()[0].to_json()


def mutate(fn: Any) -> dict[str, Any]:
    data = copy.deepcopy(sample_json())
    fn(data)
    return data


OTHER = str(uuid.uuid4())

BAD_TREES: list[tuple[str, Any, str, str]] = [
    ("not an object", lambda d: None, "", "must be an object"),
    ("rootId missing", lambda d: d.pop("rootId"), "rootId", "is required"),
    ("rootId not uuid", lambda d: d.update(rootId="node_root"), "rootId", "UUIDv4"),
    ("rootId number", lambda d: d.update(rootId=5), "rootId", "must be a string"),
    ("rootId v1 uuid", lambda d: d.update(rootId=str(uuid.uuid1())), "rootId", "UUIDv4"),
    ("currentId missing", lambda d: d.pop("currentId"), "currentId", "is required"),
    ("nodes missing", lambda d: d.pop("nodes"), "nodes", "is required"),
    ("nodes not array", lambda d: d.update(nodes={}), "nodes", "must be an array"),
    ("node not object", lambda d: d["nodes"].append(3), "nodes[5]", "must be an object"),
    ("node id bad", lambda d: d["nodes"][1].update(id="x"), "nodes[1].id", "UUIDv4"),
    (
        "parentId wrong type",
        lambda d: d["nodes"][1].update(parentId=7),
        "nodes[1].parentId",
        "must be a string",
    ),
    ("name wrong type", lambda d: d["nodes"][0].update(name=1), "nodes[0].name", "string or null"),
    ("thread missing", lambda d: d["nodes"][0].pop("thread"), "nodes[0].thread", "is required"),
    (
        "thread id missing",
        lambda d: d["nodes"][0]["thread"].pop("id"),
        "nodes[0].thread.id",
        "is required",
    ),
    (
        "messages not array",
        lambda d: d["nodes"][0]["thread"].update(messages="hi"),
        "nodes[0].thread.messages",
        "must be an array",
    ),
    (
        "message not object",
        lambda d: d["nodes"][0]["thread"]["messages"].append("hi"),
        "nodes[0].thread.messages[2]",
        "must be an object",
    ),
    (
        "message without role",
        lambda d: d["nodes"][0]["thread"]["messages"][0].pop("role"),
        "nodes[0].thread.messages[0]",
        "'role' is required",
    ),
    (
        "message content wrong type",
        lambda d: d["nodes"][0]["thread"]["messages"][0].update(content=5),
        "nodes[0].thread.messages[0]",
        "'content'",
    ),
    (
        "children missing",
        lambda d: d["nodes"][0].pop("children"),
        "nodes[0].children",
        "is required",
    ),
    (
        "child not string",
        lambda d: d["nodes"][0]["children"].append(1),
        "nodes[0].children[2]",
        "must be a string",
    ),
    (
        "metadata not object",
        lambda d: d["nodes"][0].update(metadata=[]),
        "nodes[0].metadata",
        "must be an object",
    ),
    (
        "duplicate node",
        lambda d: d["nodes"].append(copy.deepcopy(d["nodes"][1])),
        "nodes[5].id",
        "duplicate node id",
    ),
    ("root unknown", lambda d: d.update(rootId=OTHER), "rootId", "no node"),
    ("current unknown", lambda d: d.update(currentId=OTHER), "currentId", "no node"),
    (
        "root has parent",
        lambda d: d["nodes"][0].update(parentId=d["nodes"][1]["id"]),
        "nodes[0].parentId",
        "root must have no parent",
    ),
    (
        "second root",
        lambda d: d["nodes"][1].update(parentId=None),
        "nodes[1].parentId",
        "only the root",
    ),
    (
        "parent unknown",
        lambda d: d["nodes"][1].update(parentId=OTHER),
        "nodes[1].parentId",
        "no node",
    ),
    (
        "parent does not list child",
        lambda d: d["nodes"][0]["children"].pop(),
        "nodes[0].children",
        "does not list child",
    ),
    (
        "child unknown",
        lambda d: d["nodes"][4]["children"].append(OTHER),
        "nodes[4].children[0]",
        "no node",
    ),
    (
        "duplicate child",
        lambda d: d["nodes"][0]["children"].append(d["nodes"][0]["children"][0]),
        "nodes[0].children[2]",
        "duplicate child",
    ),
    (
        "child with another parent",
        lambda d: d["nodes"][1]["children"].append(d["nodes"][2]["id"]),
        "nodes[1].children[1]",
        "another parent",
    ),
]


def make_cycle(d: dict[str, Any]) -> None:
    # Two extra nodes pointing at each other, detached from the root.
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    for me, other in ((a, b), (b, a)):
        d["nodes"].append(
            {"id": me, "parentId": other, "thread": {"id": me, "messages": []}, "children": [other]}
        )


BAD_TREES.append(("cycle", make_cycle, "nodes[5]", "not reachable"))


@pytest.mark.parametrize(
    ("fn", "path", "reason"),
    [case[1:] for case in BAD_TREES],
    ids=[case[0] for case in BAD_TREES],
)
def test_malformed_tree_json_is_rejected_with_its_path(fn: Any, path: str, reason: str) -> None:
    data = None if path == "" and "object" in reason else mutate(fn)
    with pytest.raises(SerializationError) as info:
        ThreadTree.from_json(data)
    assert info.value.path == path
    assert reason in info.value.reason
    assert path in str(info.value) or path == ""


def test_sample_json_is_valid() -> None:
    # The error cases above all start from this valid document.
    ThreadTree.from_json(sample_json())
    assert [len(n["children"]) for n in sample_json()["nodes"]] == [2, 1, 1, 0, 0]


def test_error_path_is_prefixed_when_nested() -> None:
    data = mutate(lambda d: d["nodes"][1].update(id="x"))
    with pytest.raises(SerializationError) as info:
        ThreadTree.from_json(data, "threadTree")
    assert info.value.path == "threadTree.nodes[1].id"
