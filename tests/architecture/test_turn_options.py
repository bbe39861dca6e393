"""Every turn a server runs starts on its host's turn options.

The settings every turn shares (the output bound,
``max_response_output_bytes``) have one home per server: the
``TurnOptions`` its host builds once from its configuration
(``uamp_trio.hosting.turns``, ``uamp_asgi.turns``). A turn starts through
it (``host.turns.runner(...)``, ``served.turns.open(...)`` ...); a runner
built by hand would run on the defaults -- the 32 MiB bound a transport
once forgot to pass. So outside the turn modules nothing builds a runner
itself, save the listed places that run on a bound of their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The runners (and their shorthands) of each server, by package.
RUNNERS = {
    "uamp_trio": {"ResponseRunner", "ResponseRun", "run_response", "open_response"},
    "uamp_asgi": {"Turn", "run_turn"},
}
#: Where each server's runners and turn options live.
HOMES = {"uamp_trio/hosting/turns.py", "uamp_asgi/turns.py"}
#: Places that build a runner themselves, and why that keeps the bound.
OWN_BOUND = {
    # The UAMP session driver runs on the core's tracker (track=False), which
    # ConnectionConfig.max_response_output_bytes bounds (from host.turns).
    ("uamp_trio/hosting/session_responses.py", "_run_turn"),
}


def _runner_calls(source: str, rel: str, names: set[str]) -> list[str]:
    """``file:line function: name`` for every call that builds one of ``names``."""
    found: list[str] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call) and (rel, function) not in OWN_BOUND:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "__new__":
                func = func.value  # Runner.__new__(Runner), as a hot path builds one
            name = func.id if isinstance(func, ast.Name) else None
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                name = func.attr if func.value.id in {"turns", "functools"} else None
            # A runner handed on to be built later: partial(Runner, ...), runner=Runner.
            given = [k.value for k in node.keywords]
            if name == "partial":
                given += node.args
            for named in [name, *(a.id for a in given if isinstance(a, ast.Name))]:
                if named in names:
                    found.append(f"{rel}:{node.lineno} {function}: {named}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return found


def test_no_turn_starts_but_on_its_hosts_turn_options() -> None:
    built = [
        hit
        for package, names in RUNNERS.items()
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() not in HOMES
        for hit in _runner_calls(
            path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix(), names
        )
    ]
    assert built == []


def test_the_check_sees_a_runner_built_by_hand() -> None:
    trio_names, asgi_names = RUNNERS["uamp_trio"], RUNNERS["uamp_asgi"]
    planted = (
        "async def _complete(self, agent, req):\n"
        "    await run_response(agent, req, None)\n"
        "    r = ResponseRunner.__new__(ResponseRunner)\n"
        "    return turns.open_response(agent, req)\n"
    )
    assert _runner_calls(planted, "uamp_trio/transports/x.py", trio_names) == [
        "uamp_trio/transports/x.py:2 _complete: run_response",
        "uamp_trio/transports/x.py:3 _complete: ResponseRunner",
        "uamp_trio/transports/x.py:4 _complete: open_response",
    ]
    asgi = (
        "def answer(host, agent, req):\n"
        "    serve(runner=partial(Turn, max_output_bytes=1))\n"
        "    return Turn(agent, req, None)\n"
    )
    assert _runner_calls(asgi, "uamp_asgi/transports/x.py", asgi_names) == [
        "uamp_asgi/transports/x.py:2 answer: Turn",
        "uamp_asgi/transports/x.py:3 answer: Turn",
    ]
    # Through the host's options: nothing to report.
    through = "def answer(self, agent, req):\n    return self.app.turns.runner(agent, req, None)\n"
    assert _runner_calls(through, "uamp_trio/transports/x.py", trio_names) == []
