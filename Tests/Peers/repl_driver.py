#!/usr/bin/env python3
"""Drives the beaconbench REPL through a pseudo-terminal, as a person would.

usage: repl_driver.py SCRIPT.json -- BEACONBENCH ARGS...

SCRIPT is a list of steps, or an object {"steps": [...], "term": "xterm",
"cols": 200, "rows": 50, "env": {"NAME": "value" or null to unset}}:
  {"send": "text"}                     bytes typed (\t for Tab, \x03 for Ctrl-C);
                                       no pause after it: a step that needs the
                                       program to have taken them waits for
                                       what it shows (an expect or a screen)
  {"send": "x", "echo": true}          typed, then wait until the program has
                                       echoed it (the text appears in what it
                                       writes after the send)
  {"expect": "text", "timeout": 120}   wait until the output contains it
                                       (after what earlier expects consumed)
  {"expectAll": ["a", "b"]}            wait until the output contains each, in
                                       any order (after what earlier expects
                                       consumed); consumes up to the last
  {"screen": "REGEX", "timeout": 120}  wait until a row of the emulated screen
                                       matches REGEX whole (re.fullmatch)
  {"snapshot": "name"}                 keep the emulated screen as it is now
  {"resize": [rows, cols]}             resize the window (the pty, so the
                                       program gets SIGWINCH, and the screen)
  {"run": ["busctl", ...]}             run a command (e.g. to change the simulator)
  {"eof": true, "timeout": 120}        Ctrl-D; wait for the process to exit
Every wait has a cap (timeout, default 120 s: a stall guard, not a pace);
a step that runs out of it stops the script with "ok": false.
The terminal (TERM, default xterm) is emulated by pyte, fed every byte the
program writes, at COLS x ROWS (default 200 x 50, also set on the pty);
pyte is imported only for a script in the object form (a list needs no
more than the standard library).
Prints one JSON object: {"ok": bool, "step": n, "status": exit status,
"transcript": everything the terminal was sent, "esc": how many ESC bytes
it held, "screens": {name: {"display": [rows, right-stripped], "cursor":
{"x", "y"}}}, "display": the screen at the end}.
"""
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

CAP = 120.0


def main():
    script = json.load(open(sys.argv[1]))
    options = script if isinstance(script, dict) else {"steps": script}
    steps = options["steps"]
    cols, rows = options.get("cols", 200), options.get("rows", 50)
    command = sys.argv[sys.argv.index("--") + 1:]
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.environ["TERM"] = options.get("term", "xterm")
        for name, value in options.get("env", {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.execv(command[0], command)
    if isinstance(script, dict):
        import pyte
        screen = pyte.Screen(cols, rows)
        stream = pyte.ByteStream(screen)
    else:
        screen = stream = None
    screens = {}
    transcript = b""
    consumed = 0
    status = None

    def display():
        return [row.rstrip() for row in screen.display] if screen else []

    def read_for(seconds):
        nonlocal transcript
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0, deadline - time.monotonic()))
            if not ready:
                return
            try:
                data = os.read(fd, 4096)
            except OSError:
                return
            if not data:
                return
            transcript += data
            if stream:
                stream.feed(data)
            yield

    def finish(ok, index):
        report(ok, index, status, transcript, screens, display())

    for index, step in enumerate(steps):
        if "pause" in step:
            raise SystemExit("repl_driver.py: 'pause' is gone: wait for what the program shows (expect, screen, echo)")
        if "send" in step:
            sent_at = len(transcript)
            os.write(fd, step["send"].encode())
            if step.get("echo"):
                wanted = step["send"].encode()
                if transcript.find(wanted, sent_at) < 0:
                    for _ in read_for(step.get("timeout", CAP)):
                        if transcript.find(wanted, sent_at) >= 0:
                            break
                if transcript.find(wanted, sent_at) < 0:
                    finish(False, index)
                    os.kill(pid, 9)
                    return
        elif "expect" in step:
            wanted = step["expect"].encode()
            found = transcript.find(wanted, consumed)
            if found < 0:
                for _ in read_for(step.get("timeout", CAP)):
                    found = transcript.find(wanted, consumed)
                    if found >= 0:
                        break
            if found < 0:
                finish(False, index)
                os.kill(pid, 9)
                return
            consumed = found + len(wanted)
        elif "expectAll" in step:
            wanted = [text.encode() for text in step["expectAll"]]

            def all_found():
                return all(transcript.find(text, consumed) >= 0 for text in wanted)
            if not all_found():
                for _ in read_for(step.get("timeout", CAP)):
                    if all_found():
                        break
            if not all_found():
                finish(False, index)
                os.kill(pid, 9)
                return
            consumed = max(transcript.find(text, consumed) + len(text) for text in wanted)
        elif "screen" in step:
            pattern = re.compile(step["screen"])

            def shown():
                return any(pattern.fullmatch(row) for row in display())
            if not shown():
                for _ in read_for(step.get("timeout", CAP)):
                    if shown():
                        break
            if not shown():
                finish(False, index)
                os.kill(pid, 9)
                return
        elif "resize" in step:
            new_rows, new_cols = step["resize"]
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", new_rows, new_cols, 0, 0))
            if screen:
                screen.resize(new_rows, new_cols)
        elif "snapshot" in step:
            cursor = {"x": screen.cursor.x, "y": screen.cursor.y} if screen else {}
            screens[step["snapshot"]] = {"display": display(), "cursor": cursor}
        elif "run" in step:
            subprocess.run(step["run"], check=True, stdout=subprocess.DEVNULL)
        elif "eof" in step:
            os.write(fd, b"\x04")
            for _ in read_for(step.get("timeout", CAP)):
                pass
            # Its output is closed (or the cap ran out): wait for the exit
            # (polled every 50 ms, a poll interval, within the same cap).
            deadline = time.monotonic() + step.get("timeout", CAP)
            while time.monotonic() < deadline:
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = os.waitstatus_to_exitcode(code)
                    break
                time.sleep(0.05)
            if status is None:
                finish(False, index)
                os.kill(pid, 9)
                return
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    finish(True, len(steps))


def report(ok, step, status, transcript, screens, display):
    print(json.dumps({"ok": ok, "step": step, "status": status,
                      "transcript": transcript.decode("utf-8", "replace"),
                      "esc": transcript.count(b"\x1b"), "screens": screens, "display": display}))


if __name__ == "__main__":
    main()
