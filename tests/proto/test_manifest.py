"""Spec 003 Appendix A.3: what a manifest may and must hold, row by row."""

from __future__ import annotations

from typing import Any

import pytest

from tests._support.envelopes import p256
from uamp_proto.manifest import (
    ManifestError,
    build_manifest,
    check_manifest,
    sign_manifest,
    verify_manifest,
)


def good() -> dict[str, Any]:
    return {
        "agent": "uamp/1.0",
        "description": "adds numbers",
        "intents": ["ask", "cancel"],
        "body_types": ["text/plain"],
        "auth": ["oauth2", "mtls"],
        "limits": {"max_body_kb": 64, "rate_lph": 100},
    }


MEMBERS = ["agent", "description", "intents", "body_types", "auth", "limits"]


def test_a_manifest_with_every_member_passes() -> None:
    check_manifest(good())
    check_manifest({**good(), "agent": "uamp/1.17", "limits": {}})


@pytest.mark.parametrize("member", MEMBERS)
def test_each_member_is_required(member: str) -> None:
    manifest = good()
    del manifest[member]
    with pytest.raises(ManifestError, match=member):
        check_manifest(manifest)


BAD = [
    # (member, value): each breaks one rule of A.3
    ("agent", "uamp/2.0"),
    ("agent", "uamp/1."),
    ("agent", "uamp/1.0 "),
    ("agent", "uamp/1.0\n"),
    ("agent", "uamp/1.\u00b2"),  # a superscript two is a digit to str.isdigit, not to [0-9]
    ("agent", "uamp/1.\u0661"),  # an Arabic-Indic one
    ("agent", 1.0),
    ("description", None),
    ("intents", "ask"),
    ("intents", [1]),
    ("body_types", ["text/plain", None]),
    ("auth", ["basic"]),
    ("auth", "oauth2"),
    ("limits", {"max_body_kb": 64, "burst": 3}),
    ("limits", {"rate_lph": "100"}),
    ("limits", {"rate_lph": True}),
    ("limits", []),
]


@pytest.mark.parametrize(("member", "value"), BAD)
def test_values_outside_the_schema_are_refused(member: str, value: Any) -> None:
    with pytest.raises(ManifestError):
        check_manifest({**good(), member: value})


def test_no_member_beyond_the_six() -> None:
    with pytest.raises(ManifestError, match="unknown \\['x-owner'\\]"):
        check_manifest({**good(), "x-owner": "me"})


def test_build_refuses_an_auth_method_the_schema_does_not_name() -> None:
    assert build_manifest(description="d", intents=["ask"], body_types=[])["limits"] == {}
    with pytest.raises(ManifestError, match="oauth2 and mtls"):
        build_manifest(description="d", intents=["ask"], body_types=[], auth=["apikey"])


def test_a_signed_manifest_that_breaks_the_schema_does_not_verify() -> None:
    key = p256()
    assert verify_manifest(sign_manifest(good(), key, "k1"), key) == good()
    with pytest.raises(ManifestError):
        sign_manifest({**good(), "limits": {"burst": 1}}, key, "k1")
