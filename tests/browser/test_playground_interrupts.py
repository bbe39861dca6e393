"""The playground's approval card in a real headless Chromium against ``uamp serve --approve add``.

The page declares it answers interrupts; when the demo agent asks before it
runs ``add`` the reply shows a card with the call and Approve / Deny buttons;
a click answers (``interrupt.answer``) and the same reply goes on.
"""

from __future__ import annotations

from selenium.webdriver import Chrome as WebDriver
from selenium.webdriver.common.by import By

from tests._support.cli import uamp_serve
from tests.browser.test_playground import (
    finished,
    no_page_errors,
    open_page,
    replies,
    say,
    wait,
)


def test_the_approve_and_deny_buttons_answer_the_agents_question(browser: WebDriver) -> None:
    with uamp_serve("--approve", "add") as url:
        pane = open_page(browser, url + "/")
        say(pane, "what is 2+3?")
        card = wait(browser, lambda d: pane.find_elements(By.CSS_SELECTOR, ".interrupt"))[0]
        assert card.get_attribute("data-state") == "pending"
        assert card.find_element(By.CSS_SELECTOR, ".interrupt-title").text.startswith(
            "Approval needed"
        )
        assert '"a": 2' in card.find_element(By.CSS_SELECTOR, ".interrupt-args").text
        assert replies(pane)[0].get_attribute("data-status") == "streaming"  # it waits
        approve, deny = card.find_elements(By.TAG_NAME, "button")
        assert (approve.text, deny.text) == ("Approve", "Deny")
        approve.click()
        reply = finished(pane, 1)
        assert reply.find_element(By.CSS_SELECTOR, ".body").text == "2 + 3 = 5"
        wait(browser, lambda d: card.get_attribute("data-state") == "approved")
        assert not approve.is_enabled() and not deny.is_enabled()

        say(pane, "what is 2+3?")
        wait(browser, lambda d: len(pane.find_elements(By.CSS_SELECTOR, ".interrupt")) == 2)
        second = pane.find_elements(By.CSS_SELECTOR, ".interrupt")[1]
        second.find_elements(By.TAG_NAME, "button")[1].click()  # Deny
        reply = finished(pane, 2)
        assert "denied" in reply.find_element(By.CSS_SELECTOR, ".body").text
        wait(browser, lambda d: second.get_attribute("data-state") == "denied")
        no_page_errors(browser)
