"""A connection's life in the agent beyond single frames: a flood of bad
connections logged in tens of lines, not one line each.
"""

import re
import socket

GARBAGE = b"GET / HTTP/1.1\r\n\r\n"  # its first 4 bytes, as a length, are too big

SUMMARY_RE = re.compile(r'Z (\w+): (\d+) more like "(.*)" in the last \d+ s$')


def closed_after(port, data):
    """Connects, sends data, reads until the agent closes. Returns whether
    anything came back before the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        if data:
            s.sendall(data)
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return bool(got)
            got += chunk


def logged(log, pattern):
    """How many lines matched pattern: those written, plus the counts of
    the reports of lines held back that quote a line matching it."""
    n = 0
    for line in log.splitlines():
        m = SUMMARY_RE.search(line)
        if m:
            if re.search(pattern, m.group(3)):
                n += int(m.group(2))
        elif re.search(pattern, line):
            n += 1
    return n


def test_bad_connections_log_tens_of_lines(h):
    # One worker, so that connections held open fill it for sure.
    agent = h.agent("--threads", "1", "--max-conns", "4")
    # 1000 protocol errors, one after the other: each is answered with an
    # AGENT-DISCONNECT (too big) and closed.
    answered = sum(closed_after(agent.port, GARBAGE) for _ in range(1000))
    # 1000 connections refused: the worker is full.
    held = [socket.create_connection(("127.0.0.1", agent.port), timeout=5) for _ in range(4)]
    try:
        for s in held:
            s.sendall(GARBAGE[:2])  # accepted, and waiting for the rest of a frame
        refused = sum(not closed_after(agent.port, b"") for _ in range(1000))
    finally:
        for s in held:
            s.close()
    assert answered > 900 and refused > 900, (answered, refused)
    assert h.stop(agent) == 0
    log = agent.log()
    lines = log.splitlines()
    assert len(lines) < 100, "%d log lines for 2000 bad connections:\n%s" % (
        len(lines), "\n".join(lines[:20]))
    # Nothing is lost: what was held back is counted in the reports.
    assert logged(log, r"disconnect, status 3 \(") == answered, log
    assert logged(log, r"connections, refusing another") == refused, log
