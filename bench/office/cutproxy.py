#!/usr/bin/env python3
"""A TCP proxy in front of PostgreSQL that can cut the network (Python stdlib only).

usage: cutproxy.py LISTEN_PORT TARGET CONTROL_FILE
  TARGET        the server: a Unix socket path (/dir/.s.PGSQL.5432) or HOST:PORT
  CONTROL_FILE  holds the mode, read every 100 ms (missing or empty: up):
    up         forward both ways
    reset      close every connection now, and each new one at once (clients see EOF/RST)
    blackhole  keep connections open, forward nothing, accept nothing new
               (clients see silence: only TCP keepalives / tcp_user_timeout could notice,
               and they do not, since this process's kernel still acknowledges)

One thread per direction per connection with blocking sendall, so nothing is lost
to a full buffer (a selector-based version with non-blocking sends lost data).
Prints "ready PORT" once listening, and each mode change with the sockets open.
Used by `beaconbench-bench office faults` (docs/office.md, "Faults").
"""
import socket
import sys
import threading
import time

port, target, control = int(sys.argv[1]), sys.argv[2], sys.argv[3]
lock = threading.Lock()
conns = set()
state = {"mode": "up"}


def connect_target():
    if target.startswith("/"):
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(target)
    else:
        host, _, tport = target.rpartition(":")
        upstream = socket.create_connection((host, int(tport)))
    return upstream


def close(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
    with lock:
        conns.discard(s)


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            while state["mode"] == "blackhole":  # held: nothing goes through
                time.sleep(0.1)
            if state["mode"] == "reset":
                break
            dst.sendall(data)  # blocking: back-pressure, no loss
    except OSError:
        pass
    close(src)
    close(dst)


def watch():
    while True:
        try:
            with open(control) as f:
                mode = f.read().strip() or "up"
        except OSError:
            mode = "up"
        if mode not in ("up", "reset", "blackhole"):
            mode = "up"
        if mode != state["mode"]:
            with lock:
                open_now = len(conns)
            print(time.strftime("%H:%M:%S"), "mode", mode, "sockets", open_now, flush=True)
            state["mode"] = mode
            if mode == "reset":
                with lock:
                    doomed = list(conns)
                for s in doomed:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
        time.sleep(0.1)


def main():
    threading.Thread(target=watch, daemon=True).start()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(512)
    print("ready", port, flush=True)
    while True:
        client, _ = listener.accept()
        if state["mode"] == "reset":
            client.close()
            continue
        while state["mode"] == "blackhole":  # accepted by the kernel, answered by nobody
            time.sleep(0.1)
        if state["mode"] == "reset":
            client.close()
            continue
        try:
            upstream = connect_target()
        except OSError:
            client.close()
            continue
        with lock:
            conns.update((client, upstream))
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


if __name__ == "__main__":
    main()
