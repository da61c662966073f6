"""The chat page (api/ui/) as its browser tests see it: what a person does (type, press
Enter, click Stop, change a setting) and what they see (the messages, a reply's stats)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from browser import wait_for
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

CONVERSATIONS_KEY = "flint.conversations.v1"  # api/ui/static/js/storage.js


class ChatPage:
    def __init__(self, driver, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url

    def open(self, fresh: bool = True) -> None:
        """Load the page; `fresh`: with nothing kept from earlier tests."""
        self.driver.get(f"{self.base_url}/")
        if fresh:
            self.driver.execute_script("localStorage.clear()")
            self.driver.refresh()
        wait_for(lambda: self.driver.execute_script("return document.readyState") == "complete")

    def element(self, element_id: str):
        return self.driver.find_element(By.ID, element_id)

    def type_message(self, text: str) -> None:
        self.element("input").send_keys(text)

    def send(self, text: str) -> None:
        """Type `text` and press Enter, as a person sends a message."""
        self.type_message(text)
        self.element("input").send_keys(Keys.ENTER)

    def set_settings(self, **values) -> None:
        """Fill settings fields (by their ids) as a person would: open the panel, select, type."""
        if not self.element("settings").is_displayed():
            self.element("toggle-settings").click()
        for field, value in values.items():
            box = self.element(field)
            if box.get_attribute("type") == "checkbox":
                if box.is_selected() != bool(value):
                    box.click()
                continue
            box.send_keys(Keys.CONTROL, "a")
            box.send_keys(Keys.DELETE)
            box.send_keys(str(value))

    def messages(self) -> list[tuple[str, str]]:
        """(role, text shown) of each message on the page."""
        return [(element.get_attribute("data-role"), element.find_element(By.CLASS_NAME, "body").text)
                for element in self.driver.find_elements(By.CSS_SELECTOR, "#messages .message")]

    def last_reply(self):
        return self.driver.find_elements(By.CSS_SELECTOR, "#messages .message.assistant")[-1]

    def reply_text(self) -> str:
        return self.last_reply().find_element(By.CLASS_NAME, "body").text

    def generating(self) -> bool:
        return self.element("stop").is_displayed()

    def wait_until_replied(self, timeout: float = 180) -> str:
        """The last reply's stats line once its generation has ended."""
        wait_for(lambda: not self.generating(), timeout, "the reply to end")
        return self.last_reply().find_element(By.CLASS_NAME, "stats").text

    def reply_error(self) -> str:
        return self.last_reply().find_element(By.CLASS_NAME, "error").text

    def kept_conversations(self) -> list[dict]:
        """What the page keeps in local storage."""
        return json.loads(self.driver.execute_script(f"return localStorage.getItem('{CONVERSATIONS_KEY}')") or "[]")

    def screenshot(self, directory: Path, name: str = "chat-page.png") -> Path:
        path = directory / name
        self.driver.save_screenshot(str(path))
        return path


def watch_growth(page: ChatPage, timeout: float = 180) -> list[int]:
    """The lengths of the reply's text seen while it streams, each different from the last."""
    lengths: list[int] = []
    deadline = time.monotonic() + timeout
    wait_for(page.generating, 30, "the generation to start")
    while page.generating():
        assert time.monotonic() < deadline, "the reply never ended"
        length = len(page.reply_text())
        if length and (not lengths or length != lengths[-1]):
            lengths.append(length)
        time.sleep(0.02)
    return lengths
