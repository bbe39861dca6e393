"""Every transport's response signature verifies against the served JWKS (spec 004).

One real server on 127.0.0.1 signs with a key loaded the way ``uamp serve
--signing-key`` loads it; each client keeps exactly the bytes it sent and the
text it received, fetches ``/.well-known/jwks.json`` (the server's route,
whatever the transports) and verifies. A changed byte of the request or of
the response fails.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from trio_websocket import open_websocket_url

from tests._support.rpc import agui_run
from uamp_proto.saved_response import SavedResponse, read_saved_response
from uamp_proto.signing import JWKS, Reason, SignatureError, verify_response_signature
from uamp_proto.sse import SSEParser
from uamp_trio.app import create_app
from uamp_trio.cli import load_signer
from uamp_trio.client import SignatureVerificationError, connect, connect_sse
from uamp_trio.demo import DemoAgent
from uamp_trio.transports import completions

TIMEOUT = 15


def write_pem(path: Path, key: Any) -> str:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return write_pem(tmp_path_factory.mktemp("keys") / "signing.pem", key)


@pytest.fixture
async def server(serve_app: Callable[..., Any], key_file: str) -> Any:
    app = create_app([DemoAgent()])
    app.response_signer = load_signer(key_file)
    return await serve_app(app)


async def served_jwks(server: Any) -> JWKS:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"{server.url}/.well-known/jwks.json")
    assert r.status_code == 200
    return JWKS.parse(r.content)


def assert_binds(signature: str, text: str, request: bytes, jwks: JWKS) -> None:
    """Verifies as received; one changed byte of either side fails."""
    claims = verify_response_signature(signature, text, request, jwks)
    assert set(claims) >= {"response_hash", "request_hash", "iat"}
    flipped = bytearray(request)
    flipped[len(flipped) // 2] ^= 0x01
    for other_text, other_request in ((text + ".", request), (text, bytes(flipped))):
        with pytest.raises(SignatureError) as info:
            verify_response_signature(signature, other_text, other_request, jwks)
        assert info.value.reason is Reason.TAMPERED


def sse(raw: bytes) -> list[tuple[str | None, str]]:
    parser = SSEParser()
    events = parser.feed(raw)
    parser.close()
    return [(e.event, e.data) for e in events]


# --- the key and the JWKS ------------------------------------------------------------


def test_the_key_file_is_checked_with_one_clear_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ValueError, match=r"nope\.pem: cannot read it"):
        load_signer(str(missing))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")
    with pytest.raises(ValueError, match="not a usable PEM private key"):
        load_signer(str(garbage))
    ec_key = write_pem(tmp_path / "ec.pem", ec.generate_private_key(ec.SECP256R1()))
    with pytest.raises(ValueError, match="must be RSA"):
        load_signer(ec_key)
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(ValueError, match="not a usable PEM private key"):
        load_signer(write_pem(tmp_path / "small.pem", small))


def test_the_kid_is_the_keys_thumbprint(key_file: str) -> None:
    first, second = load_signer(key_file), load_signer(key_file)
    assert first.kid == second.kid and len(first.kid) == 43  # base64url SHA-256
    assert [k.kid for k in first.jwks().keys] == [first.kid]


async def test_jwks_is_served_without_the_completions_transport(
    serve_app: Callable[..., Any], key_file: str
) -> None:
    with trio.fail_after(TIMEOUT):
        app = create_app([DemoAgent()], transports=[])
        bare = await serve_app(app)
        async with httpx.AsyncClient(base_url=bare.url) as http:
            assert (await http.get("/.well-known/jwks.json")).status_code == 404
            app.response_signer = load_signer(key_file)
            for path in ("/.well-known/jwks.json", "/agents/demo/.well-known/jwks.json"):
                r = await http.get(path)
                assert r.status_code == 200
                assert JWKS.parse(r.content).keys[0].kid == app.response_signer.kid
            assert (await http.get("/agents/nobody/.well-known/jwks.json")).status_code == 404
        # Still one route when Completions is mounted as well.
        create_app([DemoAgent()], transports=[completions.mount])


# --- every transport ------------------------------------------------------------------


async def test_completions_streamed_and_not(server: Any) -> None:
    with trio.fail_after(TIMEOUT):
        jwks = await served_jwks(server)
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = orjson.dumps({"model": "demo", "messages": [{"role": "user", "content": "a"}]})
            r = await http.post("/agents/demo/chat/completions", content=body)
            text = r.json()["choices"][0]["message"]["content"]
            assert_binds(r.headers["x-uamp-signature"], text, body, jwks)
            streamed = body[:-1] + b',"stream":true}'
            r = await http.post("/agents/demo/chat/completions", content=streamed)
            saved = read_saved_response(r.content)
            assert saved.transport == "completions" and saved.text == "You said: a"
            assert saved.signature is not None
            assert_binds(saved.signature, saved.text, streamed, jwks)


async def test_responses_streamed_and_not(server: Any) -> None:
    with trio.fail_after(TIMEOUT):
        jwks = await served_jwks(server)
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = orjson.dumps({"model": "demo", "input": "a"})
            r = await http.post("/agents/demo/v1/responses", content=body)
            text = r.json()["output"][0]["content"][0]["text"]
            assert_binds(r.headers["x-uamp-signature"], text, body, jwks)
            streamed = orjson.dumps({"model": "demo", "input": "a", "stream": True})
            r = await http.post("/agents/demo/v1/responses", content=streamed)
            # After response.completed, then data: [DONE] (where the SDK stops
            # reading), the signature as its own named event.
            events = sse(r.content)
            names = [name for name, _ in events]
            assert names[-3:] == ["response.completed", None, "response_signature"]
            assert events[-2][1] == "[DONE]"
            final = orjson.loads(events[-3][1])["response"]
            text = final["output"][0]["content"][0]["text"]
            assert text == "You said: a"
            assert_binds(orjson.loads(events[-1][1])["signature"], text, streamed, jwks)


async def test_anthropic_messages_streamed_and_not(server: Any) -> None:
    headers = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
    with trio.fail_after(TIMEOUT):
        jwks = await served_jwks(server)
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as http:
            ask = {"model": "demo", "max_tokens": 9, "messages": [{"role": "user", "content": "a"}]}
            body = orjson.dumps(ask)
            r = await http.post("/agents/demo/v1/messages", content=body)
            assert_binds(r.headers["x-uamp-signature"], r.json()["content"][0]["text"], body, jwks)
            streamed = orjson.dumps({**ask, "stream": True})
            r = await http.post("/agents/demo/v1/messages", content=streamed)
            events = [orjson.loads(data) for _, data in sse(r.content)]
            text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
            assert text == "You said: a" and events[-1]["type"] == "message_stop"
            # On message_stop, where the anthropic SDK keeps members it does not know.
            assert_binds(events[-1]["signature"], text, streamed, jwks)


async def test_uamp_websocket_client_verifies(server: Any) -> None:
    url = f"ws://127.0.0.1:{server.port}/agents/demo/uamp"
    jwks_url = f"{server.url}/.well-known/jwks.json"
    with trio.fail_after(TIMEOUT):
        async with connect(url, verify=jwks_url) as client:
            session = await client.create_session()
            result = await session.ask("over the socket")
            assert result.verified and result.text == "You said: over the socket"
            assert result.signature is not None and result.request is not None
            assert orjson.loads(result.request)["type"] == "response.create"
            assert_binds(result.signature, result.text, result.request, await served_jwks(server))


async def test_uamp_sse_client_verifies(server: Any, tmp_path: Path) -> None:
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_bytes((await served_jwks(server)).to_json())
    with trio.fail_after(TIMEOUT):
        async with connect_sse(server.url, verify=str(jwks_file)) as client:
            session = await client.create_session("demo")
            result = await session.ask("over sse")
            assert result.verified and result.text == "You said: over sse"
            # The signed request is the whole POST body: an array of events.
            assert result.request is not None
            assert [e["type"] for e in orjson.loads(result.request)] == [
                "input.text",
                "response.create",
            ]
            assert_binds(
                result.signature or "",
                result.text,
                result.request,
                JWKS.parse(jwks_file.read_bytes()),
            )


async def test_the_client_refuses_a_signature_of_another_key(server: Any) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    wrong = JWKS.from_keys((other, load_signer_kid(server)))
    url = f"ws://127.0.0.1:{server.port}/agents/demo/uamp"
    with trio.fail_after(TIMEOUT):
        async with connect(url, verify=wrong.to_dict()) as client:
            session = await client.create_session()
            stream = session.respond("hello")
            with pytest.raises(SignatureVerificationError) as info:
                async for _ in stream:
                    pass
            assert info.value.reason is Reason.BAD_SIGNATURE
            assert info.value.code == "bad_signature"
            assert stream.result is not None and not stream.result.verified


def load_signer_kid(server: Any) -> str:
    signer = server.app.response_signer
    assert signer is not None
    return str(signer.kid)


async def test_the_client_refuses_an_unsigned_response(
    serve_app: Callable[..., Any], key_file: str
) -> None:
    unsigned = await serve_app(create_app([DemoAgent()]))
    jwks = load_signer(key_file).jwks()
    with trio.fail_after(TIMEOUT):
        async with connect(
            f"ws://127.0.0.1:{unsigned.port}/agents/demo/uamp", verify=jwks
        ) as client:
            session = await client.create_session()
            with pytest.raises(SignatureVerificationError) as info:
                await session.ask("hi")
            assert info.value.reason is Reason.UNSIGNED


async def test_realtime_response_done(server: Any) -> None:
    url = f"ws://127.0.0.1:{server.port}/agents/demo/realtime?model=demo"
    with trio.fail_after(TIMEOUT):
        jwks = await served_jwks(server)
        async with open_websocket_url(url) as ws:
            assert orjson.loads(await ws.get_message())["type"] == "session.created"
            item = {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "realtime"}],
                },
            }
            await ws.send_message(orjson.dumps(item).decode())
            request = b'{"type": "response.create",  "response": {"modalities": ["text"]}}'
            await ws.send_message(request.decode())
            deltas, done = [], None
            while done is None:
                event = orjson.loads(await ws.get_message())
                if event["type"] in ("response.output_text.delta", "response.text.delta"):
                    deltas.append(event["delta"])
                elif event["type"] == "response.done":
                    done = event
            text = "".join(deltas)
            assert text == "You said: realtime"
            assert done["response"]["status"] == "completed"
            assert_binds(done["signature"], text, request, jwks)


async def test_a2a_task_metadata_and_final_status(server: Any) -> None:
    def send(method: str, text: str) -> bytes:
        message = {"role": "user", "parts": [{"kind": "text", "text": text}], "messageId": "m1"}
        return orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}
        )

    with trio.fail_after(TIMEOUT):
        jwks = await served_jwks(server)
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = send("message/send", "task me")
            task = (await http.post("/agents/demo/a2a", content=body)).json()["result"]
            assert task["status"]["state"] == "completed"
            text = "".join(p["text"] for p in task["status"]["message"]["parts"])
            assert text == "You said: task me"
            assert_binds(task["metadata"]["signature"], text, body, jwks)
            # tasks/get returns the same signed task.
            got = await http.post(
                "/agents/demo/a2a",
                content=orjson.dumps(
                    {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}}
                ),
            )
            assert got.json()["result"]["metadata"]["signature"] == task["metadata"]["signature"]
            # Streamed: the final status update carries it.
            body = send("message/stream", "stream me")
            r = await http.post("/agents/demo/a2a", content=body)
            results = [orjson.loads(data)["result"] for _, data in sse(r.content)]
            final = results[-1]
            assert final["kind"] == "status-update" and final["final"] is True
            text = "".join(p["text"] for p in final["status"]["message"]["parts"])
            assert_binds(final["metadata"]["signature"], text, body, jwks)
            # spec 004's REST form: task.completed carries it.
            rest = orjson.dumps({"message": {"role": "user", "parts": [{"text": "rest"}]}})
            r = await http.post("/agents/demo/tasks", content=rest)
            events = sse(r.content)
            text = "".join(
                p["text"]
                for name, data in events
                if name == "task.message"
                for p in orjson.loads(data)["parts"]
            )
            completed = [orjson.loads(d) for name, d in events if name == "task.completed"]
            assert text == "You said: rest"
            assert_binds(completed[0]["signature"], text, rest, jwks)


async def test_agui_custom_event_before_run_finished(server: Any) -> None:
    body = orjson.dumps(agui_run("ag-ui"))
    with trio.fail_after(TIMEOUT):
        jwks = await served_jwks(server)
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/agents/demo/agui", content=body)
        events = [orjson.loads(data) for _, data in sse(r.content)]
        assert [e["type"] for e in events[-2:]] == ["CUSTOM", "RUN_FINISHED"]
        saved = read_saved_response(r.content)
        assert saved.transport == "agui" and saved.text == "You said: ag-ui"
        assert saved.signature == events[-2]["value"]["signature"]
        assert_binds(saved.signature, saved.text, body, jwks)


async def test_acp_prompt_results_carry_meta_signature(server: Any) -> None:
    with trio.fail_after(TIMEOUT):
        jwks = await served_jwks(server)
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "prompt/submit",
                    "params": {"messages": [{"role": "user", "content": "acp http"}]},
                }
            )
            result = (await http.post("/agents/demo/acp", content=body)).json()["result"]
            assert result["content"] == "You said: acp http"
            assert_binds(result["_meta"]["signature"], result["content"], body, jwks)
        # session/prompt over the WebSocket: the text is the streamed chunks.
        url = f"ws://127.0.0.1:{server.port}/agents/demo/acp/stream"
        async with open_websocket_url(url) as ws:
            new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/"}}
            await ws.send_message(orjson.dumps(new).decode())
            session_id = orjson.loads(await ws.get_message())["result"]["sessionId"]
            prompt = orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/prompt",
                    "params": {
                        "sessionId": session_id,
                        "prompt": [{"type": "text", "text": "acp ws"}],
                    },
                }
            )
            await ws.send_message(prompt.decode())
            chunks: list[str] = []
            while True:
                message = orjson.loads(await ws.get_message())
                if message.get("id") == 2:
                    break
                update = message["params"]["update"]
                if update["sessionUpdate"] == "agent_message_chunk":
                    chunks.append(update["content"]["text"])
            text = "".join(chunks)
            assert text == "You said: acp ws"
            assert message["result"]["stopReason"] == "end_turn"
            assert_binds(message["result"]["_meta"]["signature"], text, prompt, jwks)


def test_saved_form_round_trips() -> None:
    saved = SavedResponse(text="héllo", signature="a.b.c", request=b"\x00{}", transport="acp")
    assert read_saved_response(saved.to_json()) == saved
