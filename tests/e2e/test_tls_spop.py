# SPDX-License-Identifier: Apache-2.0
"""SPOP over TLS (--listen-tls-cert, --listen-tls-key, --listen-tls-ca):
the real haproxy on haproxy-examples/tls.cfg, and a Python TLS client
speaking SPOP. Certificates are made here with the `openssl` command: a
CA, the agent's certificate for 127.0.0.1 signed by it, HAProxy's client
certificate signed by it, and another CA that signed nothing of these.
HAPROXY picks the haproxy binary (HAPROXY=haproxy32 for a 3.x one)."""

import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import harness
import spop
from harness import ROOT, Skip, http_get, wait_for

TLS_CFG = os.path.join(ROOT, "haproxy-examples", "tls.cfg")


def openssl(d, *args):
    subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True)


def issue(d, name, ca, cn, san=None):
    """name.key and name.pem, signed by ca (ca.pem, ca.key); with san,
    the subjectAltName."""
    openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn)
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\n" % san if san else "basicConstraints=CA:FALSE\n")
    openssl(d, "x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
            "-CAcreateserial", "-days", "2", "-out", name + ".pem", "-extfile", ext)


def make_pki(h):
    """A directory of certificates; returns the path of each by name."""
    if shutil.which("openssl") is None:
        raise Skip("openssl is not installed")
    d = os.path.join(h.dir, "pki")
    os.mkdir(d)
    for ca in ("ca", "other-ca"):
        openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", ca + ".key", "-out", ca + ".pem", "-days", "2",
                "-subj", "/CN=test " + ca)
    issue(d, "agent", "ca", "127.0.0.1", "IP:127.0.0.1,DNS:localhost")
    issue(d, "agent2", "other-ca", "127.0.0.1", "IP:127.0.0.1,DNS:localhost")
    issue(d, "haproxy", "ca", "haproxy")
    with open(os.path.join(d, "haproxy-crt.pem"), "w") as out:
        for part in ("haproxy.pem", "haproxy.key"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    return lambda name: os.path.join(d, name)


def tls_agent(h, pki, *args, ca=True):
    extra = ["--listen-tls-ca", pki("ca.pem")] if ca else []
    return h.agent("--threads", "2", "--listen-tls-cert", pki("agent.pem"),
                   "--listen-tls-key", pki("agent.key"), *extra, *args)


def tls_haproxy(h, agent, pki, ca="ca.pem", crt=True):
    backend = h.backend()
    env = {"RL_AGENT_CA": pki(ca)}
    if crt:
        env["RL_AGENT_CRT"] = pki("haproxy-crt.pem")
    return h.haproxy(agent.port, backend.port, cfg=TLS_CFG, env=env)


def agent_status(hp):
    return hp.server_stat("ratelimit-agents", "agent1")["status"]


class TlsConn(spop.Conn):
    """spop.Conn over TLS, verifying the agent against cafile."""

    def __init__(self, port, cafile, certfile=None, keyfile=None, timeout=3.0):
        ctx = ssl.create_default_context(cafile=cafile)
        if certfile:
            ctx.load_cert_chain(certfile, keyfile)
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        self.buf = bytearray()
        self.timeout = timeout


def hello_and_decide(c, n=1, sid=1):
    """HELLO, then n NOTIFYs; returns the ACKs' variables."""
    c.send(spop.hello())
    c.expect(spop.AGENT_HELLO)
    c.send(b"".join(spop.check_rate(sid + i, 1) for i in range(n)))
    return [c.expect(spop.ACK).vars() for _ in range(n)]


def closed_by_agent(sock):
    """Whether the agent closes a connection that sent it something else
    than TLS (FIN or RST), reading at most a TLS alert first."""
    sock.settimeout(3.0)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
            if data[:1] != b"\x15":  # an alert record is all it may send
                return False
    except ConnectionResetError:
        return True


def test_limits_enforced_through_haproxy_over_tls(h):
    """The health check is UP over TLS with a client certificate, and the
    limit holds: three requests pass, the fourth is refused."""
    pki = make_pki(h)
    agent = tls_agent(h, pki, "--limit", "3/1m")
    hp = tls_haproxy(h, agent, pki)
    wait_for(lambda: agent_status(hp) == "UP", 10, "agent1 UP over TLS")
    for left in (2, 1, 0):
        r = http_get(hp.port, "/")
        assert r.status == 200, r
        assert r.headers.get("RateLimit") == '"default";r=%d;t=20' % left, r
    r = http_get(hp.port, "/")
    assert r.status == 429, r
    assert "TLS" not in agent.log().split("listening on")[1], agent.log()


def test_haproxy_without_client_certificate_is_refused(h):
    """The agent asks for a certificate signed by its CA: HAProxy without
    one gets nowhere, requests take the SPOE error path (no limit, no
    RateLimit header), and the agent says why and stays up."""
    pki = make_pki(h)
    agent = tls_agent(h, pki, "--limit", "1/1m")
    hp = tls_haproxy(h, agent, pki, crt=False)
    wait_for(lambda: "did not return a certificate" in agent.log(), 10,
             "the agent to refuse HAProxy without a certificate")
    wait_for(lambda: agent_status(hp).startswith("DOWN"), 10, "agent1 DOWN")
    for _ in range(3):
        r = http_get(hp.port, "/")
        assert r.status == 200, r
        assert r.headers.get("RateLimit") is None, r
    assert agent.alive()
    # a client that has the certificate is served
    with TlsConn(agent.port, pki("ca.pem"), pki("haproxy.pem"), pki("haproxy.key")) as c:
        assert hello_and_decide(c)[0]["ratelimit"] == '"default";r=0;t=60'


def test_haproxy_trusting_another_ca_fails(h):
    """HAProxy verifies the agent against a CA that did not sign it: no
    connection, agent DOWN, requests on the SPOE error path."""
    pki = make_pki(h)
    agent = tls_agent(h, pki, "--limit", "1/1m", ca=False)
    hp = tls_haproxy(h, agent, pki, ca="other-ca.pem", crt=False)
    wait_for(lambda: agent_status(hp).startswith("DOWN"), 10, "agent1 DOWN")
    for _ in range(3):
        r = http_get(hp.port, "/")
        assert r.status == 200, r
        assert r.headers.get("RateLimit") is None, r
    assert agent.alive()


def test_plaintext_and_garbage_to_a_tls_listener(h):
    """A plaintext HELLO and random bytes are closed, logged, and the
    agent goes on serving TLS."""
    pki = make_pki(h)
    agent = tls_agent(h, pki, ca=False)
    with spop.Conn(agent.port) as c:
        c.send(spop.hello())
        assert closed_by_agent(c.sock)
    with spop.Conn(agent.port) as c:
        # random bytes after one that no TLS record (0x14 to 0x17) nor an
        # SSLv2 hello (high bit set) begins with: random bytes alone are
        # such a beginning about once in 500 runs, and then the agent
        # rightly waits for the rest of a record announced up to 32 KiB
        c.send(b"G" + os.urandom(3000))
        assert closed_by_agent(c.sock)
    wait_for(lambda: "TLS read with 127.0.0.1 failed in the handshake" in agent.log(), 5,
             "the refusal logged")
    with TlsConn(agent.port, pki("ca.pem")) as c:
        assert len(hello_and_decide(c)) == 1


def two_records_of_frames():
    """NOTIFYs filling two TLS records of 16384 bytes exactly (what one
    write of 32768 bytes becomes), the first record ending inside a frame
    with more than 4 bytes of it: the agent, holding those bytes, has less
    room than the second record, and OpenSSL keeps its last bytes, which no
    socket event announces. Returns (bytes, number of frames)."""
    frames, total, sid = [], 0, 1
    while True:
        f = spop.check_rate(sid, 1)
        if total + len(f) > 32768 - 200:
            break
        frames.append(f)
        total += len(f)
        sid += 1
    for pad in range(230):
        last = spop.check_rate(sid, 1, path="/" + "p" * pad)
        if total + len(last) == 32768:
            break
    else:
        raise AssertionError("no padding makes 32768 bytes")
    frames.append(last)
    cut, whole = 0, 0
    for f in frames:
        if whole + len(f) > 16384:
            cut = 16384 - whole
            break
        whole += len(f)
    assert cut > 4, cut
    return b"".join(frames), len(frames)


def test_bytes_openssl_keeps_are_read(h):
    """Every NOTIFY is answered, those in the bytes OpenSSL kept too (and
    counted: a token comes back every 0.36 s, so the count is exact however
    slowly a loaded machine runs them)."""
    pki = make_pki(h)
    agent = tls_agent(h, pki, "--limit", "10000/1h", ca=False)
    data, n = two_records_of_frames()
    with TlsConn(agent.port, pki("ca.pem")) as c:
        c.send(spop.hello())
        c.expect(spop.AGENT_HELLO)
        c.send(data)
        acks = [c.expect(spop.ACK).vars() for _ in range(n)]
    assert acks[-1]["ratelimit"] == '"default";r=%d;t=1' % (10000 - n)


class RecordConn(spop.Conn):
    """spop.Conn over TLS whose records the test sends itself, whole or
    in parts (an ssl.SSLObject on memory BIOs over a plain socket)."""

    def __init__(self, port, cafile, timeout=3.0):
        super().__init__(port, timeout=timeout)
        self.sock.settimeout(timeout)
        self.into, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        ctx = ssl.create_default_context(cafile=cafile)
        self.tls = ctx.wrap_bio(self.into, self.out, server_hostname="127.0.0.1")
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.out.read())
                data = self.sock.recv(65536)
                if not data:
                    raise AssertionError("the agent closed in the handshake")
                self.into.write(data)
        self.sock.sendall(self.out.read())

    def records(self, data):
        """data as the TLS bytes that carry it, not sent."""
        self.tls.write(data)
        return self.out.read()

    def send(self, data):
        self.sock.sendall(self.records(data))

    def _fill(self, deadline):
        while True:
            try:
                data = self.tls.read(65536)
                break
            except ssl.SSLWantReadError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("no frame from the agent in time")
                self.sock.settimeout(left)
                raw = self.sock.recv(65536)
                if not raw:
                    return False
                self.into.write(raw)
            except ssl.SSLZeroReturnError:
                return False
        self.buf += data
        return bool(data)


def test_a_record_begun_does_not_stop_the_worker(h):
    """A connection that has sent half of a TLS record: the rest comes when
    the peer writes it, and meanwhile the worker serves its other
    connections (a single worker here; the half is in the socket before
    the other connection begins, so every turn of the loop that serves it
    finds the half). OpenSSL holds the half record, and says so
    (SSL_has_pending); only the socket can announce the rest."""
    pki = make_pki(h)
    agent = h.agent("--threads", "1", "--limit", "10000/1m", "--listen-tls-cert",
                    pki("agent.pem"), "--listen-tls-key", pki("agent.key"))
    with RecordConn(agent.port, pki("ca.pem")) as a:
        a.send(spop.hello())
        a.expect(spop.AGENT_HELLO)
        record = a.records(spop.check_rate(7, 1))
        a.sock.sendall(record[:len(record) // 2])
        with TlsConn(agent.port, pki("ca.pem")) as b:
            assert len(hello_and_decide(b, n=2)) == 2
        a.sock.sendall(record[len(record) // 2:])
        assert a.expect(spop.ACK).fid == 1


def test_sighup_reads_the_certificate_again(h):
    """A renewed certificate (here from another CA) in the same files is
    used by the connections opened after SIGHUP; an open one goes on."""
    pki = make_pki(h)
    cert, key = os.path.join(h.dir, "live.pem"), os.path.join(h.dir, "live.key")
    shutil.copy(pki("agent.pem"), cert)
    shutil.copy(pki("agent.key"), key)
    agent = h.agent("--listen-tls-cert", cert, "--listen-tls-key", key, "--limit", "100/1m")
    old = TlsConn(agent.port, pki("ca.pem"))
    try:
        hello_and_decide(old)
        shutil.copy(pki("agent2.pem"), cert)
        shutil.copy(pki("agent2.key"), key)
        agent.signal(signal.SIGHUP)
        wait_for(lambda: "read again for new connections" in agent.log(), 5, "the reload")
        with TlsConn(agent.port, pki("other-ca.pem")) as c:
            hello_and_decide(c)
        try:
            TlsConn(agent.port, pki("ca.pem")).close()
            raise AssertionError("the old certificate is still served")
        except ssl.SSLCertVerificationError:
            pass
        old.send(spop.check_rate(7, 1))
        old.expect(spop.ACK)
    finally:
        old.close()


def run_agent(*args):
    binary = os.path.join(harness.BUILD, "spoa-ratelimit")
    return subprocess.run([binary, "--listen", "127.0.0.1:0"] + list(args),
                          capture_output=True, text=True, timeout=10)


def test_bad_certificate_files_stop_the_start_and_fail_check(h):
    """Missing, mismatched and non-PEM files: exit 2 at start, --check
    fails, each naming the file."""
    pki = make_pki(h)
    junk = os.path.join(h.dir, "junk.pem")
    with open(junk, "w") as f:
        f.write("not a certificate\n")
    cases = [
        (["--listen-tls-cert", pki("missing.pem"), "--listen-tls-key", pki("agent.key")],
         pki("missing.pem")),
        (["--listen-tls-cert", junk, "--listen-tls-key", pki("agent.key")], junk),
        (["--listen-tls-cert", pki("agent.pem"), "--listen-tls-key", pki("haproxy.key")],
         pki("haproxy.key")),
        (["--listen-tls-cert", pki("agent.pem"), "--listen-tls-key", pki("agent.key"),
          "--listen-tls-ca", junk], junk),
    ]
    for args, named in cases:
        r = run_agent(*args)
        assert r.returncode == 2, (args, r)
        assert named in r.stderr, (args, r.stderr)
        c = run_agent("--check", *args)
        assert c.returncode == 1, (args, c)
        assert named in c.stderr, (args, c.stderr)
    r = run_agent("--listen-tls-cert", pki("agent.pem"))
    assert r.returncode == 2 and "go together" in r.stderr, r
    c = run_agent("--check", "--listen-tls-cert", pki("agent.pem"), "--listen-tls-key",
                  pki("agent.key"), "--listen-tls-ca", pki("ca.pem"))
    assert c.returncode == 0, c


def test_rules_file_listen_tls(h):
    """The rules file's listen_tls stands for the options; the options win."""
    pki = make_pki(h)
    rules = os.path.join(h.dir, "rules.yaml")
    with open(rules, "w") as f:
        f.write('limits: ["5/1m"]\nlisten_tls:\n  cert: %s\n  key: %s\n  ca: %s\n'
                % (pki("agent.pem"), pki("agent.key"), pki("ca.pem")))
    agent = h.agent("-f", rules)
    with TlsConn(agent.port, pki("ca.pem"), pki("haproxy.pem"), pki("haproxy.key")) as c:
        assert hello_and_decide(c)[0]["ratelimit"] == '"default";r=4;t=12'
    with spop.Conn(agent.port) as c:
        c.send(spop.hello())
        assert closed_by_agent(c.sock)
    c = run_agent("--check", "-f", rules, "--listen-tls-cert", pki("agent2.pem"),
                  "--listen-tls-key", pki("agent.key"))
    assert c.returncode == 1 and pki("agent.key") in c.stderr, c
