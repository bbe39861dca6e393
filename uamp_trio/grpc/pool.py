"""Private descriptor pools for generated modules that must not share the default one.

protoc's Python code registers every file in protobuf's process-wide default
pool. Two modules generated from the same ``.proto`` package (uamp's copy of
a published protocol's proto, and the protocol's own SDK loaded in the same
process) then collide on every symbol, and whichever is imported second
fails. :mod:`scripts/gen_protos.py <gen_protos>` generates such protos
(its ``PRIVATE_POOL`` list) against :func:`private_pool` instead: the same
messages, in a pool of their own that holds the file's dependencies too.
"""

from __future__ import annotations

from types import ModuleType

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor

__all__ = ["private_pool"]


def private_pool(*dependencies: ModuleType) -> descriptor_pool.DescriptorPool:
    """A new pool holding the files of ``dependencies`` (generated modules) and theirs."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: FileDescriptor) -> None:
        if file.name in added:
            return
        for dependency in file.dependencies:
            add(dependency)
        added.add(file.name)
        pool.AddSerializedFile(file.serialized_pb)

    for module in dependencies:
        add(module.DESCRIPTOR)
    return pool
