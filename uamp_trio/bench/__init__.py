"""``uamp bench``: load an agent endpoint and report its latency and throughput.

:mod:`.config` holds what a run does (:class:`~.config.BenchConfig`, the URL
and duration rules), :mod:`.workload` and :mod:`.lengths` what its requests
say, :mod:`.dialects` reads each HTTP transport's stream, :mod:`.drivers`
and the ``drive_*`` modules send one request per transport (:mod:`.driving`
picks one), :mod:`.runner` runs the closed or open loop (:mod:`.arrivals`),
:mod:`.processes` splits it over processes, :mod:`.stats` and :mod:`.hdr`
turn samples into the summary, :mod:`.report` prints tables and
comparisons, :mod:`.plot` draws charts and :mod:`.command` is the command
line. See docs/bench.md.
"""

from ..units import parse_duration
from .config import BenchConfig, chat_completions_url
from .runner import run_bench
from .stats import Sample, Summary, percentile, summarize

__all__ = [
    "BenchConfig",
    "Sample",
    "Summary",
    "chat_completions_url",
    "parse_duration",
    "percentile",
    "run_bench",
    "summarize",
]
