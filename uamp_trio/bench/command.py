"""``uamp bench URL``: the command line, which fills a :class:`~.config.BenchConfig`.

::

    uamp bench http://127.0.0.1:8765/agents/demo -c 16 -n 500
    uamp bench http://127.0.0.1:8000/v1 --model my-model -d 30s --api-key $KEY
    uamp bench http://127.0.0.1:8765 --agent demo --transport uamp-ws --json run.json
    uamp bench http://127.0.0.1:8765/agents/demo --rate 50 -d 30s --goodput ttft:200 e2e:1000
    uamp bench http://127.0.0.1:8765/agents/demo --rate 10:100:10s --arrival gamma --burstiness 0.5
    uamp bench http://127.0.0.1:8765/agents/demo --dataset chats.jsonl --turns 3 --seed 7
    uamp bench http://127.0.0.1:8765/agents/flood --input-len uniform:50:200 --output-len 100
    uamp bench --compare before.json after.json

Exit status: 0 when every request succeeded, 1 when some failed (the table
says which kinds), 2 for bad arguments or unreadable files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

from ..client._command import run_command
from ..units import argument_type, duration_argument
from .arrivals import ARRIVALS, parse_rate
from .config import TRANSPORTS, BenchConfig, parse_goodput, parse_header, parse_warmup
from .lengths import parse_lengths
from .plot import check_plot
from .report import LiveProgress, print_compare, print_summary
from .runner import run_bench
from .workload import load_dataset

__all__ = ["add_parser", "main"]


def add_parser(sub: Any) -> None:
    """Add the ``bench`` subcommand to the ``uamp`` command line's sub-parsers."""
    p = sub.add_parser("bench", help="benchmark an agent endpoint (latency and throughput)")
    _arguments(p)
    p.set_defaults(func=_command)


_header = argument_type(parse_header)
_rate = argument_type(parse_rate)
_warmup = argument_type(parse_warmup)
_lengths = argument_type(parse_lengths)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "url",
        nargs="?",
        help="an agent's base URL (http://host/agents/NAME), a full endpoint URL, "
        "or a server's root with --agent",
    )
    p.add_argument("--transport", "-t", choices=TRANSPORTS, default="openai")
    p.add_argument("--agent", help="the agent to address at a server's root")
    p.add_argument("--model", help="Chat Completions model (default: the agent's name)")
    p.add_argument(
        "--concurrency",
        "-c",
        type=int,
        default=10,
        help="requests in flight (with --rate: the most at once)",
    )
    p.add_argument(
        "--rate",
        type=_rate,
        metavar="R|START:END:STEP",
        help="open loop: start R requests/s on schedule whatever the server does (latency "
        "counted from the scheduled start); START:END:STEP ramps in steps of START every STEP",
    )
    p.add_argument(
        "--arrival",
        choices=ARRIVALS,
        default="poisson",
        help="with --rate: the arrival process (default %(default)s)",
    )
    p.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        help="with --arrival gamma: its shape; below 1 burstier, 1 Poisson (default %(default)s)",
    )
    p.add_argument("--seed", type=int, help="with --rate: the arrival process's random seed")
    p.add_argument(
        "--warmup",
        type=_warmup,
        metavar="N|DURATION",
        help="run N requests (or for DURATION) first, left out of the figures",
    )
    p.add_argument(
        "--goodput",
        nargs="+",
        metavar="SLO:MS",
        help="count requests that met every SLO (ttft:MS tpot:MS e2e:MS) as goodput",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="split the load over N generator processes (one event loop each) and merge "
        "their samples (default %(default)s)",
    )
    p.add_argument(
        "--save-requests",
        metavar="FILE.jsonl",
        help="write one JSON line per request (times, deltas, bytes, error)",
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--requests", "-n", type=int, help="requests to send (default 100)")
    budget.add_argument(
        "--duration", "-d", type=duration_argument, help="run this long: 30s, 2m or seconds"
    )
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="the user message (default 'Say hello.')")
    prompt.add_argument("--prompt-file", type=Path, help="read the user message from a file")
    p.add_argument(
        "--dataset",
        type=Path,
        metavar="FILE.jsonl",
        help='conversations to play, one a line: {"prompt": ...} or {"messages": [...]} '
        "(drawn with --seed)",
    )
    p.add_argument(
        "--turns",
        type=int,
        metavar="N",
        help="turns per conversation, on one session/thread/context (default: its user messages)",
    )
    p.add_argument(
        "--input-len",
        type=_lengths,
        metavar="DIST",
        help="synthetic prompts of this many words: N, uniform:A:B or normal:MEAN:SD "
        "(drawn with --seed)",
    )
    p.add_argument(
        "--output-len",
        type=_lengths,
        metavar="DIST",
        help="the reply length each synthetic prompt asks for, in words (its first word, and "
        "max_tokens where the transport has it): N, uniform:A:B or normal:MEAN:SD",
    )
    p.add_argument(
        "--stream", action=argparse.BooleanOptionalAction, default=True, help="stream responses"
    )
    p.add_argument("--http2", action="store_true", help="HTTP/2 (h2c prior knowledge on http://)")
    p.add_argument(
        "-H", "--header", type=_header, action="append", default=[], help="'Name: value'"
    )
    p.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--max-tokens", type=int, help="Chat Completions max_tokens")
    p.add_argument(
        "--timeout", type=duration_argument, default=60.0, help="per request (default 60s)"
    )
    p.add_argument("--insecure", "-k", action="store_true", help="skip TLS verification")
    p.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="latency CDF and throughput chart")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--compare", nargs=2, metavar=("A.json", "B.json"), help="print two runs side by side"
    )


def config_from(args: argparse.Namespace) -> BenchConfig:
    """The run the parsed arguments describe.

    Raises:
        ValueError: A bad combination (no URL, a bad count).
        OSError: ``--prompt-file`` cannot be read.
    """
    if not args.url:
        raise ValueError("a URL is needed (or --compare A.json B.json)")
    headers = list(args.header)
    if args.api_key:
        headers.append(("Authorization", f"Bearer {args.api_key}"))
    prompt = (
        args.prompt_file.read_text(encoding="utf-8")
        if args.prompt_file
        else args.prompt or "Say hello."
    )
    dataset = getattr(args, "dataset", None)
    if dataset is not None and (args.prompt_file or args.prompt):
        raise ValueError("--dataset replaces --prompt and --prompt-file")
    input_len, output_len = getattr(args, "input_len", None), getattr(args, "output_len", None)
    if (input_len or output_len) and (args.prompt_file or args.prompt):
        raise ValueError("--input-len/--output-len replace --prompt and --prompt-file")
    requests = None if args.duration is not None else (args.requests or 100)
    rate = getattr(args, "rate", None)
    if rate is not None and len(rate.rates) > 1 and args.requests is None:
        requests = None  # a ramp lasts its steps unless -n or -d says otherwise
    warm_n, warm_s = getattr(args, "warmup", None) or (0, 0.0)
    return BenchConfig(
        url=args.url,
        transport=args.transport,
        agent=args.agent,
        model=args.model,
        concurrency=args.concurrency,
        requests=requests,
        duration=args.duration,
        rate=rate,
        arrival=getattr(args, "arrival", "poisson"),
        burstiness=getattr(args, "burstiness", 1.0),
        seed=getattr(args, "seed", None),
        warmup_requests=warm_n,
        warmup_s=warm_s,
        slo=parse_goodput(getattr(args, "goodput", None) or []),
        prompt=prompt,
        dataset=load_dataset(dataset) if dataset is not None else (),
        turns=getattr(args, "turns", None),
        input_len=input_len,
        output_len=output_len,
        stream=args.stream,
        http2=args.http2,
        headers=tuple(headers),
        timeout=args.timeout,
        max_tokens=args.max_tokens,
        insecure=args.insecure,
    )


def _load(path: str) -> dict[str, Any]:
    data = orjson.loads(Path(path).read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a uamp bench JSON summary")
    return data


def _command(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.compare:
        try:
            a, b = (_load(path) for path in args.compare)
        except (OSError, ValueError) as exc:
            print(f"uamp bench: {exc}", file=sys.stderr)
            return 2
        print_compare(a, b, (args.compare[0], args.compare[1]), out)
        return 0
    try:
        config = config_from(args)
        if args.plot:
            check_plot(args.plot)
    except (OSError, ValueError) as exc:
        print(f"uamp bench: {exc}", file=sys.stderr)
        return 2
    show = not args.no_progress and sys.stderr.isatty()

    async def run() -> Any:
        if not show:
            return await run_bench(config)
        span = config.duration
        if span is None and config.rate is not None and config.requests is None:
            span = config.rate.total_s
        with LiveProgress(config.requests, span, sys.stderr) as progress:
            return await run_bench(config, on_sample=progress.add)

    processes = getattr(args, "processes", 1)
    if processes < 1:
        print("uamp bench: --processes must be at least 1", file=sys.stderr)
        return 2
    if processes > 1:
        from .processes import run_processes

        summary, samples = run_processes(config, processes)
    else:
        from .processes import cpu_seconds

        cpu = cpu_seconds()
        summary, samples = trio.run(run)
        used = cpu_seconds() - cpu
        busy = used / summary.duration_s if summary.duration_s > 0 else 0.0
        summary = attrs.evolve(summary, meta={**summary.meta, "generator_cpu": [busy]})
    print_summary(summary, out)
    if args.save_requests:
        with open(args.save_requests, "wb") as saved:
            for sample in samples:
                saved.write(orjson.dumps(sample.record()) + b"\n")
    if args.json:
        Path(args.json).write_bytes(
            orjson.dumps(summary.to_json(), option=orjson.OPT_INDENT_2) + b"\n"
        )
    if args.plot:
        from .plot import plot

        plot(samples, args.plot, title=f"uamp bench: {summary.meta.get('url', '')}")
    return 1 if summary.errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m uamp_trio.bench.command URL ...`` (the same as ``uamp bench``)."""
    return run_command("uamp bench", __doc__ or "", _arguments, _command, argv)


if __name__ == "__main__":
    sys.exit(main())
