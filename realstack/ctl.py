"""One request to the bench's control socket: python3 ctl.py SOCKET JSON."""

import socket
import sys

with socket.socket(socket.AF_UNIX) as s:
    s.settimeout(30)
    s.connect(sys.argv[1])
    s.sendall(sys.argv[2].encode() + b"\n")
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
    sys.stdout.write(reply.decode())
