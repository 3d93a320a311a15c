"""A real headless Chromium for browser tests, driven over the DevTools protocol.

Debian's ``chromium`` is installed with apt-get when missing (CI starts on a fresh machine). The protocol client is
``websockets`` (already in Prefect's tree), so no browser driver package is needed. Chromium listens on 127.0.0.1 only
(``--remote-debugging-port=0``: it picks a free port and writes it to ``DevToolsActivePort`` in its profile).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-port=0"]


def ensure_chromium() -> str:
    """The path of Debian's chromium, installed with apt-get first when it is missing."""
    found = shutil.which("chromium")
    if found:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], check=True, env=env,
                   capture_output=True)
    return shutil.which("chromium") or "/usr/bin/chromium"


class Page:
    """One browser tab: navigate, evaluate JavaScript, wait for a condition, take a screenshot."""

    def __init__(self, ws_url: str) -> None:
        self.ws = connect(ws_url, max_size=None, open_timeout=30)
        self._id = 0

    def call(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:  # events arrive in between; answers carry our id
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def goto(self, url: str, width: int = 1400, height: int = 1000) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        result = self.call("Page.navigate", url=url)
        if result.get("errorText"):
            raise RuntimeError(f"{url}: {result['errorText']}")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        """Poll ``expression`` until it is truthy; return its value (or fail with what the page shows)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        text = self.evaluate("document.body ? document.body.innerText.slice(0, 2000) : ''")
        raise AssertionError(f"{expression} never held within {timeout}s; the page shows:\n{text}")

    def screenshot(self, path: Path) -> Path:
        """The whole page (not only the viewport) as a PNG."""
        width, height = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        self.call("Emulation.setDeviceMetricsOverride", width=max(width, 800), height=min(max(height, 600), 8000),
                  deviceScaleFactor=1, mobile=False)
        time.sleep(0.3)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        self.ws.close()


class Chromium:
    """A headless Chromium with a fresh profile under ``home``; stop it with ``close``."""

    def __init__(self, home: Path) -> None:
        self.profile = home / "chromium-profile"
        self.profile.mkdir(parents=True)
        self.log = open(home / "chromium.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([ensure_chromium(), *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not start:\n{(home / 'chromium.log').read_text()[-3000:]}")
            time.sleep(0.1)
        self.endpoint = f"http://127.0.0.1:{port_file.read_text().split()[0]}"

    def new_page(self) -> Page:
        request = urllib.request.Request(f"{self.endpoint}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(request, timeout=30) as r:
            return Page(json.loads(r.read())["webSocketDebuggerUrl"])

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


# Every <img> whose alt is one of ``names``: loaded (complete) with a non-zero natural size.
IMAGES_JS = """(() => {{
  const names = {names};
  const imgs = [...document.querySelectorAll('img')].filter(i => names.includes(i.alt));
  return imgs.map(i => ({{alt: i.alt, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
                          src: i.getAttribute('src').slice(0, 22)}}));
}})()"""


def images(page: Page, names: list[str], settle: float = 1.0) -> list[dict]:
    """The page's chart images by alt text, once each is present and finished loading (loaded or broken).

    A single-page app may re-render (a route that adds ``?tab=...`` remounts the markdown), so the answer must hold
    twice, ``settle`` seconds apart.
    """
    js = IMAGES_JS.format(names=json.dumps(names))
    ready = f"(() => {{ const i = {js}; return i.length >= {len(names)} && i.every(x => x.complete) ? i : null; }})()"
    deadline = time.monotonic() + 60
    while True:
        page.wait_for(ready)
        time.sleep(settle)
        found = page.evaluate(ready)
        if found or time.monotonic() > deadline:
            return found or []


def table_cells(page: Page) -> list[str]:
    """The text of every table cell on the page."""
    return page.evaluate("[...document.querySelectorAll('table td')].map(td => td.innerText.trim())")
