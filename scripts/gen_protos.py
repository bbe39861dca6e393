"""Generate the protobuf modules uamp ships from its ``.proto`` files.

Every ``*.proto`` under ``uamp_trio/grpc/protos/`` (its package as
directories: ``uamp/v1/agent.proto``) and under its ``third_party/`` folder
(other projects' protos, vendored as published: ``third_party/lf/a2a/v1/a2a.proto``,
compiled with ``third_party/`` as their own include root so their descriptor
names stay the published ones) gets a ``*_pb2.py`` module and a
``*_pb2.pyi`` stub beside it, written by ``protoc`` from ``grpcio-tools``
(the ``dev`` extra), with ``googleapis-common-protos``' ``google/api`` protos on
the include path; a proto in ``PRIVATE_POOL`` is registered in a descriptor
pool of its own (see :mod:`uamp_trio.grpc.pool`). The generated files are
committed and never edited by hand; ``tests/trio/rpc/test_protos_current.py``
fails when one is missing or differs from what this script writes. Only
messages are generated: the services are served by uamp's own gRPC layer
(:mod:`uamp_trio.grpc`), and ``grpcio`` is never the server.

Run from the repository root after changing a ``.proto``::

    python scripts/gen_protos.py            # rewrite the modules
    python scripts/gen_protos.py --check    # exit 1 if any is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ROOT / "uamp_trio" / "grpc" / "protos"
#: Vendored protos of other projects: an include root of their own.
THIRD_PARTY = "third_party"
#: What protoc writes for each ``x.proto``.
SUFFIXES = ("_pb2.py", "_pb2.pyi")
#: Protos whose messages are registered in a pool of their own
#: (:func:`uamp_trio.grpc.pool.private_pool`), not protobuf's default one: copies
#: of published protocols whose own SDKs register the same package in the
#: default pool (a2a-sdk does for ``lf.a2a.v1``), which would be a
#: duplicate-symbol error in a process that loads both.
PRIVATE_POOL = {"lf/a2a/v1/a2a.proto"}
_DEFAULT_POOL = "_descriptor_pool.Default().AddSerializedFile("
_IMPORTED = re.compile(r"^from \S+ import \w+_pb2 as (\w+)$", re.MULTILINE)


def _private(source: str) -> str:
    """A generated module's source, registering its file in a private pool with its imports."""
    dependencies = ", ".join(_IMPORTED.findall(source))
    pool = f"_private_pool({dependencies}).AddSerializedFile("
    if _DEFAULT_POOL not in source:
        raise RuntimeError("protoc's output no longer registers in the default pool as expected")
    head = "from uamp_trio.grpc.pool import private_pool as _private_pool\n"
    return head + source.replace(_DEFAULT_POOL, pool)


def _googleapis() -> list[str]:
    """The include path of ``google/api/*.proto`` (googleapis-common-protos ships them)."""
    try:
        from google.api import annotations_pb2
    except ImportError:  # pragma: no cover - only protos that import google/api need it
        return []
    return [f"-I{Path(annotations_pb2.__file__).parents[2]}"]


def proto_files(root: Path = PROTOS) -> list[Path]:
    """The ``.proto`` files of the include root ``root``, relative to it, sorted.

    The ``third_party`` folder is an include root of its own (:func:`roots`).
    """
    found = (p.relative_to(root) for p in root.rglob("*.proto"))
    return sorted(p for p in found if THIRD_PARTY not in p.parts)


def roots(protos: Path = PROTOS) -> list[Path]:
    """The include roots under ``protos``: uamp's own protos, then the vendored ones."""
    vendored = protos / THIRD_PARTY
    return [protos, vendored] if vendored.is_dir() else [protos]


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
    args = ["protoc", f"-I{root}", f"-I{well_known}", *_googleapis()]
    args += [f"--python_out={out}", f"--pyi_out={out}"]
    if protoc.main([*args, *sources]) != 0:
        raise RuntimeError("protoc failed")
    for relative in proto_files(root):
        if str(relative) in PRIVATE_POOL:
            module = out / relative.with_name(relative.stem + "_pb2.py")
            module.write_text(_private(module.read_text()))
    return sorted(
        out / p.with_name(p.stem + suffix) for p in proto_files(root) for suffix in SUFFIXES
    )


def stale(protos: Path = PROTOS) -> list[str]:
    """The generated files under ``protos`` that are missing or differ from a fresh run."""
    bad = []
    for root in roots(protos):
        with tempfile.TemporaryDirectory() as tmp:
            for path in generate(Path(tmp), root):
                shipped = root / path.relative_to(tmp)
                if not shipped.exists() or shipped.read_bytes() != path.read_bytes():
                    bad.append(str(shipped.relative_to(protos)))
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
    for root in roots():
        for path in generate(root, root):
            print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
