"""Generate the protobuf modules uamp ships from its ``.proto`` files.

Every ``*.proto`` under ``uamp_trio/grpc/protos/`` (its package as
directories: ``uamp/v1/agent.proto``) gets a ``*_pb2.py`` module and a
``*_pb2.pyi`` stub beside it, written by ``protoc`` from ``grpcio-tools``
(the ``dev`` extra). The generated files are committed and never edited by
hand; ``tests/trio/rpc/test_protos_current.py`` fails when one is missing or
differs from what this script writes. Only messages are generated: the
services are served by uamp's own gRPC layer (:mod:`uamp_trio.grpc`), and
``grpcio`` is never the server.

Run from the repository root after changing a ``.proto``::

    python scripts/gen_protos.py            # rewrite the modules
    python scripts/gen_protos.py --check    # exit 1 if any is out of date
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ROOT / "uamp_trio" / "grpc" / "protos"
#: What protoc writes for each ``x.proto``.
SUFFIXES = ("_pb2.py", "_pb2.pyi")


def proto_files(root: Path = PROTOS) -> list[Path]:
    """The ``.proto`` files under ``root``, relative to it, sorted."""
    return sorted(p.relative_to(root) for p in root.rglob("*.proto"))


def generate(out: Path, root: Path = PROTOS) -> list[Path]:
    """Write the modules of every proto under ``root`` into ``out``; the paths written.

    Raises:
        RuntimeError: protoc failed (its message is printed on stderr).
    """
    from grpc_tools import protoc  # the dev extra: only this script needs it

    try:
        from importlib.resources import files

        well_known = str(files("grpc_tools") / "_proto")
    except (ImportError, TypeError):  # pragma: no cover - old grpcio-tools
        well_known = str(Path(protoc.__file__).parent / "_proto")
    sources = [str(p) for p in proto_files(root)]
    if not sources:
        return []
    args = ["protoc", f"-I{root}", f"-I{well_known}", f"--python_out={out}", f"--pyi_out={out}"]
    if protoc.main([*args, *sources]) != 0:
        raise RuntimeError("protoc failed")
    return sorted(
        out / p.with_name(p.stem + suffix) for p in proto_files(root) for suffix in SUFFIXES
    )


def stale(root: Path = PROTOS) -> list[str]:
    """The generated files under ``root`` that are missing or differ from a fresh run."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp), root)
        bad = []
        for path in fresh:
            relative = path.relative_to(tmp)
            shipped = root / relative
            if not shipped.exists() or shipped.read_bytes() != path.read_bytes():
                bad.append(str(relative))
        return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale modules")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for name in bad:
            print(f"out of date: {name}", file=sys.stderr)
        return 1 if bad else 0
    for path in generate(PROTOS):
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
