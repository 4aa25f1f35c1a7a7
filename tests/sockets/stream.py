"""A TCP byte-stream check: the client sends N bytes (after a short first write), half
closes, and the server answers with the count and SHA-256 it received; the client
checks them against what it sent. Run unmodified, with or without omx_sockets.
`server 6` listens on IPv6 (and IPv4-mapped) addresses; a client given an IPv6
address connects over IPv6. `server scrub` clears its environment first (as nginx's
workers and daemons do once started)."""
import os
import socket
import sys

from common import Tally, listen, read_to_end

PORT = 5556

if sys.argv[1] == "server":
    if "scrub" in sys.argv[2:]:
        os.environ.clear()
    s = listen(PORT, 5, v6="6" in sys.argv[2:])
    c, _ = s.accept()
    got = Tally()
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        got.update(d)
    c.sendall(got.line().encode())
    c.close()
else:
    size = int(sys.argv[3])
    s = socket.socket(socket.AF_INET6 if ":" in sys.argv[2] else socket.AF_INET)
    s.connect((sys.argv[2], PORT))
    data = b"x" * 10 + bytes(range(256)) * (size // 256)
    s.sendall(data[:10])
    s.sendall(data[10:])
    s.shutdown(socket.SHUT_WR)
    reply = read_to_end(s)
    want = Tally(data).line()
    print("sent", want, "server got", reply.decode())
    sys.exit(0 if reply.decode() == want else 1)
