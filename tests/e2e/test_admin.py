"""The admin endpoints with the in-memory store (Redis: test_redis.py)."""

import json
import os
import re
import subprocess

import harness
import spop
from harness import http_get


def ask(conn, sid, key):
    conn.send(spop.notify(sid, 1, [("check-rate", spop.check_rate_args(api_key=key))]))
    return conn.expect(spop.ACK).vars()


def test_admin_memory_inspect_and_reset(h):
    mport = harness.free_port()
    a = h.agent("--limit", "3/1m", "--limit", "10/1h", "--metrics", "127.0.0.1:%d" % mport,
                "--admin")
    c = spop.Conn(a.port)
    c.handshake()
    for sid in (1, 3):
        assert ask(c, sid, "k1")["status"] == 0
    info = json.loads(http_get(mport, "/admin/client?api_key=k1").text)
    (rule,) = info["rules"]
    assert info["store"] == "memory" and rule["rule"] == "default", info
    assert [(l["limit"], l["remaining"]) for l in rule["limits"]] == [("3/1m", 1), ("10/1h", 8)], rule
    # looking takes nothing
    info = json.loads(http_get(mport, "/admin/client?api_key=k1").text)
    assert info["rules"][0]["limits"][0]["remaining"] == 1, info
    r = http_get(mport, "/admin/reset?api_key=k1", method="POST")
    assert r.status == 200 and json.loads(r.text)["rules"][0]["deleted"] == 2, r.text
    assert ask(c, 5, "k1")["remaining"] == 2
    # only with --admin, and only the two verbs
    assert http_get(mport, "/admin/reset?api_key=k1").status == 404
    c.close()


def test_admin_needs_metrics(h):
    r = subprocess.run([os.path.join(harness.BUILD, "spoa-ratelimit"), "--admin"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--admin serves on the --metrics listener" in r.stderr, r



def test_admin_log_line_cannot_be_forged(h):
    mport = harness.free_port()
    a = h.agent("--metrics", "127.0.0.1:%d" % mport, "--admin")
    forged = "2026-01-01T00:00:00.000Z error: forged"
    r = http_get(mport, "/admin/reset?api_key=k1%0a" + forged.replace(" ", "%20") +
                 "%0d%1b%c3%a9%5c", method="POST")
    assert r.status == 200, r
    # What the client chose stays on the line of the reset, escaped.
    log = a.log()
    assert "admin: reset the buckets of api_key=k1\\x0a%s\\x0d\\x1b\\xc3\\xa9\\x5c\n" % forged \
        in log, log
    assert not re.search(r"^%s" % re.escape(forged), log, re.M), log
