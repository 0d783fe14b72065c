# SPDX-License-Identifier: Apache-2.0
"""A small SPOP 2.0 client for tests, speaking raw bytes.

It builds frames the way HAProxy does (and, on request, the ways HAProxy
never would), and parses what the agent answers: AGENT-HELLO,
AGENT-DISCONNECT and ACK frames. Nothing here trusts the agent: every parser
raises ProtocolError on malformed input.
"""

import ipaddress
import socket
import struct
import time

# Frame types
HAPROXY_HELLO = 1
HAPROXY_DISCONNECT = 2
NOTIFY = 3
AGENT_HELLO = 101
AGENT_DISCONNECT = 102
ACK = 103

FLAG_FIN = 0x1
FLAG_ABORT = 0x2

# Typed data
T_NULL, T_BOOL, T_INT32, T_UINT32, T_INT64, T_UINT64 = 0, 1, 2, 3, 4, 5
T_IPV4, T_IPV6, T_STR, T_BIN = 6, 7, 8, 9

# Actions and scopes
ACT_SET_VAR = 1
ACT_UNSET_VAR = 2
SCOPES = {0: "proc", 1: "sess", 2: "txn", 3: "req", 4: "res"}

# DISCONNECT status codes
ST_NORMAL = 0
ST_IO = 1
ST_TIMEOUT = 2
ST_TOO_BIG = 3
ST_INVALID = 4
ST_NO_VERSION = 5
ST_NO_FRAME_SIZE = 6
ST_NO_CAPABILITIES = 7
ST_BAD_VERSION = 8
ST_BAD_FRAME_SIZE = 9
ST_NO_FRAGMENTATION = 10

VARINT_MAX = 10

# The exact bytes of HAProxy's `option spop-check` request.
HEALTHCHECK_HELLO = bytes.fromhex(
    "0000004e" "01" "00000001" "00" "00"
    "12") + b"supported-versions" + bytes.fromhex("08" "03") + b"2.0" + \
    bytes.fromhex("0e") + b"max-frame-size" + bytes.fromhex("03" "fcf006") + \
    bytes.fromhex("0c") + b"capabilities" + bytes.fromhex("08" "00") + \
    bytes.fromhex("0b") + b"healthcheck" + bytes.fromhex("11")


class ProtocolError(Exception):
    pass


class Omit:
    """Marks a HELLO key to leave out."""


OMIT = Omit()


# ---- varint -----------------------------------------------------------------

def encode_varint(i):
    if i < 0 or i >= 1 << 64:
        raise ValueError("varint out of range: %d" % i)
    if i < 240:
        return bytes([i])
    out = bytearray([(i | 0xF0) & 0xFF])
    i = (i - 240) >> 4
    while i >= 128:
        out.append((i | 0x80) & 0xFF)
        i = (i - 128) >> 7
    out.append(i)
    return bytes(out)


def decode_varint(buf, pos=0):
    """Returns (value, next position). Raises ProtocolError when the bytes
    end too early or the varint is longer than 10 bytes."""
    if pos >= len(buf):
        raise ProtocolError("varint: no bytes")
    i = buf[pos]
    pos += 1
    if i < 240:
        return i, pos
    r = 4
    n = 1
    while True:
        if pos >= len(buf):
            raise ProtocolError("varint: truncated")
        if n >= VARINT_MAX:
            raise ProtocolError("varint: longer than %d bytes" % VARINT_MAX)
        b = buf[pos]
        pos += 1
        n += 1
        i += b << r
        r += 7
        if b < 128:
            break
    return i, pos


# ---- typed data ---------------------------------------------------------------

class Typed:
    """An explicit type for a value (e.g. Typed(T_UINT32, 16380))."""

    def __init__(self, type_, value):
        self.type = type_
        self.value = value


def encode_name(s):
    if isinstance(s, str):
        s = s.encode()
    return encode_varint(len(s)) + s


def encode_typed(v):
    if isinstance(v, Typed):
        t, val = v.type, v.value
    elif v is None:
        t, val = T_NULL, None
    elif isinstance(v, bool):
        t, val = T_BOOL, v
    elif isinstance(v, int):
        t, val = T_INT64, v  # what HAProxy sends for every integer sample
    elif isinstance(v, str):
        t, val = T_STR, v.encode()
    elif isinstance(v, (bytes, bytearray)):
        t, val = T_BIN, bytes(v)
    elif isinstance(v, ipaddress.IPv4Address):
        t, val = T_IPV4, v.packed
    elif isinstance(v, ipaddress.IPv6Address):
        t, val = T_IPV6, v.packed
    else:
        raise TypeError("no SPOP type for %r" % (v,))
    if t == T_NULL:
        return bytes([T_NULL])
    if t == T_BOOL:
        return bytes([T_BOOL | (0x10 if val else 0)])
    if t in (T_INT32, T_INT64):
        bits = 32 if t == T_INT32 else 64
        return bytes([t]) + encode_varint(val & ((1 << bits) - 1) if val < 0 else val)
    if t in (T_UINT32, T_UINT64):
        return bytes([t]) + encode_varint(val)
    if t in (T_IPV4, T_IPV6):
        if isinstance(val, str):
            val = ipaddress.ip_address(val).packed
        return bytes([t]) + bytes(val)
    if t in (T_STR, T_BIN):
        if isinstance(val, str):
            val = val.encode()
        return bytes([t]) + encode_varint(len(val)) + bytes(val)
    raise ValueError("bad type %d" % t)


def decode_typed(buf, pos):
    """Returns (python value, next position)."""
    if pos >= len(buf):
        raise ProtocolError("typed data: no type byte")
    tb = buf[pos]
    pos += 1
    t = tb & 0x0F
    if t == T_NULL:
        return None, pos
    if t == T_BOOL:
        return bool(tb & 0x10), pos
    if t in (T_INT32, T_UINT32, T_INT64, T_UINT64):
        v, pos = decode_varint(buf, pos)
        if t == T_INT32:
            v &= 0xFFFFFFFF
            if v >= 1 << 31:
                v -= 1 << 32
        elif t == T_INT64 and v >= 1 << 63:
            v -= 1 << 64
        return v, pos
    if t in (T_IPV4, T_IPV6):
        n = 4 if t == T_IPV4 else 16
        if n > len(buf) - pos:
            raise ProtocolError("typed data: truncated address")
        return ipaddress.ip_address(bytes(buf[pos:pos + n])), pos + n
    if t in (T_STR, T_BIN):
        n, pos = decode_varint(buf, pos)
        if n > len(buf) - pos:
            raise ProtocolError("typed data: truncated string")
        raw = bytes(buf[pos:pos + n])
        return (raw.decode("utf-8", "surrogateescape") if t == T_STR else raw), pos + n
    raise ProtocolError("typed data: unknown type %d" % t)


def decode_name(buf, pos):
    n, pos = decode_varint(buf, pos)
    if n > len(buf) - pos:
        raise ProtocolError("name: truncated")
    return bytes(buf[pos:pos + n]).decode("utf-8", "surrogateescape"), pos + n


def encode_kv(items):
    """items: iterable of (name, value); values pass through encode_typed."""
    out = bytearray()
    for k, v in items:
        out += encode_name(k) + encode_typed(v)
    return bytes(out)


def decode_kv(payload):
    """A KV-LIST as a dict (a repeated key keeps its last value)."""
    out = {}
    pos = 0
    while pos < len(payload):
        k, pos = decode_name(payload, pos)
        v, pos = decode_typed(payload, pos)
        out[k] = v
    return out


# ---- frames -------------------------------------------------------------------

def frame(ftype, payload=b"", flags=FLAG_FIN, sid=0, fid=0, raw_ids=None):
    """A whole frame with its length. raw_ids replaces the encoded
    stream-id and frame-id with arbitrary bytes."""
    ids = raw_ids if raw_ids is not None else encode_varint(sid) + encode_varint(fid)
    body = bytes([ftype]) + struct.pack(">I", flags) + ids + payload
    return struct.pack(">I", len(body)) + body


def hello_payload(versions="2.0", max_frame_size=16380, capabilities="pipelining",
                  healthcheck=OMIT, engine_id=OMIT, extra=()):
    items = []
    if versions is not OMIT:
        items.append(("supported-versions", versions))
    if max_frame_size is not OMIT:
        items.append(("max-frame-size", max_frame_size if isinstance(max_frame_size, Typed)
                      else Typed(T_UINT32, max_frame_size)))
    if capabilities is not OMIT:
        items.append(("capabilities", capabilities))
    if healthcheck is not OMIT:
        items.append(("healthcheck", healthcheck))
    if engine_id is not OMIT:
        items.append(("engine-id", engine_id))
    items.extend(extra)
    return encode_kv(items)


def hello(**kw):
    return frame(HAPROXY_HELLO, hello_payload(**kw))


def disconnect_payload(status=0, message=""):
    return encode_kv([("status-code", Typed(T_UINT32, status)), ("message", message)])


def notify_payload(messages):
    """messages: list of (name, [(arg name, value), ...])."""
    out = bytearray()
    for name, args in messages:
        args = list(args)
        out += encode_name(name) + bytes([len(args)]) + encode_kv(args)
    return bytes(out)


def check_rate_args(ip="127.0.0.1", method="GET", path="/", host="example.test",
                    api_key=None, user=None, tier=None, be_in_use=0, be_free=100):
    """The arguments of the check-rate message, typed as HAProxy sends them."""
    if isinstance(ip, str):
        ip = ipaddress.ip_address(ip)
    return [("ip", ip), ("method", method), ("path", path), ("host", host),
            ("api_key", api_key), ("user", user), ("tier", tier),
            ("be_in_use", be_in_use), ("be_free", be_free)]


def notify(sid, fid, messages, flags=FLAG_FIN):
    return frame(NOTIFY, notify_payload(messages), flags=flags, sid=sid, fid=fid)


def check_rate(sid, fid, **args):
    return notify(sid, fid, [("check-rate", check_rate_args(**args))])


class Frame:
    def __init__(self, ftype, flags, sid, fid, payload, raw):
        self.type = ftype
        self.flags = flags
        self.sid = sid
        self.fid = fid
        self.payload = payload
        self.raw = raw

    def __repr__(self):
        return "Frame(type=%d flags=%#x sid=%d fid=%d payload=%s)" % (
            self.type, self.flags, self.sid, self.fid, self.payload.hex())

    def kv(self):
        return decode_kv(self.payload)

    def actions(self):
        return parse_actions(self.payload)

    def vars(self):
        return ack_vars(self.payload)


def parse_frame(body):
    """Parses a frame without its 4-byte length."""
    if len(body) < 7:
        raise ProtocolError("frame shorter than 7 bytes: %s" % body.hex())
    ftype = body[0]
    flags = struct.unpack(">I", body[1:5])[0]
    sid, pos = decode_varint(body, 5)
    fid, pos = decode_varint(body, pos)
    return Frame(ftype, flags, sid, fid, bytes(body[pos:]), bytes(body))


def parse_actions(payload):
    """LIST-OF-ACTIONS as [(action, scope name, var name, value)]; value is
    None for unset-var."""
    out = []
    pos = 0
    while pos < len(payload):
        if len(payload) - pos < 2:
            raise ProtocolError("action: truncated header")
        act, nb = payload[pos], payload[pos + 1]
        pos += 2
        if act == ACT_SET_VAR:
            if nb != 3:
                raise ProtocolError("set-var with %d args" % nb)
        elif act == ACT_UNSET_VAR:
            if nb != 2:
                raise ProtocolError("unset-var with %d args" % nb)
        else:
            raise ProtocolError("unknown action %d" % act)
        if pos >= len(payload):
            raise ProtocolError("action: no scope")
        scope = payload[pos]
        pos += 1
        if scope not in SCOPES:
            raise ProtocolError("action: bad scope %d" % scope)
        name, pos = decode_name(payload, pos)
        value = None
        if act == ACT_SET_VAR:
            value, pos = decode_typed(payload, pos)
        out.append((act, SCOPES[scope], name, value))
    return out


def ack_vars(payload):
    """The set-var actions of an ACK as {name: value}; every one must be in
    scope txn and named once."""
    out = {}
    for act, scope, name, value in parse_actions(payload):
        if act != ACT_SET_VAR:
            continue
        if scope != "txn":
            raise ProtocolError("set-var %s in scope %s" % (name, scope))
        if name in out:
            raise ProtocolError("set-var %s twice" % name)
        out[name] = value
    return out


# What an absent variable of an answer means (the contract with HAProxy):
# the agent leaves out what is worth its default.
ANSWER_DEFAULTS = {"status": 0, "retry_after": 0, "reason": "ok", "shadow": False,
                   "degraded": False}


def as_read(vs):
    """An answer's variables as HAProxy's rules read them: each absent one
    of ANSWER_DEFAULTS with its default."""
    out = dict(ANSWER_DEFAULTS)
    out.update(vs)
    return out


# ---- connection -----------------------------------------------------------------

class Conn:
    """One SPOP connection with a receive buffer."""

    def __init__(self, port, host="127.0.0.1", timeout=2.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.timeout = timeout

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def reset(self):
        """Closes with an RST (SO_LINGER 0)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no frame from the agent in time")
        self.sock.settimeout(left)
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def recv_frame(self, timeout=None):
        """The next frame, or None when the agent closed the connection
        (cleanly) before sending one. Raises socket.timeout, ProtocolError
        on a partial frame before EOF."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if n > 1 << 20:
                    raise ProtocolError("agent sent a frame of %d bytes" % n)
                if len(self.buf) >= 4 + n:
                    body = bytes(self.buf[4:4 + n])
                    del self.buf[:4 + n]
                    return parse_frame(body)
            if not self._fill(deadline):
                if self.buf:
                    raise ProtocolError("connection closed inside a frame: %s" % self.buf.hex())
                return None

    def expect(self, ftype, timeout=None):
        f = self.recv_frame(timeout)
        if f is None:
            raise AssertionError("connection closed, expected frame type %d" % ftype)
        if f.type != ftype:
            detail = ""
            if f.type == AGENT_DISCONNECT:
                detail = " %r" % (f.kv(),)
            raise AssertionError("expected frame type %d, got %r%s" % (ftype, f, detail))
        return f

    def expect_closed(self, timeout=2.0):
        """Asserts that the agent closes the connection (FIN) within timeout
        and sends nothing more."""
        deadline = time.monotonic() + timeout
        if self.buf:
            raise AssertionError("unexpected bytes before close: %s" % self.buf.hex())
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("agent did not close within %.1fs" % timeout)
                self.sock.settimeout(left)
                data = self.sock.recv(65536)
                if not data:
                    return
                raise AssertionError("unexpected bytes before close: %s" % data.hex())
        except socket.timeout:
            raise AssertionError("agent did not close within %.1fs" % timeout)
        except ConnectionResetError:
            raise AssertionError("agent reset the connection instead of closing it")

    def handshake(self, **kw):
        """HAPROXY-HELLO then AGENT-HELLO; returns the AGENT-HELLO's KV dict."""
        self.send(hello(**kw))
        f = self.expect(AGENT_HELLO)
        if f.sid != 0 or f.fid != 0:
            raise AssertionError("AGENT-HELLO with stream-id %d frame-id %d" % (f.sid, f.fid))
        return f.kv()

    def expect_disconnect(self, status, timeout=2.0):
        """Asserts an AGENT-DISCONNECT with `status`, then a close."""
        f = self.expect(AGENT_DISCONNECT, timeout)
        kv = f.kv()
        if kv.get("status-code") != status:
            raise AssertionError("AGENT-DISCONNECT status %r (expected %d), message %r"
                                 % (kv.get("status-code"), status, kv.get("message")))
        if not isinstance(kv.get("message"), str):
            raise AssertionError("AGENT-DISCONNECT without a message string: %r" % (kv,))
        if f.flags != FLAG_FIN or f.sid != 0 or f.fid != 0:
            raise AssertionError("AGENT-DISCONNECT header: %r" % (f,))
        self.expect_closed(timeout)
        return kv

    def check_rate(self, sid, fid, **args):
        """Sends one check-rate NOTIFY and returns the ACK's variables, as
        HAProxy's rules read them (as_read)."""
        self.send(check_rate(sid, fid, **args))
        f = self.expect(ACK)
        if (f.sid, f.fid) != (sid, fid):
            raise AssertionError("ACK for %d/%d, expected %d/%d" % (f.sid, f.fid, sid, fid))
        if f.flags != FLAG_FIN:
            raise AssertionError("ACK flags %#x" % f.flags)
        return as_read(f.vars())


def self_test():
    """Checks the codec against the vectors of SPOP-NOTES.md."""
    vectors = {
        0: "00", 239: "ef", 240: "f000", 256: "f001", 2287: "ff7f",
        2288: "f08000", 16380: "fcf006", 16384: "f0f106", 65535: "fff01e",
        2 ** 32 - 1: "fff0fefe7e", 2 ** 64 - 1: "fff0fefefefefefefe0e",
    }
    for value, hexs in vectors.items():
        enc = encode_varint(value)
        assert enc.hex() == hexs, (value, enc.hex(), hexs)
        dec, pos = decode_varint(enc)
        assert (dec, pos) == (value, len(enc)), (value, dec, pos)
    for value in list(range(0, 5000)) + [2 ** k + d for k in range(8, 64) for d in (-1, 0, 1)]:
        if value < 2 ** 64:
            assert decode_varint(encode_varint(value)) == (value, len(encode_varint(value)))
    for bad in ("f0", "ff80", "f0" + "ff" * 9 + "00"):
        try:
            decode_varint(bytes.fromhex(bad))
        except ProtocolError:
            pass
        else:
            raise AssertionError("varint %s should not decode" % bad)
    hc = frame(HAPROXY_HELLO, hello_payload(max_frame_size=16380, capabilities="",
                                            healthcheck=True))
    assert hc == HEALTHCHECK_HELLO and len(hc) == 82, hc.hex()
    assert encode_typed(-1) == bytes([T_INT64]) + bytes.fromhex("fff0fefefefefefefe0e")
    assert decode_typed(encode_typed(-5), 0) == (-5, 11)
    assert encode_typed(True) == b"\x11" and encode_typed(False) == b"\x01"
    acts = bytes([1, 3, 2]) + encode_name("status") + encode_typed(429) + \
        bytes([2, 2, 2]) + encode_name("x")
    assert parse_actions(acts) == [(1, "txn", "status", 429), (2, "txn", "x", None)]


if __name__ == "__main__":
    self_test()
    print("spop.py self-test ok")


class Session:
    """A connection after the handshake that sends one NOTIFY at a time
    and returns the variables of its ACK."""

    def __init__(self, port, timeout=5.0):
        self.c = Conn(port, timeout=timeout)
        self.c.handshake()
        self.sid = 0

    def notify(self, messages):
        """The ACK's variables for one NOTIFY of messages [(name, args)]."""
        self.sid += 1
        self.c.send(notify(self.sid, 1, messages))
        f = self.c.expect(ACK)
        assert (f.sid, f.fid) == (self.sid, 1), f
        return f.vars()

    def check_rate(self, extra=(), **args):
        """check-rate with check_rate_args(**args) and more arguments: the
        variables as HAProxy's rules read them (as_read)."""
        return as_read(self.notify([("check-rate", check_rate_args(**args) + list(extra))]))

    def close(self):
        self.c.close()
