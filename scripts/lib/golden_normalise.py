"""Normalises what differs from run to run in scripts/golden's outputs:
instants, durations, temporary paths, bench ids. stdin to stdout; argv[1]
is the run's temporary directory.

Bytes in, bytes out (docs/development.md, "Stored values are compared as
bytes"): what no rule replaces is written back byte for byte — bytes that
are not UTF-8 kept (surrogateescape), nothing normalised into another
Unicode form — and the rules match ASCII only (re.ASCII: `\d` is 0-9,
never another script's digit), so `diff` of two outputs compares what the
tool wrote."""
import re
import sys

work = sys.argv[1]
RULES = [
    (re.escape(work), "<work>"),
    (r"/tmp/[A-Za-z0-9._-]+", "<tmp>"),
    # instants: ISO 8601 and the tables' date-times
    (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?", "<instant>"),
    (r"(?<![:0-9A-Fa-f])\d\d:\d\d:\d\d(\.\d+)?(?![:0-9A-Fa-f])", "<clock>"),
    # the devices table's RSSI column, after the address
    (r"([0-9A-F]{2}(?::[0-9A-F]{2}){5} +)-\d{1,3}\b", r"\1<rssi>"),
    # JSON numbers of volatile keys
    (r'"([a-z_]*_ms|[a-z_]*_at|bytes|seconds|at|ms|last_found_after|time|uptime|found_after|rssi|first_seen|'
     r'last_seen|when|since|until)":\s*-?[0-9.e+-]+', r'"\1":<n>'),
    # durations in text
    (r"\b\d+(\.\d+)?\s?(ms|µs|s|min|h)\b", "<dur>"),
    (r"\b\d+(\.\d+)? ?(KiB|MiB)\b", "<size>"),
    (r"\b\d+ bytes\b", "<size>"),
    (r"-\d{2,3} ?dBm", "<rssi>"),
    (r"\brssi -\d+", "rssi <rssi>"),
    # epoch milliseconds (a power-on time offset)
    (r"\b1[6-9]\d{11}\b", "<epoch-ms>"),
    (r"bench [0-9a-f]{6,}", "bench <id>"),
    (r'"bench(_id)?":\s*"[^"]*"', r'"bench\1":"<id>"'),
]
# The outcome table's ms column (a step's time) varies: the number, and with
# it the column's width.
STATUS_MS = re.compile(r"\b(ok|changed|unchanged|skipped|failed|interrupted|running|stopped)( +)\d+\b", re.ASCII)


def lines(text):
    out = []
    for line in text.split("\n"):
        for pattern, replacement in RULES:
            line = re.sub(pattern, replacement, line, flags=re.ASCII)
        line = STATUS_MS.sub(lambda m: m.group(1) + " <ms>", line)
        # Table columns are as wide as their widest cell, which may be a
        # normalised one: compare cells, not padding.
        line = re.sub(r"  +", "  ", line)
        out.append(line)
    return out


def sort_announcements(lines):
    """Discovery announces beacons in the order their adverts arrive: sort each run of [NEW]/[CHG]/[DEL] lines."""
    out, run = [], []
    for line in lines:
        if re.match(r"^\[(NEW|CHG|DEL)\] ", line):
            run.append(line)
            continue
        out.extend(sorted(run))
        run = []
        out.append(line)
    out.extend(sorted(run))
    return out


text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
sys.stdout.buffer.write("\n".join(sort_announcements(lines(text))).encode("utf-8", "surrogateescape"))
