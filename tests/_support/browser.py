"""A real headless Chromium for the playground tests, and an agent slow enough to watch.

:func:`ensure_chromium` finds Debian's ``chromium`` and ``chromedriver``
and, when either is missing, installs the packages ``chromium`` and
``chromium-driver`` with ``apt-get`` (as root, as CI runs). It never skips:
a machine that cannot install them fails the test with apt's own message.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading

import trio
from selenium import webdriver

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

from .agents import TestAgent
from .cache import cache_folder, exclusive
from .system import installs_allowed, missing

PACKAGES = ("chromium", "chromium-driver")


def _apt(*args: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"apt-get {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def ensure_chromium() -> tuple[str, str]:
    """The paths of ``chromium`` and ``chromedriver``, installing Debian's packages if needed.

    Raises:
        RuntimeError: They are missing and cannot be installed (not root, or apt failed).
    """
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    if not installs_allowed():
        missing("chromium and chromedriver", "apt-get install -y " + " ".join(PACKAGES))
    if os.geteuid() != 0:
        raise RuntimeError(
            "the playground tests need Debian's chromium and chromium-driver; run them as "
            "root (CI does) or: sudo apt-get install -y " + " ".join(PACKAGES)
        )
    # One apt-get at a time across the test processes (it holds dpkg's lock).
    with exclusive(cache_folder("apt-get")):
        if not (shutil.which("chromium") and shutil.which("chromedriver")):
            _apt("update", "-q")
            _apt("install", "-y", "-q", "--no-install-recommends", *PACKAGES)
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (browser and driver):
        raise RuntimeError("apt-get installed chromium but chromium/chromedriver is not on PATH")
    return browser, driver


def start_chrome(width: int = 1280, height: int = 800) -> webdriver.Chrome:
    """A headless Chromium driven by chromedriver, keeping the console and network logs."""
    browser, driver = ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace to sandbox with
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--force-device-scale-factor=1",
        "--force-color-profile=srgb",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))


class Storyteller(TestAgent):
    """Thinks, reports its cost, then streams a numbered word every 50 ms for a minute.

    Long enough to be cancelled; the thinking and the cost come first so a
    cancelled reply still shows them.
    """

    name = "story"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.Thinking(content="Planning a long story.", is_delta=True))
        cost = ty.UsageCost(total_cost=0.0042, currency="USD")
        await emit(ev.UsageDelta(delta=ty.UsageStats(input_tokens=5, output_tokens=0, cost=cost)))
        for i in range(1200):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"word{i} ")))
            await trio.sleep(0.05)


class ShortStory(TestAgent):
    """Streams ``word0`` ... ``word79``, one every 50 ms: four seconds to drop a connection in."""

    name = "short"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for i in range(80):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"word{i} ")))
            await trio.sleep(0.05)


class Relay:
    """A TCP relay on 127.0.0.1 to ``target_port`` whose connections can all be cut at once.

    The browser talks to the server through it; :meth:`cut` is a network drop
    (both peers see their connection end), after which new connections are
    relayed again, as when the network comes back.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:  # nothing listens there (yet): as a refused connection
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """End every open connection (both ways)."""
        with self._lock:
            cut, self._open = self._open, []
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        """Stop relaying."""
        self.listener.close()
        self.cut()
