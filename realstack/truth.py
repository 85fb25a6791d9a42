"""Inventory = beacon truth: compares what the inventory says of each beacon
(`beaconbench --json inventory list`) with what the beacon itself holds (the
bench's `state`, read from the beacon side). Prints one line per difference
and exits 1 if there is any.

    python3 truth.py BEACONS.json INVENTORY.jsonl
"""

import json
import sys

beacons = {b["address"]: b for b in json.load(open(sys.argv[1]))["beacons"]}
inventory = {}
for line in open(sys.argv[2]):
    line = line.strip()
    if line.startswith("{"):
        row = json.loads(line)
        if row.get("kind") == "device":
            inventory[row["address"]] = row

differences = []
for address, beacon in sorted(beacons.items()):
    row = inventory.get(address)
    if beacon["major"] == 1 and beacon["factoryDefault"] and row is None:
        continue  # never provisioned, never recorded: nothing to compare
    if row is None:
        differences.append(f"{address}: the beacon holds {beacon['major']}.{beacon['minor']}, the inventory has no row")
        continue
    for field, truth in (("major", beacon["major"]), ("minor", beacon["minor"]), ("calibrated", beacon["calibrated"]), ("firmware", beacon["firmware"])):
        if row.get(field) is not None and row[field] != truth:
            differences.append(f"{address}: {field}: inventory {row[field]!r}, beacon {truth!r}")
    if beacon["major"] == 100:  # provisioned: every read-back value must be there and equal
        for field in ("major", "minor", "calibrated"):
            if row.get(field) is None:
                differences.append(f"{address}: {field}: inventory has none, beacon {beacon[field]!r}")
        if row.get("config") != beacon["config"]:
            differences.append(f"{address}: config: inventory {row.get('config')!r}, beacon {beacon['config']!r}")
for address in sorted(set(inventory) - set(beacons)):
    differences.append(f"{address}: in the inventory, not on the bench")

compared = sum(1 for a in beacons if a in inventory)
for difference in differences:
    print(difference)
print(f"truth: {compared} beacons compared with the inventory, {len(differences)} differences")
sys.exit(1 if differences else 0)
