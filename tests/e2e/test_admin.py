# SPDX-License-Identifier: Apache-2.0
"""The admin endpoints with the in-memory store (Redis: test_redis.py)."""

import http.client
import json
import os
import re
import subprocess

import harness
import spop
from harness import http_get


def ask(conn, sid, key):
    conn.send(spop.notify(sid, 1, [("check-rate", spop.check_rate_args(api_key=key))]))
    return spop.as_read(conn.expect(spop.ACK).vars())


def test_admin_memory_inspect_and_reset(h):
    mport = harness.free_port()
    a = h.agent("--answer", "full", "--limit", "3/1m", "--limit", "10/1h", "--metrics", "127.0.0.1:%d" % mport,
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


# ---- --admin-token-file -------------------------------------------------------

TOKEN = "e2e-admin-token-0123456789abcdef"


def token_file(h, mode=0o600, token=TOKEN):
    path = os.path.join(h.dir, "admin.token")
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, mode)
    return path


def bearer(token=TOKEN):
    return {"Authorization": "Bearer " + token}


def form_post(port, path, fields, origin):
    """What a page's <form method=post> makes a browser send: a urlencoded
    body, an Origin header, no Authorization."""
    body = "&".join("%s=%s" % kv for kv in fields.items())
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", path, body=body, headers={
            "Content-Type": "application/x-www-form-urlencoded", "Origin": origin})
        r = conn.getresponse()
        return r.status, r.getheader("WWW-Authenticate"), r.read()
    finally:
        conn.close()


def remaining(mport, key, headers=None):
    r = http_get(mport, "/admin/client?api_key=" + key, headers=headers)
    assert r.status == 200, r
    return json.loads(r.text)["rules"][0]["limits"][0]["remaining"]


def test_admin_token_required(h):
    mport = harness.free_port()
    a = h.agent("--limit", "3/1m", "--metrics", "127.0.0.1:%d" % mport, "--admin",
                "--admin-token-file", token_file(h))
    c = spop.Conn(a.port)
    c.handshake()
    assert ask(c, 1, "k1")["status"] == 0
    # No token, a wrong one, another scheme: 401, and the answer says how
    # to authenticate.
    for headers in ({}, bearer("e2e-admin-token-0123456789abcdeX"), bearer(TOKEN + "0"),
                    bearer(TOKEN[:-1]), {"Authorization": "Basic " + TOKEN}):
        for method, path in (("GET", "/admin/client?api_key=k1"),
                             ("POST", "/admin/reset?api_key=k1")):
            r = http_get(mport, path, method=method, headers=headers)
            assert r.status == 401, (headers, r)
            assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), r
    # A page that posts a form to the agent, through the operator's browser:
    # refused, and the bucket keeps its state.
    status, challenge, _ = form_post(mport, "/admin/reset?api_key=k1", {"api_key": "k1"},
                                     "http://attacker.example")
    assert status == 401 and challenge.startswith("Bearer"), (status, challenge)
    # The token opens both.
    assert remaining(mport, "k1", bearer()) == 2
    r = http_get(mport, "/admin/reset?api_key=k1", method="POST",
                 headers={"Authorization": "bearer " + TOKEN})
    assert r.status == 200, r
    assert remaining(mport, "k1", bearer()) == 3
    # Metrics and health stay open.
    assert http_get(mport, "/metrics").status == 200
    assert http_get(mport, "/healthz").status == 200
    assert "warning" not in a.log(), a.log()
    c.close()


def test_admin_token_file_others_can_read_warns(h):
    mport = harness.free_port()
    path = token_file(h, mode=0o644)
    a = h.agent("--metrics", "127.0.0.1:%d" % mport, "--admin", "--admin-token-file", path)
    assert re.search(r"Z warning: --admin-token-file %s can be read or written by group or "
                     r"others" % re.escape(path), a.log()), a.log()
    assert http_get(mport, "/admin/client?api_key=k1", headers=bearer()).status == 200


def agent_check(*args):
    return subprocess.run([os.path.join(harness.BUILD, "spoa-ratelimit")] + list(args) +
                          ["--check"], capture_output=True, text=True, timeout=10)


def test_admin_public_address_needs_a_token(h):
    # --check stops after the options: nothing listens.
    for where in ("0.0.0.0:9102", "[::]:9102", "192.0.2.1:9102", "example.com:9102"):
        r = agent_check("--metrics", where, "--admin")
        assert r.returncode == 2, (where, r)
        assert "--admin on --metrics %s, not a loopback address" % where in r.stderr, r
        assert "--admin-token-file" in r.stderr, r
        r = agent_check("--metrics", where, "--admin", "--admin-token-file", token_file(h))
        assert r.returncode == 0, (where, r)
    for where in ("127.0.0.1:9102", "127.0.0.2:9102", "localhost:9102", "[::1]:9102"):
        r = agent_check("--metrics", where, "--admin")
        assert r.returncode == 0, (where, r)
    # A token file that cannot be used stops the agent as well.
    r = agent_check("--metrics", "0.0.0.0:9102", "--admin", "--admin-token-file",
                    os.path.join(h.dir, "missing"))
    assert r.returncode == 2 and "missing: cannot open: No such file" in r.stderr, r
    r = agent_check("--metrics", "0.0.0.0:9102", "--admin", "--admin-token-file",
                    token_file(h, token="short"))
    assert r.returncode == 2 and "the token has 5 bytes" in r.stderr, r


def test_admin_without_token_refuses_browser_pages(h):
    # Loopback, no token: a browser on the operator's machine can still
    # reach the port; what a page sends carries an Origin header.
    mport = harness.free_port()
    a = h.agent("--limit", "3/1m", "--metrics", "127.0.0.1:%d" % mport, "--admin")
    c = spop.Conn(a.port)
    c.handshake()
    assert ask(c, 1, "k1")["status"] == 0
    status, _, body = form_post(mport, "/admin/reset?api_key=k1", {"api_key": "k1"}, "null")
    assert status == 403, (status, body)
    assert remaining(mport, "k1") == 2
    c.close()


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
