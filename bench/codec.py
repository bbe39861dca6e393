"""Codec throughput: typed decode+encode against plain-dict JSON baselines.

Run: ``python bench/codec.py [--seconds 0.3] [--rounds 5]``

For each event it measures, in alternating rounds within one run, a full
round trip (bytes -> value -> bytes) three ways, on the same input bytes:
uamp's typed codec, orjson on plain dicts, and the stdlib ``json`` module on
plain dicts. The order of the three rotates from round to round. It prints
the median rate of each and the median of the per-round ratios the project
targets:

* ``response.delta``: typed time <= 2.5x orjson-on-dicts, >= 2x faster than
  stdlib json;
* ``session.create``: typed time <= 3x orjson-on-dicts.

``--instructions`` counts instructions instead of time, for a machine too
busy for wall-clock ratios: each way runs under ``valgrind --tool=callgrind``
twice, with 1,000 and 11,000 round trips of ``response.delta`` (or of each
``--event`` given), and the difference over 10,000 is its instructions per
round trip (start-up and imports cancel out). Needs valgrind
(``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from uamp_proto import decode, encode

SAMPLES: dict[str, bytes] = {
    "response.delta": orjson.dumps(
        {
            "type": "response.delta",
            "event_id": "evt_211",
            "response_id": "resp_abc",
            "delta": {"type": "text", "text": "The weather in Paris is"},
        }
    ),
    "input.text": orjson.dumps(
        {
            "type": "input.text",
            "event_id": "evt_100",
            "text": "What's the weather in Paris?",
            "role": "user",
            "messages": [
                {"role": "system", "content": "You are a weather assistant."},
                {"role": "user", "content": "What's the weather in Paris?"},
            ],
            "context": {"chat_id": "chat_abc", "sender_id": "user_123"},
        }
    ),
    "response.created": orjson.dumps(
        {"type": "response.created", "event_id": "evt_210", "response_id": "resp_abc"}
    ),
    "response.done": orjson.dumps(
        {
            "type": "response.done",
            "event_id": "evt_299",
            "response_id": "resp_abc",
            "response": {
                "id": "resp_abc",
                "status": "completed",
                "output": [{"type": "text", "text": "The weather in Paris is sunny, 18 C."}],
                "usage": {"input_tokens": 12, "output_tokens": 9, "total_tokens": 21},
            },
        }
    ),
    "session.create": orjson.dumps(
        {
            "type": "session.create",
            "event_id": "evt_001",
            "uamp_version": "1.0",
            "session": {
                "modalities": ["text"],
                "instructions": "You are a helpful assistant.",
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "search",
                            "description": "Search the web",
                            "parameters": {
                                "type": "object",
                                "properties": {"query": {"type": "string"}},
                                "required": ["query"],
                            },
                        },
                    }
                ],
                "extensions": {"openai": {"model": "gpt-4o", "temperature": 0.7}},
            },
            "agent": "weather-bot",
            "token": "eyJ...",
        }
    ),
}


def _typed(data: bytes) -> bytes:
    return encode(decode(data))


def _orjson(data: bytes) -> bytes:
    return orjson.dumps(orjson.loads(data))


def _stdlib(data: bytes) -> bytes:
    return json.dumps(json.loads(data), separators=(",", ":")).encode()


def _rate(fn: Callable[[bytes], bytes], data: bytes, seconds: float) -> float:
    """Round trips per second, counted over about ``seconds``."""
    n = 0
    batch = 1000
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            fn(data)
        n += batch
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


WAYS: dict[str, Callable[[bytes], bytes]] = {"uamp": _typed, "orjson": _orjson, "stdlib": _stdlib}


def _instructions(way: str, event: str, count: int) -> int:
    """Instructions callgrind counts for this script running ``count`` round trips of ``way``."""
    import re
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out"]
        argv += [sys.executable, __file__, "--loop", way, event, str(count)]
        out = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"callgrind said no count: {out.stderr[-500:]}")
    return int(found.group(1))


def count_instructions(event: str = "response.delta") -> dict[str, float]:
    """Instructions per round trip of ``event`` for each way (see the module docstring)."""
    per = {
        way: (_instructions(way, event, 11_000) - _instructions(way, event, 1_000)) / 10_000
        for way in WAYS
    }
    print(f"{event}: instructions per round trip (callgrind)")
    for way, n in per.items():
        print(f"  {way:<8}{n:>10,.0f}")
    targets = event == "response.delta"
    print(
        f"  uamp÷orjson {per['uamp'] / per['orjson']:.2f}x"
        + (" (target <= 2.5x)" if targets else "")
        + f", stdlib÷uamp {per['stdlib'] / per['uamp']:.2f}x"
        + (" (target >= 2x)" if targets else "")
    )
    return per


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions with callgrind"
    )
    parser.add_argument(
        "--event",
        action="append",
        choices=list(SAMPLES),
        help="with --instructions: the events to count (default: response.delta)",
    )
    parser.add_argument("--loop", nargs=3, metavar=("WAY", "EVENT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:  # one callgrind run: N round trips of one way
        way, event, count = args.loop
        fn, data = WAYS[way], SAMPLES[event]
        for _ in range(int(count)):
            fn(data)
        return 0
    if args.instructions:
        for event in args.event or ["response.delta"]:
            count_instructions(event)
        return 0
    ways = WAYS
    # Same output from all three ways, so they do the same work.
    for data in SAMPLES.values():
        expected = orjson.loads(data)
        assert all(orjson.loads(fn(data)) == expected for fn in ways.values())
    header = (
        f"{'event':<16}{'uamp/s':>12}{'orjson/s':>12}{'stdlib/s':>12}"
        f"{'uamp÷orjson time':>18}{'uamp÷stdlib speed':>19}"
    )
    print(header)
    ok = True
    order = list(ways)
    for name, data in SAMPLES.items():
        rates: dict[str, list[float]] = {k: [] for k in ways}
        time_ratios: list[float] = []
        speedups: list[float] = []
        for r in range(args.rounds):
            # Rotate who goes first, so no way always meets a cold cache or
            # a neighbour's burst; ratios are taken within a round.
            for key in order[r % 3 :] + order[: r % 3]:
                rates[key].append(_rate(ways[key], data, args.seconds))
            time_ratios.append(rates["orjson"][-1] / rates["uamp"][-1])
            speedups.append(rates["uamp"][-1] / rates["stdlib"][-1])
        med = {k: statistics.median(v) for k, v in rates.items()}
        time_ratio = statistics.median(time_ratios)
        speedup = statistics.median(speedups)
        print(
            f"{name:<16}{med['uamp']:>12,.0f}{med['orjson']:>12,.0f}{med['stdlib']:>12,.0f}"
            f"{time_ratio:>17.2f}x{speedup:>18.2f}x"
        )
        if name == "response.delta":
            ok &= time_ratio <= 2.5 and speedup >= 2.0
        if name == "session.create":
            ok &= time_ratio <= 3.0
    print(
        "targets:",
        "met" if ok else "MISSED",
        "(response.delta <= 2.5x orjson time and >= 2x stdlib speed;"
        " session.create <= 3x orjson time)",
    )
    print("rates: medians over rounds; ratios: medians of the per-round ratios")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
