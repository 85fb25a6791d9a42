#!/usr/bin/env python3
"""Opens a beaconbench report in headless Chromium and says what a reader sees.

Drives Debian's `chromium` over the DevTools protocol on a pipe
(--remote-debugging-pipe: commands on the browser's fd 3, replies on its
fd 4, each message JSON ended by NUL), so nothing listens on a port and
nothing beyond the standard library is needed. Prints one JSON object:

- console_errors: console.error calls, uncaught exceptions and browser log
  entries of level error (a Content-Security-Policy violation is one);
- requests: every URL the page asked for besides itself (none is fetched);
- charts: per <figure data-chart>, its data-total, the number of marks
  (<rect>/<polyline> with data-value), the sum of the rects' data-value,
  and its table's rows;
- cards: the summary cards' numbers; table: the device table's rows;
- sort (with --sort): the battery column's button clicked twice, and
  whether the rows shown were then ascending, then descending (empty last);
- filter (with --filter TEXT): the text typed (Input.insertText) into the
  filter box, the matching count the page shows, the rows shown and whether
  each shown row holds the text;
- hostile (with --hostile TEXT): whether TEXT shows as text in a cell,
  and what an injection would have left (img/iframe/object elements,
  window.__pwned, scripts);
- timing: milliseconds from navigation start to the load event and to the
  end of the page's script (the device table's first render), and the
  wall-clock time from navigate to the load event.

Usage: report_browser.py PAGE.html [--sort] [--filter TEXT] [--hostile TEXT] [--screenshot PNG]
"""

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="report-browser-")
        to_browser_read, self.to_browser = os.pipe()
        self.from_browser, from_browser_write = os.pipe()
        # Above 4, so that moving them to 3 and 4 in the child overwrites neither.
        high_read = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
        high_write = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
        os.close(to_browser_read)
        os.close(from_browser_write)
        to_browser_read, from_browser_write = high_read, high_write

        def child_fds():
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)

        executable = shutil.which("chromium") or shutil.which("chromium-browser")
        if executable is None:
            raise SystemExit("report_browser.py: chromium is not installed (scripts/install-deps installs it)")
        self.process = subprocess.Popen(
            [
                executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-sync", "--metrics-recording-only",
                "--user-data-dir=" + self.profile, "--window-size=1280,1600", "about:blank",
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # subprocess closes what pass_fds does not name after preexec_fn runs.
            preexec_fn=child_fds, pass_fds=(3, 4, to_browser_read, from_browser_write),
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)

    def read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from chromium")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed its pipe")
                self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self.read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method, session, timeout=60):
        deadline = time.monotonic() + timeout
        for index, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(index)
        while True:
            event = self.read_message(deadline)
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            self.events.append(event)


COLLECT = r"""
(() => {
  const charts = {};
  for (const figure of document.querySelectorAll("figure[data-chart]")) {
    const marks = figure.querySelectorAll("svg [data-value]");
    let sum = 0;
    for (const mark of figure.querySelectorAll("svg rect[data-value]")) sum += Number(mark.dataset.value);
    const table = figure.querySelector("table[data-table]");
    const rows = table ? table.querySelectorAll("tbody tr").length : -1;
    const empty = table ? table.querySelectorAll("tbody td.empty").length : 0;
    const extra = {};
    for (const [key, value] of Object.entries(figure.dataset)) extra[key] = value;
    charts[figure.dataset.chart] = {
      total: Number(figure.dataset.total), marks: marks.length, sum: sum,
      table_rows: rows - empty, has_svg: !!figure.querySelector("svg[role=img] title"),
      has_caption: !!figure.querySelector("figcaption"), data: extra,
    };
  }
  const cards = {};
  for (const card of document.querySelectorAll("[data-card] strong"))
    cards[card.parentElement.dataset.card] = Number(card.textContent.replace(/,/g, ""));
  const status = document.getElementById("table-status");
  return {
    charts: charts, cards: cards,
    table: {
      rows: Number(document.getElementById("device-table").dataset.rows),
      matching: Number(status.dataset.matching), shown: document.querySelectorAll("#device-table tbody tr").length,
      columns: document.querySelectorAll("#device-table thead th").length,
    },
    rendered: Number(document.documentElement.dataset.rendered || -1),
    load: performance.getEntriesByType("navigation")[0].loadEventEnd,
    bytes: document.documentElement.outerHTML.length,
  };
})()
"""


# How long the page may take to do what a test waits for (load, first
# render, a filter): a stall guard of minutes, never a pace. Waits end on
# the page's own events (a promise that a MutationObserver resolves), and a
# stall fails naming what was awaited.
STALL = 300


def evaluate(browser, session, expression, timeout=60):
    result = browser.send(
        "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session,
        timeout=timeout,
    )
    if "exceptionDetails" in result:
        raise RuntimeError(f"evaluate: {result['exceptionDetails']}")
    return result["result"].get("value")


def type_filter(browser, session, text):
    """Types TEXT into the filter box as a user would; returns what the page shows once it has filtered.

    The page filters 120 ms after the last key and, last, writes the time it
    took into #table-status's data-ms (ReportPage.swift, refilter): a
    MutationObserver set before typing resolves on that write — also when the
    filter matches as many rows as before and the status text stays the same.
    """
    evaluate(
        browser, session,
        r"""(() => {
          const status = document.getElementById('table-status');
          window.__filtered = new Promise(resolve => {
            const observer = new MutationObserver(() => { observer.disconnect(); resolve(); });
            observer.observe(status, {attributes: true, attributeFilter: ['data-ms']});
          });
          const f = document.getElementById('filter'); f.value = ''; f.focus();
        })()""",
    )
    browser.send("Input.insertText", {"text": text}, session)
    try:
        evaluate(browser, session, "window.__filtered.then(() => true)", timeout=STALL)
    except TimeoutError:
        raise SystemExit(f"report_browser.py: waited {STALL} s for the page to filter on {text!r}")
    return evaluate(
        browser, session,
        r"""(() => {
          const rows = [...document.querySelectorAll('#device-table tbody tr')];
          return {
            value: document.getElementById('filter').value,
            status: document.getElementById('table-status').textContent,
            matching: Number(document.getElementById('table-status').dataset.matching),
            ms: Number(document.getElementById('table-status').dataset.ms || -1),
            shown: rows.length,
            cells: rows.map(r => [...r.children].map(td => td.textContent)),
          };
        })()""",
    )


def Number(text):
    try:
        return int(str(text).split()[0].replace(",", ""))
    except (ValueError, IndexError):
        return -1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("page")
    parser.add_argument("--filter")
    parser.add_argument("--hostile")
    parser.add_argument("--screenshot")
    parser.add_argument("--sort", action="store_true", help="sort by battery, both ways")
    arguments = parser.parse_args()
    url = "file://" + os.path.abspath(arguments.page)

    browser = Browser()
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            browser.send(domain + ".enable", {}, session)
        started = time.monotonic()
        browser.send("Page.navigate", {"url": url}, session)
        try:
            browser.wait_for("Page.loadEventFired", session, timeout=STALL)
        except TimeoutError:
            raise SystemExit(f"report_browser.py: waited {STALL} s for the page's load event")
        wall = (time.monotonic() - started) * 1000
        # The page's script marks the table drawn (data-rendered on <html>):
        # a promise resolved by that mark, not a poll.
        try:
            evaluate(
                browser, session,
                r"""new Promise(resolve => {
                  const html = document.documentElement;
                  if (html.dataset.rendered) return resolve(true);
                  const observer = new MutationObserver(() => {
                    if (html.dataset.rendered) { observer.disconnect(); resolve(true); }
                  });
                  observer.observe(html, {attributes: true, attributeFilter: ['data-rendered']});
                })""",
                timeout=STALL,
            )
        except TimeoutError:
            raise SystemExit(f"report_browser.py: waited {STALL} s for the page's script to draw the table")
        report = evaluate(browser, session, COLLECT)
        report["timing"] = {"load_ms": report.pop("load"), "script_done_ms": report.pop("rendered"), "wall_ms": wall}
        if arguments.sort:
            # Click the battery column's button twice: ascending, then descending.
            orders = []
            for _ in range(2):
                orders.append(evaluate(
                    browser, session,
                    r"""(() => {
                      document.querySelector('#device-table th button[data-column="4"]').click();
                      const cells = [...document.querySelectorAll('#device-table tbody tr')].map(r => r.children[4].textContent);
                      return {sort: document.querySelectorAll('#device-table th')[4].getAttribute('aria-sort'), cells: cells};
                    })()""",
                ))
            def ordered(cells, descending):
                values = [int(cell) for cell in cells if cell != ""]
                empty_last = all(cell == "" for cell in cells[len(values):])
                return empty_last and values == sorted(values, reverse=descending)
            report["sort"] = {
                "ascending": orders[0]["sort"] == "ascending" and ordered(orders[0]["cells"], False),
                "descending": orders[1]["sort"] == "descending" and ordered(orders[1]["cells"], True),
                "first": [orders[0]["cells"][:1], orders[1]["cells"][:1]],
            }
        if arguments.filter is not None:
            state = type_filter(browser, session, arguments.filter)
            needle = arguments.filter.lower()
            report["filter"] = {
                "text": arguments.filter, "value": state["value"], "matching": state["matching"],
                "shown": state["shown"], "filter_ms": state["ms"],
                "every_row_holds_it": all(needle in " ".join(cells).lower() for cells in state["cells"]),
            }
        if arguments.hostile is not None:
            state = type_filter(browser, session, arguments.hostile)
            report["hostile"] = {
                "shown_as_text": any(arguments.hostile in cell for cells in state["cells"] for cell in cells),
                "matching": state["matching"],
                "injected_elements": evaluate(
                    browser, session, "document.querySelectorAll('img, iframe, object, embed, marquee, b').length"
                ),
                "pwned": evaluate(browser, session, "String(window.__pwned)"),
                "scripts": evaluate(browser, session, "document.scripts.length"),
            }
        if arguments.screenshot:
            shot = browser.send("Page.captureScreenshot", {"format": "png"}, session)
            with open(arguments.screenshot, "wb") as file:
                file.write(base64.b64decode(shot["data"]))
        # One more round trip through the page: every event it sent before
        # (a console error, a request) is read before its answer.
        evaluate(browser, session, "true")
        errors, requests = [], []
        for event in browser.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append(params["entry"].get("text", ""))
            elif method == "Network.requestWillBeSent":
                requested = params.get("request", {}).get("url", "")
                if requested != url:
                    requests.append(requested)
        report["console_errors"] = errors
        report["requests"] = requests
    finally:
        browser.close()
    json.dump(report, sys.stdout)
    print()


if __name__ == "__main__":
    main()
