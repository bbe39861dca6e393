"""A real headless Chromium for the playground tests, and an agent slow enough to watch.

:func:`ensure_chromium` finds Debian's ``chromium`` and ``chromedriver``
and, when either is missing, installs the packages ``chromium`` and
``chromium-driver`` with ``apt-get`` (as root, as CI runs). It never skips:
a machine that cannot install them fails the test with apt's own message.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import trio
from selenium import webdriver

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

from .agents import TestAgent

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
    if os.geteuid() != 0:
        raise RuntimeError(
            "the playground tests need Debian's chromium and chromium-driver; run them as "
            "root (CI does) or: sudo apt-get install -y " + " ".join(PACKAGES)
        )
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
