"""``uamp chat`` interactively: commands, queued lines, /cancel, Ctrl-C, Ctrl-D, and on a
terminal (a pty) prompt_toolkit's line editing and history -- real subprocesses."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyte
import pytest

from tests._support.cli import ENV, ROOT, UAMP_SCRIPT, Served, uamp


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    with Served([UAMP_SCRIPT, "serve", "--port", "0", "--no-access-log"]) as srv:
        yield srv.url()


@pytest.fixture(scope="module")
def slow() -> Iterator[str]:
    command = [UAMP_SCRIPT, "serve", "--port", "0", "--agent", "tests._support.paying:slow"]
    with Served(command) as srv:
        yield srv.url()


SESSION = re.compile(r"session (sess_\w+|[\w-]{8,})")


def test_help_new_and_queued_lines(demo: str) -> None:
    done = uamp(
        "chat", demo, "--agent", "demo", stdin="/help\nfirst\n/new\nsecond\n/bogus\n/quit\n"
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for command in ("/help", "/new", "/cancel", "/quit"):
        assert command in out
    assert out.count("[usage]") == 2
    assert "first" in out and "second" in out
    sessions = SESSION.findall(out)
    assert len(sessions) == 2 and sessions[0] != sessions[1], out  # connected, then /new
    assert out.index("first") < out.index("[new]") < out.rindex("second")
    assert "unknown command /bogus" in out
    assert "Traceback" not in done.stderr


def test_end_of_input_answers_what_is_queued_then_leaves(demo: str) -> None:
    done = uamp("chat", demo, "--agent", "demo", stdin="one\ntwo\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("[usage]") == 2
    assert "Traceback" not in done.stderr


def _spawn_chat(url: str) -> tuple[subprocess.Popen[str], Served]:
    """A chat whose stdin we write to; its output lines are collected."""
    served = Served([UAMP_SCRIPT, "chat", url, "--agent", "slow"], stdin=True)
    return served.proc, served


def test_cancel_and_ctrl_c_stop_an_answer_and_ctrl_c_then_leaves(slow: str) -> None:
    proc, out = _spawn_chat(slow)
    assert proc.stdin is not None
    try:
        out.wait_for(r"\[connected\]")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out.wait_for("working")
        proc.stdin.write("/cancel\n")
        proc.stdin.flush()
        out.wait_for(r"\[cancelled\]")
        mark = len(out.lines)
        proc.stdin.write("again\n")
        proc.stdin.flush()
        out.wait_for("working", after=mark)
        proc.send_signal(signal.SIGINT)  # Ctrl-C while an answer is written: stops it
        out.wait_for(r"\[cancelled\]", after=mark)
        assert proc.poll() is None  # still chatting
        proc.send_signal(signal.SIGINT)  # Ctrl-C with nothing running: leaves
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "\n".join(out.lines)
    assert text.count("[cancelled]") == 2
    assert "Traceback" not in text


def test_cancel_with_nothing_running_says_so(demo: str) -> None:
    done = uamp("chat", demo, "--agent", "demo", stdin="/cancel\n")
    assert done.returncode == 0
    assert "no answer is being written" in done.stdout


# --- a terminal: prompt_toolkit -----------------------------------------------------------


class Terminal:
    """``uamp chat`` on a pseudo-terminal, as a person would run it, read off the screen a
    VT100 emulator (pyte) draws from its output -- prompt_toolkit redraws the prompt around
    each piece of a streamed answer, so the raw bytes are not what a person sees."""

    def __init__(self, url: str, history: Path, agent: str = "demo", lines: int = 40) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [UAMP_SCRIPT, "chat", url, "--agent", agent, "--history", str(history)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=ROOT,
            env={
                **ENV,
                "TERM": "xterm",
                "COLUMNS": "100",
                "LINES": str(lines),
                "PROMPT_TOOLKIT_NO_CPR": "1",
            },
            start_new_session=True,
        )
        os.close(slave)
        self.screen = pyte.Screen(100, lines)
        self.stream = pyte.ByteStream(self.screen)

    @property
    def text(self) -> str:
        """The screen's lines, trailing blanks dropped."""
        return "\n".join(line.rstrip() for line in self.screen.display).rstrip("\n")

    def read_until(self, pattern: str, count: int = 1, timeout: float = 20) -> None:
        """Read until ``pattern`` shows ``count`` times on the screen."""
        self.wait(lambda text: len(re.findall(pattern, text)) >= count, pattern, timeout)

    def prompt_after(self, answers: int, timeout: float = 20) -> None:
        """Read until ``answers`` answers are on the screen and the empty prompt is below."""

        def ready(text: str) -> bool:
            lines = text.splitlines()
            return text.count("usage") >= answers and bool(lines) and lines[-1] == ">"

        self.wait(ready, f"the prompt after answer {answers}", timeout)

    def wait(self, done: Callable[[str], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done(self.text):
            left = deadline - time.monotonic()
            assert left > 0, f"no {what!r} on the screen:\n{self.text}"
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    self.stream.feed(os.read(self.master, 65536))
                except OSError:
                    break

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> int:
        """Wait for the chat to leave; what it wrote until then is on the screen."""
        try:
            code = self.proc.wait(timeout=15)
            while select.select([self.master], [], [], 0.2)[0]:
                try:
                    self.stream.feed(os.read(self.master, 65536))
                except OSError:
                    break
            return code
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.close(self.master)


UP, LEFT = "\x1b[A", "\x1b[D"


def test_terminal_has_line_editing_history_and_a_clean_ctrl_d(demo: str, tmp_path: Path) -> None:
    history = tmp_path / "history"
    term = Terminal(demo, history)
    term.prompt_after(0)
    term.type("hello one\r")
    term.prompt_after(1)  # keys typed before the prompt is back would meet a cooked tty
    # The answer is written above the prompt (not over it), then the prompt is drawn again.
    assert "You said: hello one" in term.text, term.text
    term.type(UP + "\r")  # the previous line again, from the history
    term.prompt_after(2)
    # Two answers though one line was typed: the second was recalled from the history, and
    # shows after the first answer.
    first = term.text.index("usage")
    assert "You said: hello one" in term.text[first:], term.text
    term.type("abc" + LEFT * 3 + "X\r")  # edit before sending: Xabc
    term.prompt_after(3)
    assert "You said: Xabc" in term.text, term.text
    term.type("\x04")  # Ctrl-D
    assert term.close() == 0
    assert "Traceback" not in term.text
    submitted = [line[1:] for line in history.read_text().splitlines() if line.startswith("+")]
    assert submitted == ["hello one", "Xabc"], term.text  # a repeated line is stored once


def test_terminal_ctrl_c_at_the_prompt_leaves_cleanly(demo: str, tmp_path: Path) -> None:
    term = Terminal(demo, tmp_path / "history")
    term.read_until(r"(?m)^>")
    term.type("\x03")  # Ctrl-C
    assert term.close() == 0
    assert "Traceback" not in term.text


@pytest.fixture(scope="module")
def ticker() -> Iterator[str]:
    agent = "tests._support.agents:Ticker"
    command = [UAMP_SCRIPT, "serve", "--port", "0", "--no-access-log", "--agent", agent]
    with Served(command) as srv:
        yield srv.url()


def test_ten_rapid_turns_keep_every_streamed_word_on_the_screen(
    ticker: str, tmp_path: Path
) -> None:
    """Lines typed while answers stream (one delta per 50 ms, no newline): every answer
    shows whole, in order -- the prompt's redraw never erases a line written in pieces."""
    term = Terminal(ticker, tmp_path / "history", agent="ticker", lines=60)
    term.prompt_after(0)
    counts = [3 + n % 3 for n in range(10)]
    for n, count in enumerate(counts):
        term.type(f"{count}\r")  # "N": the ticker says tick 0 ... tick N-1
        time.sleep(0.06 * (n % 4))  # typed between, during and after the answers

    def answers(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("tick")]

    term.wait(lambda text: len(answers(text)) >= 10 and text.endswith("\n>"), "10 answers", 60)
    expected = [" ".join(f"tick {i}" for i in range(count)) for count in counts]
    assert answers(term.text) == expected, term.text
    term.type("\x04")
    assert term.close() == 0
