"""``--input-len`` / ``--output-len``: length distributions and the synthetic prompts they make.

A distribution is written as vLLM's random dataset takes its lengths, in
words: ``N`` or ``const:N`` (always N), ``uniform:A:B`` (A to B, both
included), ``normal:MEAN:SD`` (rounded, at least 1). Each draw uses the run's
seeded ``random.Random``, so a seeded run asks for the same lengths.

A synthetic prompt of ``n`` words asking for ``m`` output words is
``m`` followed by ``n - 1`` words drawn from :data:`VOCABULARY` (``n`` is at
least 1: the number alone). The leading number is what an agent whose reply
length follows the prompt reads (bench/flood_agent.py answers that many
words); the drivers also send ``m`` in the request's own output limit where
the transport has one (Chat Completions ``max_tokens``, Responses
``max_output_tokens``, Anthropic ``max_tokens``), as vLLM's benchmark does.
"""

from __future__ import annotations

import random

import attrs

__all__ = ["VOCABULARY", "Lengths", "parse_lengths", "synthetic_prompt"]

#: The words synthetic prompts are made of (short, one token each for most tokenizers).
VOCABULARY = (
    *("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"),
    *("juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo"),
    *("sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "red"),
    *("green", "blue", "black", "white", "grey", "north", "south", "east", "west", "up"),
    *("down", "left", "right"),
)

#: The longest length a distribution may give (a bench's prompt, not a book).
MAX_LENGTH = 1_000_000


@attrs.frozen
class Lengths:
    """A length distribution: ``kind`` (``const``, ``uniform``, ``normal``) and its two numbers."""

    kind: str
    a: float
    b: float = 0.0

    def draw(self, rng: random.Random) -> int:
        """One length (at least 1, at most :data:`MAX_LENGTH`)."""
        if self.kind == "const":
            value = self.a
        elif self.kind == "uniform":
            value = rng.randint(int(self.a), int(self.b))
        else:
            value = round(rng.gauss(self.a, self.b))
        return int(min(max(1, value), MAX_LENGTH))

    def __str__(self) -> str:
        if self.kind == "const":
            return f"const:{self.a:g}"
        return f"{self.kind}:{self.a:g}:{self.b:g}"


def parse_lengths(text: str) -> Lengths:
    """``N``, ``const:N``, ``uniform:A:B`` or ``normal:MEAN:SD``.

    Raises:
        ValueError: Another form, a length below 1 or over :data:`MAX_LENGTH`,
            ``A > B``, a negative SD.
    """
    kind, _, rest = text.partition(":")
    if not rest and kind.isdigit():
        kind, rest = "const", kind
    parts = rest.split(":") if rest else []
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"not a length distribution: {text!r}") from None
    shapes = {"const": 1, "uniform": 2, "normal": 2}
    if kind not in shapes or len(numbers) != shapes[kind]:
        raise ValueError(
            f"not a length distribution: {text!r} (N, const:N, uniform:A:B or normal:MEAN:SD)"
        )
    if kind in ("const", "uniform") and not all(n.is_integer() for n in numbers):
        raise ValueError(f"{text!r}: lengths are whole numbers of words")
    first = numbers[0]
    if not 1 <= first <= MAX_LENGTH or (
        kind == "uniform" and not first <= numbers[1] <= MAX_LENGTH
    ):
        raise ValueError(f"{text!r}: lengths run from 1 to {MAX_LENGTH} (and A <= B)")
    if kind == "normal" and not numbers[1] >= 0:
        raise ValueError(f"{text!r}: the standard deviation must not be negative")
    return Lengths(kind, *numbers)


def synthetic_prompt(words: int, output: int | None, rng: random.Random) -> str:
    """A prompt of ``words`` words: ``output`` (when given) then words of :data:`VOCABULARY`."""
    head = [] if output is None else [str(output)]
    tail = rng.choices(VOCABULARY, k=max(0, words - len(head)))
    return " ".join(head + tail) or rng.choice(VOCABULARY)
