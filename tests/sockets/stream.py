"""A TCP byte-stream check: the client sends N bytes (after a short first write), half
closes, and the server answers with the count and SHA-256 it received; the client
checks them against what it sent. Run unmodified, with or without omx_sockets.
`server 6` listens on IPv6 (and IPv4-mapped) addresses; a client given an IPv6
address connects over IPv6."""
import hashlib
import socket
import sys

PORT = 5556

if sys.argv[1] == "server":
    v6 = sys.argv[2:] == ["6"]
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if v6 else "0.0.0.0", PORT))
    s.listen(5)
    print("listening", flush=True)
    c, _ = s.accept()
    h, n = hashlib.sha256(), 0
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        h.update(d)
        n += len(d)
    c.sendall(("%d %s" % (n, h.hexdigest())).encode())
    c.close()
else:
    size = int(sys.argv[3])
    s = socket.socket(socket.AF_INET6 if ":" in sys.argv[2] else socket.AF_INET)
    s.connect((sys.argv[2], PORT))
    data = b"x" * 10 + bytes(range(256)) * (size // 256)
    s.sendall(data[:10])
    s.sendall(data[10:])
    s.shutdown(socket.SHUT_WR)
    reply = b""
    while True:
        d = s.recv(100)
        if not d:
            break
        reply += d
    want = "%d %s" % (len(data), hashlib.sha256(data).hexdigest())
    print("sent", want, "server got", reply.decode())
    sys.exit(0 if reply.decode() == want else 1)
