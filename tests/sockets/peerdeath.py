"""A peer that dies mid-stream: the server takes (or sends) 1 MiB, then kills itself
with SIGKILL (or leaves with _exit while the client still has unsent data); the
client, writing or reading without pause, must see its stream end (ECONNRESET, EPIPE
or end of file) within BOUND seconds, never hang. Run unmodified, with or without
omx_sockets.

    peerdeath.py server PORT sink-kill|sink-exit|source-kill
    peerdeath.py client IP PORT writer|reader
"""
import os
import signal
import socket
import sys

from common import listen

MIB = 1 << 20
BOUND = 60  # a generous bound for a loaded machine: the point is "never a hang"


def server(port, how):
    c, _ = listen(port).accept()
    if how == "source-kill":
        # The client's first byte: its connection is set up (carried) by then.
        c.recv(1)
    moved = 0
    while moved < MIB:
        if how.startswith("sink"):
            d = c.recv(65536)
            if not d:
                print("early end of stream", flush=True)
                sys.exit(1)
            moved += len(d)
        else:
            moved += c.send(b"s" * 65536)
    print("dying after", moved, flush=True)
    if how == "sink-exit":
        os._exit(0)
    os.kill(os.getpid(), signal.SIGKILL)


def client(ip, port, role):
    def hang(*_):
        print("still blocked after %d s: a hang" % BOUND, flush=True)
        os._exit(1)

    signal.signal(signal.SIGALRM, hang)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    s = socket.socket()
    s.connect((ip, port))
    signal.alarm(BOUND)
    if role == "reader":
        s.send(b"g")
    moved = 0
    try:
        while True:
            if role == "writer":
                moved += s.send(b"c" * 65536)
            else:
                d = s.recv(65536)
                if not d:
                    print("end of file after %d bytes" % moved, flush=True)
                    return
                moved += len(d)
    except (ConnectionResetError, BrokenPipeError) as e:
        print("%s after %d bytes" % (type(e).__name__, moved), flush=True)


if sys.argv[1] == "server":
    server(int(sys.argv[2]), sys.argv[3])
else:
    client(sys.argv[2], int(sys.argv[3]), sys.argv[4])
