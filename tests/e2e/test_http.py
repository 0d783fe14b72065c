# SPDX-License-Identifier: Apache-2.0
"""The HTTP listener of --metrics, over raw sockets: requests that come in
pieces, an answer larger than the socket buffers to a client that reads
slowly, one client stalling while others are served, bad requests, and no
busy loop when the agent runs out of file descriptors."""

import fcntl
import json
import os
import re
import resource
import socket
import struct
import termios
import time

import harness
from harness import http_get, wait_for


def start(h, *args):
    """An agent with --metrics on a free port; returns (agent, port)."""
    mport = harness.free_port()
    a = h.agent("--threads", "1", "--metrics", "127.0.0.1:%d" % mport, *args)
    return a, mport


def connect(port, rcvbuf=None, mss=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if mss:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def read_answer(s, chunk=65536, pause=0.0):
    """Everything until the agent closes (it answers with Connection:
    close), then (status, {header: value}, body)."""
    data = bytearray()
    while True:
        b = s.recv(chunk)
        if not b:
            break
        data += b
        if pause:
            time.sleep(pause)
    s.close()
    head, sep, body = bytes(data).partition(b"\r\n\r\n")
    assert sep, "no end of head in %r" % bytes(data[:200])
    lines = head.decode("latin-1").split("\r\n")
    m = re.fullmatch(r"HTTP/1\.1 (\d{3}) .+", lines[0])
    assert m, lines[0]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(m.group(1)), headers, body


def exchange(port, *parts, pause=0.05):
    """Sends the parts of a request with a pause between them; returns the
    answer as read_answer() does."""
    s = connect(port)
    for i, p in enumerate(parts):
        if i:
            time.sleep(pause)
        s.sendall(p)
    return read_answer(s)


def test_http_request_in_pieces(h):
    _, port = start(h)
    status, headers, body = exchange(port, b"GET /hea", b"lthz HTTP/1.1\r\nHo", b"st: x\r",
                                     b"\n", b"\r\n")
    assert (status, body) == (200, b"ok\n"), (status, headers, body)
    assert headers["content-length"] == "3" and headers["connection"] == "close", headers
    status, _, body = exchange(port, b"GET /metr", b"ics?x=1 HTTP/1.0\n\n")
    assert status == 200 and b"# TYPE spoa_rl_decisions_total counter\n" in body, (status, body)


def unread(s):
    """Bytes the kernel holds for socket s, not read yet."""
    return struct.unpack("i", fcntl.ioctl(s, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_http_large_answer_to_slow_reader(h):
    # 640 rules: an admin answer of about 61 KiB, under its 64 KiB cap. The
    # client's small window and segments keep the agent's send buffer at
    # some 70 KB of memory, less than the answer: it cannot go out in one
    # write, the agent must wait until the client has read some.
    rules = os.path.join(h.dir, "rules.yaml")
    with open(rules, "w") as f:
        f.write("endpoints:\n")
        for i in range(640):
            f.write('  - { name: e%03d, match: { path: /p%03d }, limits: ["%d/1m"] }\n'
                    % (i, i, i + 1))
    _, port = start(h, "-f", rules, "--admin")
    s = connect(port, rcvbuf=4096, mss=536)
    s.sendall(b"GET /admin/client?api_key=k1 HTTP/1.1\r\n\r\n")
    # the agent writes what it can meanwhile: the client's buffer fills
    wait_for(lambda: unread(s) > 0, 5, "the answer's first bytes")
    status, headers, body = read_answer(s, chunk=4096, pause=0.01)
    assert status == 200, (status, body[:200])
    assert len(body) > 60000 and int(headers["content-length"]) == len(body), \
        (headers, len(body))
    info = json.loads(body)
    assert [r["rule"] for r in info["rules"]] == \
        ["default"] + ["e%03d" % i for i in range(640)], body[-200:]


def test_http_serves_others_while_a_request_is_half_sent(h):
    _, port = start(h)
    stalled = connect(port)
    stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.")
    # Well below the agent's 5 s for a head: a listener stuck on the stalled
    # client would not answer within it.
    r = http_get(port, "/healthz", timeout=2.5)
    assert (r.status, r.body) == (200, b"ok\n"), r
    stalled.sendall(b"0.0.1\r\n\r\n")
    status, _, body = read_answer(stalled)
    assert status == 200 and body.startswith(b"# HELP "), (status, body[:100])


def test_http_bad_requests(h):
    _, port = start(h)
    for bad in (b"GET  /metrics HTTP/1.1\r\n\r\n",
                b"GET metrics HTTP/1.1\r\n\r\n",
                b"GET /metrics HTTP/2.0\r\n\r\n",
                b"GET /metrics\r\n\r\n",
                b"GET /metrics HTTP/1.1\r\nHost x\r\n\r\n",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"):
        status, _, _ = exchange(port, bad)
        assert status == 400, (bad, status)
    # answered without waiting for the head to end
    s = connect(port)
    s.sendall(b"GET /metrics HTTP/9")
    assert read_answer(s)[0] == 400
    s = connect(port)
    s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 5000 + b"\r\n\r\n")
    assert read_answer(s)[0] == 431
    for path in (b"/", b"/nothing", b"/metricsx", b"/metrics/", b"/admin/client?api_key=k1"):
        status, _, _ = exchange(port, b"GET " + path + b" HTTP/1.1\r\n\r\n")
        assert status == 404, (path, status)
    status, headers, _ = exchange(port, b"POST /metrics HTTP/1.1\r\n\r\n")
    assert status == 405 and headers["allow"] == "GET, HEAD", (status, headers)
    assert http_get(port, "/healthz").status == 200


def cpu_seconds(pid):
    """User and system time of every thread of pid."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def test_http_no_busy_loop_without_descriptors(h):
    a, port = start(h)
    # Room for four more descriptors, as if the agent had been started with
    # a low `ulimit -n`.
    limit = open_fds(a.pid) + 4
    resource.prlimit(a.pid, resource.RLIMIT_NOFILE, (limit, limit))
    # Connections complete in the kernel whether or not the agent accepts:
    # the agent takes four, the others wait in the listen queue.
    clients = [connect(port) for _ in range(12)]
    wait_for(lambda: open_fds(a.pid) >= limit, 5, "the agent to use all its descriptors")
    time.sleep(0.2)
    before = cpu_seconds(a.pid)
    time.sleep(2.0)
    used = cpu_seconds(a.pid) - before
    # A listener that retried at once would take a core (2 s of CPU).
    assert used < 0.3, "the agent used %.2f s of CPU in 2 s without descriptors" % used
    assert a.alive()
    for c in clients:
        c.close()
    r = http_get(port, "/healthz", timeout=5)
    assert (r.status, r.body) == (200, b"ok\n"), r
