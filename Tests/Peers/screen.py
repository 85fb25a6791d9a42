#!/usr/bin/env python3
"""What a terminal would do with a command's output.

    python3 Tests/Peers/screen.py [--cols 200] [--rows 60] [--timeout 60]
        [--input LINE]... [--prompt REGEX] [--settle 0.3] [--eof]
        [--term TERM] [--unset NAME]... -- COMMAND ARGS...

Runs COMMAND on a pseudo-terminal (TERM=xterm-256color unless --term says,
the rest of the environment inherited but for the variables --unset names,
the window COLS x ROWS), feeds every byte it writes
there (stdout and stderr alike) into a pyte terminal emulator through
pyte.ByteStream, so that raw bytes -- invalid UTF-8, C1 controls, escape
sequences -- are taken as a UTF-8 terminal takes them, and prints one JSON
report on stdout when the command has finished: what the screen shows, and
every effect an escape sequence had or could have had on a real terminal.

--input LINE (repeatable) types LINE and Enter into the terminal once the
output has been quiet for --settle seconds (a REPL session) and, with
--prompt REGEX, once the output since the last input (escape sequences left
out) ends with a match of REGEX; --eof then types Ctrl-D. A command still running after --timeout seconds is killed (SIGTERM,
then SIGKILL) and reported with "timed_out": true.

The report (docs/simulator.md describes it too):

  command          the command line run
  exit_status      its exit code; -N when signal N ended it; null if unknown
  timed_out        true when it was killed for running past --timeout
  raw_bytes        how many bytes it wrote to the terminal
  raw              counts from a byte scan of that output: esc (0x1B bytes),
                   bel (0x07), nul (0x00), del (0x7F), c1_code_points
                   (U+0080..U+009F encoded as UTF-8, which a terminal may take
                   as CSI, OSC...), c1_bytes (bare bytes 0x80..0x9F outside
                   any valid UTF-8 sequence), invalid_utf8 (bytes a UTF-8
                   decoder replaces), shift_in_out (SO/SI bytes)
  escape_sequences every escape sequence found in the raw output, with its
                   text (control bytes shown as \\xNN) and how many times it
                   came, in order of first appearance: [{"text", "count"}]
  effects          counts of what the emulator was asked to do:
                     title          set_title (OSC 0 / OSC 2)
                     icon_name      set_icon_name (OSC 0 / OSC 1)
                     erase_in_display  ED (CSI J: clear screen)
                     erase_in_line  EL (CSI K: what a progress line uses)
                     cursor_moves   CUP/HVP, CUU/CUD/CUF/CUB, CNL/CPL, CHA,
                                    VPA/VPR/HPA/HPR, IND/RI, DECSC/DECRC
                     edits          ICH/DCH/ECH/IL/DL, DECSTBM, tab stops,
                                    DECALN
                     bell           BEL outside an OSC
                     modes          set_mode/reset_mode (CSI h / CSI l)
                     charset        charset designations (ESC ( X, ESC % X...)
                                    and SO/SI seen in the raw output, and
                                    define_charset calls
                     sgr            select_graphic_rendition (CSI m: colour and
                                    attributes; foreign when NO_COLOR=1)
                     reset          RIS (ESC c: full reset)
                     reports        device attribute/status requests (DA, DSR)
                     unknown        sequences the emulator did not recognise
                     errors         sequences that broke the emulator's parser
  effect_calls     the calls themselves, in order, up to 500:
                   [{"effect", "call", "args"}]
  titles           the titles set, in order
  modes            each mode change: [{"set": bool, "private": bool,
                   "modes": [int]}]
  display          the screen's rows at the end, right-stripped, trailing
                   empty rows dropped
  scrollback       rows that scrolled off the top, oldest first (up to 5000)
  cursor           {"x", "y"} at the end
"""

import argparse
import errno
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

import pyte

CURSOR_MOVES = {
    "cursor_position", "cursor_up", "cursor_down", "cursor_forward", "cursor_back",
    "cursor_up1", "cursor_down1", "cursor_to_column", "cursor_to_line",
    "index", "reverse_index", "save_cursor", "restore_cursor",
}
EDITS = {
    "insert_characters", "delete_characters", "erase_characters", "insert_lines",
    "delete_lines", "set_margins", "set_tab_stop", "clear_tab_stop", "alignment_display",
}
CATEGORIES = {
    "set_title": "title", "set_icon_name": "icon_name",
    "erase_in_display": "erase_in_display", "erase_in_line": "erase_in_line",
    "bell": "bell", "set_mode": "modes", "reset_mode": "modes",
    "define_charset": "charset", "shift_in": "charset", "shift_out": "charset",
    "select_graphic_rendition": "sgr", "reset": "reset",
    "report_device_attributes": "reports", "report_device_status": "reports",
    "debug": "unknown",
}
for name in CURSOR_MOVES:
    CATEGORIES[name] = "cursor_moves"
for name in EDITS:
    CATEGORIES[name] = "edits"
EFFECT_NAMES = [
    "title", "icon_name", "erase_in_display", "erase_in_line", "cursor_moves", "edits", "bell",
    "modes", "charset", "sgr", "reset", "reports", "unknown", "errors",
]
MAX_CALLS = 500


class RecordingScreen(pyte.HistoryScreen):
    """A pyte screen that records every call an escape sequence makes."""

    def __init__(self, columns, lines, history):
        self.recording = False
        self.depth = 0
        self.calls = []
        self.counts = {name: 0 for name in EFFECT_NAMES}
        self.titles = []
        self.mode_changes = []
        super().__init__(columns, lines, history=history)
        self.recording = True

    def record(self, call, args, kwargs):
        if not self.recording:
            return
        category = CATEGORIES[call]
        self.counts[category] += 1
        if len(self.calls) < MAX_CALLS:
            entry = {"effect": category, "call": call, "args": [a if isinstance(a, (int, str)) else repr(a) for a in args]}
            if kwargs:
                entry["kwargs"] = {k: v if isinstance(v, (int, str, bool)) else repr(v) for k, v in kwargs.items()}
            self.calls.append(entry)
        if call == "set_title":
            self.titles.append(args[0] if args else "")
        if call in ("set_mode", "reset_mode"):
            self.mode_changes.append(
                {"set": call == "set_mode", "private": bool(kwargs.get("private")), "modes": list(args)})


def recorder(call):
    """The screen's method `call`, recording the call when the stream makes
    it (not when another method of the screen does: a linefeed's index)."""
    base = getattr(pyte.HistoryScreen, call)

    def method(self, *args, **kwargs):
        if self.depth == 0 and call in CATEGORIES:
            self.record(call, args, kwargs)
        self.depth += 1
        try:
            return base(self, *args, **kwargs)
        except TypeError:
            # A sequence with parameters pyte's method does not take (say
            # CSI ? 5 m): a real terminal ignores what it does not know.
            try:
                return base(self, *args)
            except Exception:
                return None
        finally:
            self.depth -= 1

    method.__name__ = call
    return method


for _call in pyte.Stream.events:
    setattr(RecordingScreen, _call, recorder(_call))


# Escape sequences, as a byte scan finds them in the raw output.
SEQUENCE = re.compile(
    rb"\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI
    rb"|\x1b[\]PX^_].*?(?:\x07|\x1b\\|$)"  # OSC, DCS, SOS, PM, APC up to BEL or ST
    rb"|\x1b[\x20-\x2f]+[\x30-\x7e]"  # nF: charset designations ESC ( X, ESC % X
    rb"|\x1b[\x30-\x7e]"  # Fp, Fe, Fs: ESC 7, ESC c, ESC M...
    rb"|\x1b(?=[^\x20-\x7e]|$)",  # a lone ESC
    re.DOTALL,
)
CHARSET_SEQUENCE = re.compile(rb"^\x1b[()*+\-./%]")
C1_CODE_POINT = re.compile("[\u0080-\u009f]")


def visible(data):
    """Bytes as text, with control bytes and non-ASCII as \\xNN."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else "\\\\" if b == 0x5C else "\\x%02x" % b for b in data)


def scan(raw):
    sequences = {}
    charset = 0
    for match in SEQUENCE.finditer(raw):
        text = visible(match.group(0))
        sequences[text] = sequences.get(text, 0) + 1
        if CHARSET_SEQUENCE.match(match.group(0)):
            charset += 1
    decoded = raw.decode("utf-8", errors="surrogateescape")
    stray = [ord(c) - 0xDC00 for c in decoded if 0xDC80 <= ord(c) <= 0xDCFF]
    counts = {
        "esc": raw.count(b"\x1b"),
        "bel": raw.count(b"\x07"),
        "nul": raw.count(b"\x00"),
        "del": raw.count(b"\x7f"),
        "c1_code_points": len(C1_CODE_POINT.findall(decoded)),
        "c1_bytes": sum(1 for b in stray if 0x80 <= b <= 0x9F),
        "invalid_utf8": len(stray),
        "shift_in_out": raw.count(b"\x0e") + raw.count(b"\x0f"),
    }
    return counts, [{"text": t, "count": c} for t, c in sequences.items()], charset


def main():
    parser = argparse.ArgumentParser(
        description="Run a command on a pseudo-terminal and report what a terminal would do with its output.")
    parser.add_argument("--cols", type=int, default=200)
    parser.add_argument("--rows", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before the command is killed")
    parser.add_argument("--input", action="append", default=[], help="a line to type once output settles")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds of quiet before each --input")
    parser.add_argument("--eof", action="store_true", help="type Ctrl-D after the inputs")
    parser.add_argument(
        "--prompt", help="a regular expression: type each input only once the output since the last one "
        "(escape sequences left out) ends with a match, e.g. '> $'")
    parser.add_argument("--history", type=int, default=5000, help="rows of scrollback kept")
    parser.add_argument("--term", default="xterm-256color", help="TERM for the command (say dumb)")
    parser.add_argument("--unset", action="append", default=[], help="a variable taken out of the environment")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("no command given (put it after --)")

    screen = RecordingScreen(options.cols, options.rows, options.history)
    stream = pyte.ByteStream(screen)
    parser_errors = 0

    pid, master = pty.fork()
    if pid == 0:
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", options.rows, options.cols, 0, 0))
            # Signals as a shell would leave them: Python ignores SIGPIPE,
            # and a parent may have ignored others, which exec keeps.
            for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                           signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
                signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            env = dict(os.environ)
            env["TERM"] = options.term
            for name in options.unset:
                env.pop(name, None)
            os.execvpe(command[0], command, env)
        except OSError as error:
            os.write(2, ("screen.py: cannot run %s: %s\r\n" % (command[0], error)).encode())
        os._exit(127)

    raw = bytearray()
    typed_at = 0
    prompt = re.compile("(?:%s)\\Z" % options.prompt) if options.prompt else None

    def prompted(output):
        if prompt is None:
            return True
        text = SEQUENCE.sub(b"", bytes(output)).decode("utf-8", errors="replace")
        return prompt.search(text) is not None

    pending = list(options.input) + (["\x04"] if options.eof else [])
    started = time.monotonic()
    last_output = started
    status = None
    timed_out = False
    killed_at = None
    exited_at = None
    while True:
        now = time.monotonic()
        if status is None:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = wait_status
                exited_at = now
        if status is None and now - started > options.timeout:
            if killed_at is None:
                timed_out = True
                killed_at = now
                try:
                    os.killpg(pid, signal.SIGTERM)
                except OSError:
                    pass
            elif now - killed_at > 2:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        # The command has gone but something it started keeps the terminal
        # open: drain a little longer, then stop.
        if exited_at is not None and now - last_output > 1.0 and now - exited_at > 1.0:
            break
        if killed_at is not None and now - killed_at > 5:
            break
        if pending and status is None and now - last_output >= options.settle and prompted(raw[typed_at:]):
            line = pending.pop(0)
            typed_at = len(raw)
            data = line.encode() if line == "\x04" else (line + "\r").encode()
            try:
                os.write(master, data)
            except OSError:
                pending = []
            last_output = time.monotonic()
        ready, _, _ = select.select([master], [], [], 0.05)
        if not ready:
            continue
        try:
            data = os.read(master, 65536)
        except OSError as error:
            if error.errno == errno.EIO:
                break  # every holder of the terminal has closed it
            raise
        if not data:
            break
        raw.extend(data)
        last_output = time.monotonic()
        try:
            stream.feed(data)
        except Exception:
            parser_errors += 1
    os.close(master)
    if status is None:
        # Its terminal closed: it is exiting. Wait for that (polled every
        # 20 ms) with a cap of a minute, a stall guard, before killing it.
        deadline = time.monotonic() + 60
        while status is None:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = wait_status
            elif time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
                _, status = os.waitpid(pid, 0)
            else:
                time.sleep(0.02)
    exit_status = os.waitstatus_to_exitcode(status) if status is not None else None

    counts, sequences, charset_sequences = scan(bytes(raw))
    effects = dict(screen.counts)
    effects["charset"] += charset_sequences + counts["shift_in_out"]
    effects["errors"] = parser_errors
    display = [row.rstrip() for row in screen.display]
    while display and not display[-1]:
        display.pop()

    def render(line):
        return "".join(line[x].data for x in range(options.cols)).rstrip()

    report = {
        "command": command,
        "exit_status": exit_status,
        "timed_out": timed_out,
        "raw_bytes": len(raw),
        "raw": counts,
        "escape_sequences": sequences,
        "effects": effects,
        "effect_calls": screen.calls,
        "titles": screen.titles,
        "modes": screen.mode_changes,
        "display": display,
        "scrollback": [render(line) for line in screen.history.top],
        "cursor": {"x": screen.cursor.x, "y": screen.cursor.y},
    }
    json.dump(report, sys.stdout, ensure_ascii=True, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
