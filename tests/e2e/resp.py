# SPDX-License-Identifier: Apache-2.0
"""resp.py: a minimal synchronous RESP2 client (standard library only).

    c = Client("127.0.0.1", 6379)
    c.command("SET", "k", 1)            -> b"OK"
    c.pipeline([("GET", "k"), ("X",)])  -> [b"1", RespError(...)]

Replies: simple strings and bulk strings as bytes, integers as int, nil as
None, arrays as lists. An error reply raises RespError from command(); in
a pipeline it is returned in its place so the other replies are kept.
"""

import socket


class RespError(Exception):
    """An error reply from the server (the text after '-')."""


class ProtocolError(Exception):
    """The server sent bytes that are not RESP2."""


def _arg(a):
    if isinstance(a, bytes):
        return a
    if isinstance(a, str):
        return a.encode()
    if isinstance(a, bool):
        raise TypeError("bool is not a Redis argument")
    if isinstance(a, int):
        return b"%d" % a
    if isinstance(a, float):
        return repr(a).encode()
    raise TypeError("unsupported argument type %s" % type(a).__name__)


def encode(args):
    """One command as a RESP2 array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = _arg(a)
        parts.append(b"$%d\r\n" % len(b))
        parts.append(b)
        parts.append(b"\r\n")
    return b"".join(parts)


class Client:
    def __init__(self, host="127.0.0.1", port=6379, timeout=5.0, tls=None):
        """tls: an ssl.SSLContext to speak TLS with (tls_certs.py)."""
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                self.sock = tls.wrap_socket(self.sock, server_hostname=host)
            except BaseException:
                self.sock.close()
                raise
        self.rf = self.sock.makefile("rb")

    def close(self):
        try:
            self.rf.close()
        finally:
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _line(self):
        line = self.rf.readline()
        if not line:
            raise ConnectionError("connection closed by the server")
        if not line.endswith(b"\r\n"):
            raise ProtocolError("line without CRLF: %r" % line[:64])
        return line[:-2]

    def read_reply(self):
        """Reads one reply; an error reply is returned as a RespError."""
        line = self._line()
        if not line:
            raise ProtocolError("empty line")
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest
        if t == b"-":
            return RespError(rest.decode("utf-8", "replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed inside a bulk string")
            if data[-2:] != b"\r\n":
                raise ProtocolError("bulk string without CRLF")
            return data[:-2]
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self.read_reply() for _ in range(n)]
        raise ProtocolError("unknown reply type %r" % t)

    def send(self, data):
        self.sock.sendall(data)

    def command(self, *args):
        self.send(encode(args))
        r = self.read_reply()
        if isinstance(r, RespError):
            raise r
        return r

    def pipeline(self, commands):
        """Sends every command, then reads as many replies, in order."""
        self.send(b"".join(encode(c) for c in commands))
        return [self.read_reply() for _ in commands]
