"""The shipped ``*_pb2`` modules are what scripts/gen_protos.py makes of the ``.proto`` files."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def gen_protos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_proto_has_its_current_module() -> None:
    gen = gen_protos()
    assert [str(p) for p in gen.proto_files()] == ["uamp/v1/agent.proto"]
    assert [str(p) for p in gen.proto_files(gen.PROTOS / "third_party")] == ["lf/a2a/v1/a2a.proto"]
    assert gen.stale() == []


def test_the_check_sees_an_edited_proto(tmp_path: Path) -> None:
    gen = gen_protos()
    copy = tmp_path / "protos"
    shutil.copytree(gen.PROTOS, copy)
    proto = copy / "uamp" / "v1" / "agent.proto"
    edited = proto.read_text().replace("bytes json = 1;", "bytes json = 1;\n  int32 n = 2;")
    proto.write_text(edited)
    assert gen.stale(copy) == ["uamp/v1/agent_pb2.py", "uamp/v1/agent_pb2.pyi"]


def test_the_check_sees_an_edited_vendored_proto(tmp_path: Path) -> None:
    gen = gen_protos()
    copy = tmp_path / "protos"
    shutil.copytree(gen.PROTOS, copy)
    proto = copy / "third_party" / "lf" / "a2a" / "v1" / "a2a.proto"
    proto.write_text(proto.read_text() + "\nmessage Extra { int32 n = 1; }\n")
    expected = ["third_party/lf/a2a/v1/a2a_pb2.py", "third_party/lf/a2a/v1/a2a_pb2.pyi"]
    assert gen.stale(copy) == expected


def test_the_module_serves_the_service_it_declares() -> None:
    from uamp_trio.grpc.protos.uamp.v1 import agent_pb2

    service = agent_pb2.DESCRIPTOR.services_by_name["Agent"]
    assert service.full_name == "uamp.v1.Agent"
    send, session = service.methods_by_name["Send"], service.methods_by_name["Session"]
    assert (send.client_streaming, send.server_streaming) == (False, True)
    assert (session.client_streaming, session.server_streaming) == (True, True)
    assert send.input_type.full_name == "uamp.v1.Envelope"
    assert send.output_type.full_name == "uamp.v1.Delta"


def test_the_a2a_messages_live_beside_a2a_sdk_s_own() -> None:
    """Both copies of lf.a2a.v1 load in one process (uamp's in a pool of its own)."""
    import a2a.types.a2a_pb2 as sdk

    from uamp_trio.grpc.protos.third_party.lf.a2a.v1 import a2a_pb2

    task = a2a_pb2.Task(id="t", status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING))
    assert sdk.Task.FromString(task.SerializeToString()).status.state == sdk.TASK_STATE_WORKING
    assert a2a_pb2.DESCRIPTOR.pool is not sdk.DESCRIPTOR.pool
