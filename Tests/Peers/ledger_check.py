#!/usr/bin/env python3
"""Checks a beaconbench ledger proof file, written from docs/ledger.md alone
("Checkpoints", "Proof files", "Checking a proof file"); nothing from the
project. Usage: ledger_check.py FILE --signers ALLOWED_SIGNERS
Exit 0 and a summary when everything holds, 2 naming the first failure."""
import base64, hashlib, json, os, re, subprocess, sys, tempfile

TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
ENTRY_MEMBERS = ["v", "seq", "at", "event", "table", "op", "key", "row"]

class Fail(Exception):
    pass

def show(text):  # hostile text: bounded, control characters escaped
    return ascii(str(text)[:80])

def pairs(items):  # object hook: no member twice, order kept
    if len({k for k, _ in items}) != len(items):
        raise Fail("an object has a member twice")
    return dict(items)

def no_float(text):
    raise Fail("a number that is not an integer: " + show(text))

def plain(value):  # only null, strings, 64-bit integers, arrays, objects
    if isinstance(value, bool) or isinstance(value, float):
        raise Fail("true, false or a fraction")
    if isinstance(value, int) and not -2**63 <= value < 2**63:
        raise Fail("an integer that does not fit 64 bits")
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else []:
        plain(item)

def load(text):
    value = json.loads(text, object_pairs_hook=pairs, parse_float=no_float, parse_constant=no_float)
    plain(value)
    return value

def sha(data):
    return hashlib.sha256(data).digest()

def verify_note(note, signers):
    why = "no signature is an SSH signature with its key ID"
    if any(ord(c) < 32 and c != "\n" or c == "\x7f" for c in note):
        raise Fail("the checkpoint note holds a control character")
    body, sep, tail = note.rpartition("\n\n")
    if not sep or not tail.endswith("\n"):
        raise Fail("the checkpoint note has no signature")
    if len(note.encode()) > 65536 or tail.count("\n") > 16:
        raise Fail("the checkpoint note is larger than 64 KiB or has more than 16 signature lines")
    body += "\n"
    for line in tail[:-1].split("\n"):
        fields = line.split(" ")
        if len(fields) != 3 or fields[0] != "\u2014":
            raise Fail("a signature line is malformed: " + show(line))
        name, raw = fields[1], base64.b64decode(fields[2], validate=True)
        key_id, blob = raw[:4], raw[4:]
        if blob[:10] != b"SSHSIG\x00\x00\x00\x01":
            continue
        public_key = blob[14 : 14 + int.from_bytes(blob[10:14], "big")]
        if sha(name.encode() + b"\n\xffbeaconbench-sshsig" + public_key)[:4] != key_id:
            continue
        armored = base64.b64encode(blob).decode()
        armor = "".join(armored[i : i + 70] + "\n" for i in range(0, len(armored), 70))
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "note.sig")
            with open(path, "w") as f:
                f.write("-----BEGIN SSH SIGNATURE-----\n" + armor + "-----END SSH SIGNATURE-----\n")
            command = ["ssh-keygen", "-Y", "verify", "-f", signers, "-I", name, "-n", "beaconbench-ledger", "-s", path]
            result = subprocess.run(command, input=body.encode(), capture_output=True, timeout=30)
            why = (result.stderr or result.stdout).decode(errors="replace").strip()
            if result.returncode == 0:
                return (name,) + checkpoint(body)
    raise Fail(f"no signature of the checkpoint verifies with {show(signers)}: {show(why)}")

def checkpoint(body):  # origin, size, root; extension lines are kept, unread
    lines = body[:-1].split("\n")
    if len(body.encode()) > 8192 or not 3 <= len(lines) <= 19 or not all(lines):
        raise Fail("the signed checkpoint is not 3 to 19 non-empty lines, at most 8 KiB")
    if re.search(r"[\s+]", lines[0]) or len(lines[0].encode()) > 256 or any(len(x.encode()) > 1024 for x in lines[3:]):
        raise Fail("the signed checkpoint's origin or an extension line is malformed")
    if not re.fullmatch(r"0|[1-9][0-9]{0,18}", lines[1]) or int(lines[1]) >= 2**63:
        raise Fail("the signed checkpoint's tree size is malformed")
    root = base64.b64decode(lines[2], validate=True)
    if len(root) != 32 or base64.b64encode(root).decode() != lines[2]:
        raise Fail("the signed checkpoint's root hash is not the base64 of 32 bytes")
    return lines[0], int(lines[1]), root

def included(leaf, index, size, proof, root):  # RFC 9162 2.1.3.2
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = sha(b"\x01" + p + r)
            while fn % 2 == 0 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = sha(b"\x01" + r + p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root

def check(data, signers):
    if len(data) > 64 * 1024 * 1024:
        raise Fail("the file is larger than 64 MiB")
    doc = load(data.decode("utf-8"))
    if not isinstance(doc, dict) or doc.get("format") != "beaconbench-ledger-proof/1":
        raise Fail("the file's format is not beaconbench-ledger-proof/1")
    if set(doc) != {"format", "device", "at", "checkpoint", "entries"}:
        raise Fail("the file's members are not format, device, at, checkpoint, entries")
    device, at = doc["device"], doc["at"]
    if not isinstance(device, str) or not 1 <= len(device.encode()) <= 256:
        raise Fail("the device member is not a string of 1 to 256 bytes")
    if at is not None and not (isinstance(at, str) and TIME.fullmatch(at)):
        raise Fail("the at member is neither null nor a time")
    if not isinstance(doc["checkpoint"], str):
        raise Fail("the checkpoint member is not a string")
    signer, origin, size, root = verify_note(doc["checkpoint"], signers)
    entries, previous = doc["entries"], -1
    if not isinstance(entries, list) or not 1 <= len(entries) <= 1_000_000:
        raise Fail("the entries member is not an array of 1 to 1,000,000 entries")
    for item in entries:
        if not isinstance(item, dict) or list(item) != ["index", "entry", "proof"]:
            raise Fail("an entry of the file is not {index, entry, proof}")
        index, text, proof = item["index"], item["entry"], item["proof"]
        if not isinstance(index, int) or not previous < index < size:
            raise Fail(f"index {show(index)} is not after {previous} and below the tree size {size}")
        previous = index
        if not isinstance(text, str) or len(text.encode()) > 1024 * 1024:
            raise Fail(f"entry {index}: entry is not a string of at most 1 MiB")
        if not isinstance(proof, list) or len(proof) > 64 or not all(isinstance(h, str) and re.fullmatch("[0-9a-f]{64}", h) for h in proof):
            raise Fail(f"entry {index}: proof is not at most 64 lowercase hex hashes")
        raw = text.encode("utf-8")
        entry = load(text)
        if json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode() != raw:
            raise Fail(f"entry {index} is not canonical JSON")
        if not isinstance(entry, dict) or list(entry) != ENTRY_MEMBERS:
            raise Fail(f"entry {index} does not have the members {', '.join(ENTRY_MEMBERS)} in order")
        if entry["v"] != 1 or entry["seq"] != index:
            raise Fail(f"entry {index}: v is not 1 or seq is not its index")
        if entry["at"] is not None and not (isinstance(entry["at"], str) and TIME.fullmatch(entry["at"])):
            raise Fail(f"entry {index}: at is neither null nor a time")
        if not (isinstance(entry["event"], str) and isinstance(entry["table"], str) and entry["op"] in ("insert", "update", "delete", "note") and isinstance(entry["key"], list) and isinstance(entry["row"], dict)):
            raise Fail(f"entry {index}: event, table, op, key or row is of the wrong kind")
        if not ((entry["table"] in ("devices", "assignments") and entry["key"] == [device]) or entry["row"].get("device") == device):
            raise Fail(f"entry {index} is not about the device {show(device)}")
        if at is not None and entry["at"] is not None and entry["at"] > at:
            raise Fail(f"entry {index} was made after the file's time {at}")
        if not included(sha(b"\x00" + raw), index, size, [bytes.fromhex(h) for h in proof], root):
            raise Fail(f"entry {index}: its inclusion proof does not verify against the checkpoint's root")
    return f"{len(entries)} entries about {show(device)} in {show(origin)} at size {size}, signed by {show(signer)}"

def main():
    if len(sys.argv) != 4 or sys.argv[2] != "--signers":
        print("usage: ledger_check.py FILE --signers ALLOWED_SIGNERS", file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], "rb") as f:
            data = f.read(64 * 1024 * 1024 + 1)
        print("ok: " + check(data, sys.argv[3]))
        return 0
    except Fail as failure:
        print("ledger_check: " + str(failure), file=sys.stderr)
    except Exception as error:  # malformed input: JSON, base64, UTF-8, ...
        print("ledger_check: the file is malformed: " + show(f"{type(error).__name__}: {error}"), file=sys.stderr)
    return 2

if __name__ == "__main__":
    sys.exit(main())
