"""Voice settings honoured or refused (UAMP 8.1, 8.2): formats and server-side turn detection."""

from __future__ import annotations

import math
import struct

import pytest

from uamp_proto import types as ty
from uamp_proto.audio import (
    TurnDetector,
    TurnEvent,
    TurnSettings,
    formats_available,
    from_pcm16,
    refusal,
    to_pcm16,
)


def voiced(ms: int, rate: int = 24_000) -> bytes:
    """A vowel-like sound: harmonics of 140 Hz, slowly modulated (what WebRTC calls speech)."""
    n = rate * ms // 1000
    samples = []
    for i in range(n):
        t = i / rate
        v = sum(6000 / k * math.sin(2 * math.pi * 140 * k * t) for k in range(1, 25))
        samples.append(max(-32768, min(32767, int(v * (1 + 0.5 * math.sin(2 * math.pi * 4 * t))))))
    return struct.pack(f"<{n}h", *samples)


def silence(ms: int, rate: int = 24_000) -> bytes:
    return bytes(rate * ms // 1000 * 2)


@pytest.mark.parametrize("fmt", ["g711_ulaw", "g711_alaw"])
def test_g711_round_trips_through_pcm16(fmt: str) -> None:
    pcm = voiced(60)
    coded = from_pcm16(pcm, fmt)
    assert len(coded) == len(pcm) // 2  # one byte a sample
    back = to_pcm16(coded, fmt)
    a = struct.unpack(f"<{len(pcm) // 2}h", pcm)
    b = struct.unpack(f"<{len(back) // 2}h", back)
    # Companding keeps each sample within a few percent.
    assert all(abs(x - y) <= max(64, abs(x) // 16) for x, y in zip(a, b, strict=True))
    assert to_pcm16(pcm, "pcm16") is pcm and from_pcm16(pcm, None) is pcm


def test_a_format_nobody_converts_is_an_error() -> None:
    with pytest.raises(ValueError):
        to_pcm16(b"xx", "mp3")
    with pytest.raises(ValueError):
        from_pcm16(b"xx", "opus")


def _config(**fields: object) -> ty.SessionConfig:
    return ty.SessionConfig(modalities=["audio"], **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "voices", "speaks", "field"),
    [
        ({}, None, True, None),
        ({"input_audio_format": "g711_ulaw", "output_audio_format": "g711_alaw"}, None, True, None),
        ({"input_audio_format": "mp3"}, None, True, "input_audio_format"),
        ({"output_audio_format": "opus"}, None, True, "output_audio_format"),
        ({"turn_detection": {"type": "server_vad", "threshold": 0.8}}, None, True, None),
        ({"turn_detection": {"type": "semantic_vad"}}, None, True, "turn_detection"),
        ({"turn_detection": {"type": "server_vad", "threshold": 2}}, None, True, "turn_detection"),
        (
            {"turn_detection": {"type": "server_vad", "silence_duration_ms": "long"}},
            None,
            True,
            "turn_detection",
        ),
        ({"voice": {"voice_id": "alloy"}}, ["alloy", "echo"], True, None),
        ({"voice": {"voice_id": "nova"}}, ["alloy", "echo"], True, "voice"),
        ({"voice": {"voice_id": "alloy"}}, None, False, "voice"),
    ],
)
def test_each_setting_is_honoured_or_refused_naming_its_field(
    fields: dict[str, object], voices: list[str] | None, speaks: bool, field: str | None
) -> None:
    refused = refusal(_config(**fields), voices, speaks)
    assert (refused[0] if refused else None) == field
    if refused:
        assert refused[1]  # a sentence


def test_pcm16_and_g711_are_available_with_the_voice_extra() -> None:
    assert formats_available() == {"pcm16", "g711_ulaw", "g711_alaw"}


@pytest.mark.parametrize("rate", [24_000, 16_000])
def test_the_detector_finds_the_turn_and_honours_silence_and_padding(rate: int) -> None:
    detector = TurnDetector(TurnSettings(silence_duration_ms=300, prefix_padding_ms=100), rate)
    events: list[TurnEvent] = []
    # 600 ms of silence, 900 ms of speech in 100 ms chunks, 200 ms pause (too short), then silence.
    events += detector.feed(silence(600, rate))
    for _ in range(9):
        events += detector.feed(voiced(100, rate))
    events += detector.feed(silence(200, rate))
    assert [e.kind for e in events] == ["speech_started"] and detector.speaking
    events += detector.feed(silence(400, rate))
    assert [e.kind for e in events] == ["speech_started", "speech_stopped"]
    started, stopped = (e.at_ms for e in events)
    assert 400 <= started <= 600  # ~600 ms in, less the 100 ms padding
    # Where the speech ended (WebRTC hears a little more), not where silence was judged.
    assert 1400 <= stopped <= 1700
    assert not detector.speaking


def test_a_longer_silence_setting_keeps_the_turn_open() -> None:
    detector = TurnDetector(TurnSettings(silence_duration_ms=1000))
    kinds = [e.kind for e in detector.feed(voiced(300) + silence(600))]
    assert kinds == ["speech_started"]  # 600 ms of silence is not yet 1000
    assert [e.kind for e in detector.feed(silence(800))] == ["speech_stopped"]


def test_threshold_picks_the_detector_s_aggressiveness() -> None:
    assert [TurnSettings(threshold=t).mode for t in (0.0, 0.3, 0.5, 0.8, 1.0)] == [0, 1, 2, 3, 3]
