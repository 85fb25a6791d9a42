#!/usr/bin/env python3
"""Drives the beaconbench REPL through a pseudo-terminal, as a person would.

usage: repl_driver.py SCRIPT.json -- BEACONBENCH ARGS...

SCRIPT is a list of steps:
  {"send": "text"}                     bytes typed (\t for Tab, \x03 for Ctrl-C)
  {"expect": "text", "timeout": 10}    wait until the screen output contains it
                                       (after what earlier expects consumed)
  {"run": ["busctl", ...]}             run a command (e.g. to change the simulator)
  {"eof": true}                        Ctrl-D; wait for the process to exit
Prints one JSON object: {"ok": bool, "step": n, "status": exit status,
"transcript": everything the terminal showed}.
"""
import json
import os
import pty
import select
import subprocess
import sys
import time


def main():
    script = json.load(open(sys.argv[1]))
    command = sys.argv[sys.argv.index("--") + 1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm"
        os.execv(command[0], command)
    transcript = b""
    consumed = 0
    status = None

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
            yield

    for index, step in enumerate(script):
        if "send" in step:
            os.write(fd, step["send"].encode())
            time.sleep(step.get("pause", 0.05))
        elif "expect" in step:
            wanted = step["expect"].encode()
            found = transcript.find(wanted, consumed)
            if found < 0:
                for _ in read_for(step.get("timeout", 10)):
                    found = transcript.find(wanted, consumed)
                    if found >= 0:
                        break
            if found < 0:
                report(False, index, status, transcript)
                os.kill(pid, 9)
                return
            consumed = found + len(wanted)
        elif "run" in step:
            subprocess.run(step["run"], check=True, stdout=subprocess.DEVNULL)
        elif "eof" in step:
            os.write(fd, b"\x04")
            for _ in read_for(step.get("timeout", 10)):
                pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = os.waitstatus_to_exitcode(code)
                    break
                time.sleep(0.05)
            if status is None:
                report(False, index, status, transcript)
                os.kill(pid, 9)
                return
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    report(True, len(script), status, transcript)


def report(ok, step, status, transcript):
    print(json.dumps({"ok": ok, "step": step, "status": status,
                      "transcript": transcript.decode("utf-8", "replace")}))


if __name__ == "__main__":
    main()
