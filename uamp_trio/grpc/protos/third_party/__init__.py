"""Protos of other projects, vendored as published (with the modules generated from them).

``lf/a2a/v1/a2a.proto`` is the A2A project's proto (Apache-2.0). This folder is
its own protoc include root, so the files keep their published names
(``lf/a2a/v1/a2a.proto``) in the descriptors.
"""
