#!/usr/bin/env python3
"""Verifies a beaconbench inventory's ledger, written from docs/ledger.md alone
("Entries", "The tree", "How the inventory keeps the ledger", "The stored form,
byte by byte", "What verify checks" and the appendix of triggers); nothing
from the project but ledger_check.py (the proof-file checker, for the
checkpoint note's grammar). Standard library only.
Usage: ledger_verify.py INVENTORY
Exit 0 when everything holds; 2 naming the first finding (at most 50 listed);
1 when it cannot read its own input (a missing file, not a regular file, not
an SQLite database)."""
import base64, binascii, hashlib, json, os, re, sqlite3, stat, struct, sys, time, urllib.parse

from ledger_check import Fail, show, checkpoint as parse_checkpoint

# "The stored form, byte by byte": numbers.
TABLES = ["runs", "devices", "identities", "assignments", "outcomes", "readings", "trips", "events", "incidents"]
OPS = ["insert", "update", "delete", "note", "insert", "delete"]
EVENTS = ["genesis", "run", "step", "device", "identity", "assignment", "forget", "reading", "pull", "sync", "converged", "checkpoint"]
# "Entries": keys and columns, in order.
COLUMNS = {
    "runs": "id started_at ended_at command sha256 operator host pid adapter options status simulated",
    "outcomes": "id run_id device step status detail error before after started_at ended_at duration_ms retries",
    "devices": "address mac_ending major minor model serial hardware_revision firmware first_seen last_seen battery"
    " battery_at calibrated calibrated_at calibration_x calibration_y calibration_z time_offset_ms profile"
    " config_cornering config_braking config_acceleration config_duration config_enable config_read_at identity_at"
    " description_at firmware_at calibration_read_at time_offset_at forgotten_at",
    "readings": "id device at battery rssi firmware",
    "trips": "device start_ms end_ms beacon_index pulled_at",
    "events": "device at_ms type duration_ms average_mg maximum_mg x_mg y_mg z_mg beacon_index pulled_at",
    "incidents": "device incident_id at_ms max_resultant avg_resultant x_mg y_mg z_mg samples pulled_at",
    "identities": "major minor device source profile run_id reserved_at",
    "assignments": "address profile major minor_policy minor overrides assigned_at assigned_by source converged_at"
    " converged_run",
}
COLUMNS = {name: text.split() for name, text in COLUMNS.items()}
KEYS = {
    "runs": ["id"], "outcomes": ["id"], "devices": ["address"], "readings": ["id"],
    "trips": ["device", "start_ms", "end_ms"], "events": ["device", "at_ms", "type", "beacon_index"],
    "incidents": ["device", "incident_id", "at_ms"], "identities": ["major", "minor"], "assignments": ["address"],
}
# Sealed tables, in the order verify reads them: their `at` column and event.
SEALED = {"outcomes": ("ended_at", "step"), "readings": ("at", "reading"), "trips": ("pulled_at", "pull"),
          "events": ("pulled_at", "pull"), "incidents": ("pulled_at", "pull")}
KEPT = ["runs", "devices", "identities", "assignments"]
# Checkpoints as entries (issue 51): table "ledger_checkpoints", key [size],
# row size, root (64 lower-case hex digits), note, made_at. Kept in `ledger`
# under the next table number, or as sealed rows when the table carries
# ledger_seq and ledger_leaf: whichever the inventory has.
CHECKPOINT_TABLE = "ledger_checkpoints"
CHECKPOINT_COLUMNS = ["size", "root", "note", "made_at"]
COLUMNS[CHECKPOINT_TABLE] = CHECKPOINT_COLUMNS
KEYS[CHECKPOINT_TABLE] = ["size"]
STORED_LEVEL = 6
PLACE_LIMIT = (2**31 - 1) * 1024
LIMIT = 50


class Text(bytes):
    """An SQLite TEXT value, as its bytes (a BLOB is plain bytes)."""


class Damage(Exception):
    pass


def sha(data):
    return hashlib.sha256(data).digest()


def same(a, b):  # the same SQLite type and the same bytes
    return ident(a) == ident(b)


def ident(value):
    if value is None:
        return ("null",)
    if isinstance(value, int):
        return ("integer", value)
    if isinstance(value, float):
        return ("real", struct.pack(">d", value))
    return ("text" if isinstance(value, Text) else "blob", bytes(value))


def shown(value):  # a value for a message: bounded, escaped
    if isinstance(value, Text):
        return show(value.decode("utf-8", "replace"))
    return show(value)


# -- JSON of an entry ("Entries"; tags 4 and 5 for real and blob) ----------

def jvalue(value):
    if value is None:
        return b"null"
    if isinstance(value, bool):
        raise Damage("a boolean")
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode() if value == value and value not in (float("inf"), float("-inf")) else b"null"
    if isinstance(value, Text):
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise Damage("a text that is not UTF-8")
        return jtext(text)
    return b'{"blob":"' + bytes(value).hex().encode() + b'"}'


def jtext(text):
    return json.dumps(text, ensure_ascii=False).encode("utf-8")


def entry_json(seq, at, event, table, op, key, row):
    return (b'{"v":1,"seq":' + str(seq).encode() + b',"at":' + jvalue(at) + b',"event":' + jtext(event)
            + b',"table":' + jtext(table) + b',"op":' + jtext(op) + b',"key":['
            + b",".join(jvalue(v) for v in key) + b'],"row":{'
            + b",".join(jtext(name) + b":" + jvalue(v) for name, v in row) + b"}}")


def leaf_check(leaf):  # first 4 bytes, big-endian, signed
    return struct.unpack(">i", leaf[:4])[0]


# -- The compact form ("ledger.entry") -----------------------------------

def time_text(m):
    s = abs(m) // 1000 * (1 if m >= 0 else -1)
    f = m - 1000 * s
    try:
        t = time.gmtime(s)
    except (OverflowError, OSError, ValueError):
        raise Damage("a time beyond what gmtime gives")
    fraction = ("00" if f < 10 else "0" if f < 100 else "") + str(f)
    return "%d-%02d-%02dT%02d:%02d:%02d.%sZ" % (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                                                fraction)


class Reader:
    def __init__(self, data):
        self.data, self.position, self.at = data, 0, None

    def byte(self):
        if self.position >= len(self.data):
            raise Damage("it ends early")
        self.position += 1
        return self.data[self.position - 1]

    def varint(self):
        result = 0
        for shift in range(0, 70, 7):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result & (2**64 - 1)
        raise Damage("a number too long")

    def count(self):
        n = self.varint()
        if n > len(self.data):
            raise Damage("a count too large")
        return n

    def take(self, n):
        if n > len(self.data) - self.position:
            raise Damage("it ends early")
        self.position += n
        return self.data[self.position - n : self.position]

    def signed(self):
        z = self.varint()
        return (z >> 1) ^ -(z & 1)

    def value(self):
        tag = self.byte()
        if tag == 0:
            return None
        if tag == 1:
            return self.signed()
        if tag == 2:
            return Text(self.take(self.count()).decode("utf-8", "replace").encode("utf-8"))
        if tag == 3:
            return Text(time_text(self.signed()).encode())
        if tag == 4:
            return struct.unpack(">d", self.take(8))[0]
        if tag == 5:
            return bytes(self.take(self.count()))
        if tag == 6:
            if self.at is None:
                raise Damage("it refers to a time it does not have")
            return self.at
        if tag == 7:
            return Text(":".join("%02X" % b for b in self.take(6)).encode())
        raise Damage("a value of no known kind")


def decode(data, tables):
    """(table name or "", op, event, at, key, row) of a stored entry."""
    r = Reader(data)
    if r.byte() != 1:
        raise Damage("an unknown encoding")
    number, op, event = r.byte(), r.byte(), r.byte()
    if number > len(tables):
        raise Damage("no table")
    if op >= len(OPS) or event >= len(EVENTS):
        raise Damage("no valid operation or event")
    table = tables[number - 1] if number else None
    whole = op >= 4
    if whole and table is None:
        raise Damage("a whole row of no table")
    at = r.value()
    r.at = at if isinstance(at, Text) else None
    key = [] if whole else [r.value() for _ in range(r.count())]
    row = []
    for _ in range(r.count()):
        if table is not None:
            index = r.varint()
            if index >= len(COLUMNS[table]):
                raise Damage("no column")
            name = COLUMNS[table][index]
        else:
            name = r.value()
            if not isinstance(name, Text):
                raise Damage("a note without names")
            name = name.decode("utf-8")
        row.append((name, r.value()))
    if r.position != len(data):
        raise Damage("bytes after its end")
    if whole:
        columns = COLUMNS[table]
        indices = [columns.index(name) for name, _ in row]
        if any(a >= b for a, b in zip(indices, indices[1:])):
            raise Damage("its columns out of order")
        kept = dict(row)
        row = [(name, kept.get(name)) for name in columns]
        key = [kept.get(name) for name in KEYS[table]]
    return table or "", OPS[op], EVENTS[event], at, key, row


# -- The tree ------------------------------------------------------------

class Frontier:
    def __init__(self):
        self.size, self.edge = 0, []  # (level, hash), levels decreasing

    def append(self, leaf):
        completed, level, node = [], 0, leaf
        while self.edge and self.edge[-1][0] == level:
            node = sha(b"\x01" + self.edge.pop()[1] + node)
            level += 1
            completed.append((level, self.size >> level, node))
        self.edge.append((level, node))
        self.size += 1
        return completed

    def root(self):
        if not self.edge:
            return sha(b"")
        r = self.edge[-1][1]
        for _, h in reversed(self.edge[:-1]):
            r = sha(b"\x01" + h + r)
        return r


# -- The triggers (docs/ledger.md, appendix) ------------------------------

def triggers():
    """The appendix's CREATE TRIGGER texts, read from docs/ledger.md beside this file."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "ledger.md")
    with open(path, encoding="utf-8") as f:
        text = f.read(1024 * 1024)
    section = text.split("<!-- triggers: begin -->", 1)[1].split("<!-- triggers: end -->", 1)[0]
    found = {}
    for block in re.findall(r"```sql\n(.*?)\n```", section, re.S):
        name = block.split()[2]
        found[name] = block
    return found


# -- Verify ----------------------------------------------------------------

class Verifier:
    def __init__(self, db, triggers):
        self.db, self.findings, self.comparing, self.triggers = db, [], False, triggers
        self.frontier, self.checkpoints, self.sealed_checkpoints = Frontier(), [], False
        self.state = {}  # table -> key ident -> [row dict, seq]
        self.checkpoint_entries = {}  # size ident -> (row dict, seq)
        self.broken = set()  # tables whose columns are not as documented

    def find(self, seq, message):
        self.findings.append((1 if self.comparing else 0, seq if seq is not None else 2**63, message))

    def rows(self, sql, args=()):
        return self.db.execute(sql, args).fetchall()

    def columns(self, table):
        return [r[0].decode() if isinstance(r[0], bytes) else r[0] for r in self.rows(
            "SELECT name FROM pragma_table_info(?)", (table,))]

    def run(self):
        present = {bytes(r[0]).decode("utf-8", "replace"): r[1] for r in self.rows(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger'")}
        for name, text in sorted(self.triggers.items()):
            if name not in present:
                self.find(None, f"trigger {name} is gone")
            elif not same(present[name], Text(text.encode())):
                self.find(None, f"trigger {name} is not the one the docs give")
        for table in TABLES:
            expected = COLUMNS[table] + (["ledger_seq", "ledger_leaf"] if table in SEALED else [])
            if self.columns(table) != expected:
                self.find(None, f"table {table} has columns {show(', '.join(self.columns(table)))}, not its entries'")
                self.broken.add(table)
        own = {"ledger": ["seq", "leaf", "entry"], "ledger_head": ["one", "size", "frontier", "root"],
               "ledger_nodes": ["node", "hash"]}
        for table, expected in own.items():
            if self.columns(table) != expected:
                self.find(None, f"table {table} has columns {show(', '.join(self.columns(table)))}, not {', '.join(expected)}")
                self.broken.add(table)
        checkpoint_columns = self.columns(CHECKPOINT_TABLE)
        self.sealed_checkpoints = checkpoint_columns == CHECKPOINT_COLUMNS + ["ledger_seq", "ledger_leaf"]
        if checkpoint_columns != CHECKPOINT_COLUMNS and not self.sealed_checkpoints:
            self.find(None, f"table {CHECKPOINT_TABLE} has columns {show(', '.join(checkpoint_columns))}")
            self.broken.add(CHECKPOINT_TABLE)
        self.tables = TABLES + [CHECKPOINT_TABLE]
        if "ledger" in self.broken or "ledger_head" in self.broken or "ledger_nodes" in self.broken:
            return
        self.check_bench()
        self.walk()
        self.comparing = True
        self.compare()
        if CHECKPOINT_TABLE not in self.broken:
            self.compare_checkpoints()

    def check_bench(self):
        bench = self.rows("SELECT value FROM meta WHERE key = 'bench_id'")
        bench = bench[0][0] if bench else None
        first = self.rows("SELECT entry FROM ledger WHERE seq = 0")
        if first and isinstance(first[0][0], bytes) and not isinstance(first[0][0], Text):
            try:
                table, op, _, _, _, row = decode(first[0][0], self.tables)
            except Damage:
                table, op, row = None, None, []
            began = [v for name, v in row if name == "bench"]
            if op == "note" and began and isinstance(began[0], Text) and not same(began[0], bench):
                self.find(0, f"the bench id in meta ({shown(bench)}) is not the one the ledger began with ({shown(began[0])})")
        if CHECKPOINT_TABLE in self.broken:
            return
        for size, root, note in self.rows(f"SELECT size, root, note FROM {CHECKPOINT_TABLE} ORDER BY size"):
            if not isinstance(root, bytes) or isinstance(root, Text) or not isinstance(note, Text):
                continue
            try:
                said = parse_note(bytes(note).decode("utf-8"))
            except (Fail, UnicodeDecodeError, ValueError, binascii.Error):
                said = None
            if said is None or said[1] != size or said[2] != bytes(root) or isinstance(size, bool):
                self.find(None, f"the checkpoint kept at size {shown(size)} does not match its own signed note")

    def walk(self):
        head = self.rows("SELECT size, frontier FROM ledger_head WHERE one = 1")
        stored_head = None
        if not head:
            stored_head = (0, b"")
        elif isinstance(head[0][0], int) and isinstance(head[0][1], bytes) and not isinstance(head[0][1], Text) \
                and head[0][0] >= 0 and len(head[0][1]) == 32 * bin(head[0][0]).count("1"):
            stored_head = (head[0][0], bytes(head[0][1]))
        else:
            self.find(None, "ledger_head holds no valid tree edge")
        checkpoints = []
        if CHECKPOINT_TABLE not in self.broken:
            for size, root in self.rows(f"SELECT size, root FROM {CHECKPOINT_TABLE} ORDER BY size"):
                if isinstance(size, int) and isinstance(root, bytes) and not isinstance(root, Text):
                    checkpoints.append((size, bytes(root)))
                else:
                    self.find(None, "a checkpoint row holds no size or root")
        self.checkpoints = checkpoints
        nodes = {}
        for node, value in self.rows("SELECT node, hash FROM ledger_nodes"):
            if isinstance(node, int) and isinstance(value, bytes) and not isinstance(value, Text):
                nodes[node] = bytes(value)

        # Every holder of a place: (seq, order, kind, payload).
        holders = []
        for seq, leaf, entry in self.rows("SELECT seq, leaf, entry FROM ledger ORDER BY seq"):
            data = bytes(entry) if isinstance(entry, bytes) else b""
            holders.append((seq, 0, "kept", (leaf, data)))
        sealed = [t for t in SEALED if t not in self.broken]
        if self.sealed_checkpoints:
            sealed.append(CHECKPOINT_TABLE)
        for order, table in enumerate(sealed, 1):
            columns = COLUMNS.get(table, CHECKPOINT_COLUMNS)
            for row in self.rows(f"SELECT {', '.join(columns)}, ledger_seq, ledger_leaf FROM {table}"
                                 " WHERE ledger_seq IS NOT NULL ORDER BY ledger_seq"):
                seq = row[-2] if isinstance(row[-2], int) else -1
                holders.append((seq, order, table, (row[-1], list(row[:-2]))))
        holders.sort(key=lambda h: (h[0], h[1]))

        self.frontier = frontier = Frontier()
        self.next_checkpoint = 0
        for size, root in checkpoints:  # a checkpoint of no entries: the empty tree's root
            if size > 0:
                break
            if size == 0 and root != sha(b""):
                self.find(None, "the checkpoint at size 0 is not the empty tree's root")
            self.next_checkpoint += 1
        index = 0
        while index < len(holders):
            seq = holders[index][0]
            end = index
            while end < len(holders) and holders[end][0] == seq:
                end += 1
            group, index = holders[index:end], end
            if not 0 <= seq < PLACE_LIMIT:
                for h in group:
                    self.find(None, f"{self.describe(h)} holds ledger place {seq}, which no entry can have")
                continue
            if len(group) > 1:
                self.find(seq, f"entry {seq} is held twice ({' and '.join(self.describe(h) for h in group)})")
            if seq < frontier.size:
                continue
            while frontier.size < seq:
                self.find(frontier.size, f"entry {frontier.size} is missing: no row holds it")
                self.append(sha(b"\x00"), nodes)
            data, check, what = self.entry(seq, group[0])
            leaf = sha(b"\x00" + data)
            if check is not None and not same(check, leaf_check(leaf)):
                self.find(seq, f"entry {seq} ({what}) is not what was recorded: its leaf check is {shown(check)},"
                          f" its leaf hash gives {leaf_check(leaf)}")
            self.append(leaf, nodes)
        if stored_head is not None:
            size, edge = stored_head
            ours = b"".join(h for _, h in frontier.edge)
            if size != frontier.size:
                self.find(min(size, frontier.size), f"the ledger's head says {size} entries, the rows hold {frontier.size}")
            elif edge != ours:
                self.find(None, "the ledger's head does not match its entries")
            else:
                root = self.rows("SELECT root FROM ledger_head")
                root = root[0][0] if root else b""
                if not same(root, b"") and not same(root, frontier.root()):
                    self.find(None, "the ledger's stored root does not match its entries")
        for size, _ in checkpoints[self.next_checkpoint:]:
            self.find(None, f"a checkpoint at size {size} is beyond the ledger's {frontier.size} entries")
        leftover = [n for n in nodes if n & 63 >= STORED_LEVEL]
        if leftover:
            self.find(None, f"ledger_nodes holds {len(leftover)} node(s) of no entries")

    def append(self, leaf, nodes):
        frontier = self.frontier
        for level, index, node in frontier.append(leaf):
            if level < STORED_LEVEL:
                continue
            key = (((index + 1) << level) - 1) << 6 | level
            first = index << level
            stored = nodes.pop(key, None)
            if stored is None:
                self.find(first, f"entries {first} to {first + (1 << level) - 1}: their tree node is missing")
            elif stored != node:
                self.find(first, f"entries {first} to {first + (1 << level) - 1} do not hash to their stored node")
        while self.next_checkpoint < len(self.checkpoints) and self.checkpoints[self.next_checkpoint][0] <= frontier.size:
            size, root = self.checkpoints[self.next_checkpoint]
            if size == frontier.size and root != frontier.root():
                self.find(size - 1, f"the checkpoint at size {size} does not match the ledger")
            self.next_checkpoint += 1

    def describe(self, holder):
        seq, _, kind, payload = holder
        if kind == "kept":
            return "the ledger table"
        columns = COLUMNS.get(kind, CHECKPOINT_COLUMNS)
        keys = KEYS.get(kind, ["size"])
        return f"{kind} {', '.join(shown(payload[1][columns.index(k)]) for k in keys)}"

    def entry(self, seq, holder):
        """The entry's bytes, its leaf check (None: not to compare) and what it is."""
        _, _, kind, (check, payload) = holder
        if kind != "kept":
            values = payload
            if kind == CHECKPOINT_TABLE:
                at, event, key = values[3], "checkpoint", [values[0]]
                row = list(zip(CHECKPOINT_COLUMNS, values))
                if isinstance(values[1], bytes) and not isinstance(values[1], Text):
                    row[1] = ("root", Text(bytes(values[1]).hex().encode()))
                self.note_checkpoint_entry(seq, dict(row))
            else:
                columns = COLUMNS[kind]
                at, event = values[columns.index(SEALED[kind][0])], SEALED[kind][1]
                key = [values[columns.index(k)] for k in KEYS[kind]]
                row = list(zip(columns, values))
            what = f"{kind} {', '.join(shown(v) for v in key)}"
            try:
                return entry_json(seq, at, event, kind, "insert", key, row), check, what
            except Damage as damage:
                self.find(seq, f"entry {seq} ({what}) cannot be written as an entry: {damage}")
                return b"", None, what
        try:
            table, op, event, at, key, row = decode(payload, self.tables)
            data = entry_json(seq, at, event, table, op, key, row)
        except Damage as damage:
            self.find(seq, f"entry {seq} cannot be read ({damage})")
            return payload, None, "unreadable"
        if table in KEPT:
            self.replay(seq, table, op, key, row)
        elif table == CHECKPOINT_TABLE and op == "insert":
            self.note_checkpoint_entry(seq, dict(row[::-1]))
        return data, check, f"{table} {', '.join(shown(v) for v in key)}" if table else "a note"

    # -- the replay ("Putting it together") --------------------------------

    @staticmethod
    def covers(table, get):
        if table != "assignments":
            return True
        return not same(get("source"), Text(b"server")) or get("converged_at") is not None

    def replay(self, seq, table, op, key, row):
        k = tuple(ident(v) for v in key)
        held = self.state.setdefault(table, {})
        name = f"{table} {', '.join(shown(v) for v in key)}"
        if op == "insert":
            if k in held and self.covers(table, held[k][0].get):
                self.find(seq, f"entry {seq} inserts {name}, which the ledger already holds")
            first = {}
            for column, value in row:
                first.setdefault(column, value)
            held[k] = [first, seq]
        elif op == "update":
            if k not in held:
                self.find(seq, f"entry {seq} updates {name}, which the ledger does not hold")
                return
            for column, value in row:
                held[k][0][column] = value
            held[k][1] = seq
        elif op == "delete":
            if held.pop(k, None) is None:
                self.find(seq, f"entry {seq} deletes {name}, which the ledger does not hold")

    def compare(self):
        for table in KEPT:
            if table in self.broken:
                continue
            columns = COLUMNS[table]
            expected = dict(self.state.get(table, {}))
            for values in self.rows(f"SELECT {', '.join(columns)} FROM {table}"):
                get = dict(zip(columns, values)).get
                key = [get(k) for k in KEYS[table]]
                k = tuple(ident(v) for v in key)
                name = f"{table} {', '.join(shown(v) for v in key)}"
                implied = expected.pop(k, None)
                if not self.covers(table, get):
                    if implied is None or not self.covers(table, implied[0].get):
                        continue
                elif implied is None or not self.covers(table, implied[0].get):
                    self.find(None, f"{name} is in the table but not in the ledger")
                    continue
                for column, value in zip(columns, values):
                    want = implied[0].get(column)
                    if not same(value, want):
                        self.find(implied[1], f"{name}: {column} is {shown(value)} but the ledger says {shown(want)}"
                                  f" (entry {implied[1]})")
            for row, seq in expected.values():
                if self.covers(table, row.get):
                    key = ", ".join(shown(row.get(k)) for k in KEYS[table])
                    self.find(seq, f"{table} {key} is in the ledger (entry {seq}) but not in the table")
        running = set()
        for row, _ in self.state.get("runs", {}).values():
            if same(row.get("status"), Text(b"running")) and isinstance(row.get("id"), int):
                running.add(row["id"])
        for table in SEALED:
            if table in self.broken:
                continue
            extra = ", status, run_id" if table == "outcomes" else ""
            for values in self.rows(f"SELECT {', '.join(KEYS[table])}{extra} FROM {table} WHERE ledger_seq IS NULL"):
                if table == "outcomes" and same(values[1], Text(b"running")) and isinstance(values[2], int) \
                        and values[2] in running:
                    continue
                self.find(None, f"{table} {', '.join(shown(v) for v in values[:len(KEYS[table])])} is not in the ledger")

    # -- checkpoints as entries ----------------------------------------------

    def note_checkpoint_entry(self, seq, row):
        size = row.get("size")
        k = ident(size)
        if k in self.checkpoint_entries:
            self.find(seq, f"entry {seq} records the checkpoint at size {shown(size)} again")
        self.checkpoint_entries[k] = (row, seq)
        if not isinstance(size, int) or size > seq:
            self.find(seq, f"entry {seq} records a checkpoint at size {shown(size)}, which it does not come after")

    def compare_checkpoints(self):
        """The table holds exactly the checkpoints the ledger records ("Checkpoints are entries"): one
        kept with no entry (slipped in, or made before the rule and not yet recorded by a write) is a finding."""
        expected = dict(self.checkpoint_entries)
        for values in self.rows(f"SELECT {', '.join(CHECKPOINT_COLUMNS)} FROM {CHECKPOINT_TABLE}"):
            size, root, note, made_at = values
            implied = expected.pop(ident(size), None)
            if implied is None:
                self.find(None, f"the checkpoint at size {shown(size)} is in the table but not in the ledger")
                continue
            row, seq = implied
            hexroot = Text(bytes(root).hex().encode()) if isinstance(root, bytes) and not isinstance(root, Text) else root
            for column, value in zip(CHECKPOINT_COLUMNS, (size, hexroot, note, made_at)):
                if not same(value, row.get(column)):
                    self.find(seq, f"the checkpoint at size {shown(size)}: {column} is {shown(value)} but the ledger"
                              f" says {shown(row.get(column))} (entry {seq})")
        for row, seq in expected.values():
            self.find(seq, f"the checkpoint at size {shown(row.get('size'))} is in the ledger (entry {seq}) but not in"
                      " the table")


def parse_note(note):
    """(origin, size, root) of a signed note's body ("Checkpoints"); its signatures are not checked."""
    if len(note.encode()) > 65536 or any(ord(c) < 32 and c != "\n" or c == "\x7f" for c in note):
        raise Fail("too large or a control character")
    body, sep, tail = note.rpartition("\n\n")
    if not sep or not tail.endswith("\n") or tail.count("\n") > 16:
        raise Fail("no signature")
    for line in tail[:-1].split("\n"):
        fields = line.split(" ")
        if len(fields) != 3 or fields[0] != "\u2014":
            raise Fail("a malformed signature line")
        name, signature = fields[1], fields[2]
        if not name or len(name.encode()) > 256 or re.search(r'[\s+,"\x00-\x1f\x7f]', name):
            raise Fail("a malformed key name")
        raw = base64.b64decode(signature, validate=True)
        if len(raw) <= 4 or base64.b64encode(raw).decode() != signature:
            raise Fail("a signature that is not the base64 of a key ID and a signature")
    return parse_checkpoint(body + "\n")


def main():
    if len(sys.argv) != 2:
        print("usage: ledger_verify.py INVENTORY", file=sys.stderr)
        return 1
    path = sys.argv[1]
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise OSError("not a regular file")
        with open(path, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                raise OSError("not an SQLite database")
        db = sqlite3.connect("file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro", uri=True)
        db.text_factory = Text
        db.execute("SELECT count(*) FROM sqlite_schema").fetchall()
    except (OSError, sqlite3.Error) as error:
        print(f"ledger_verify: cannot read {show(path)}: {show(error)}", file=sys.stderr)
        return 1
    try:
        trigger_texts = triggers()
    except (OSError, IndexError, UnicodeDecodeError) as error:
        print(f"ledger_verify: cannot read the triggers from docs/ledger.md: {show(error)}", file=sys.stderr)
        return 1
    verifier = Verifier(db, trigger_texts)
    try:
        verifier.run()
    except sqlite3.Error as error:  # a table gone, a file damaged: what was found so far, and this
        verifier.find(None, f"the inventory cannot be read as the docs describe it: {show(error)}")
    findings = sorted(verifier.findings, key=lambda f: (f[0], f[1]))
    if not findings:
        size = verifier.frontier.size
        print(f"ok: {size} entries, root {verifier.frontier.root().hex()}; {len(verifier.checkpoints)} checkpoints hold")
        return 0
    for _, _, message in findings[:LIMIT]:
        print("finding: " + message)
    if len(findings) > LIMIT:
        print(f"and {len(findings) - LIMIT} more")
    return 2


if __name__ == "__main__":
    sys.exit(main())
