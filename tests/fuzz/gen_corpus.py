#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of the `frame` fuzz target.

Each file is a byte stream of SPOP frames, valid or deliberately broken.
The encoder here is independent of agent/protocol/spop.c, so the seeds also check
the C codec against a second reading of the protocol.

    python3 tests/fuzz/gen_corpus.py [OUTDIR]   (default: corpus/frame)
"""
import os
import struct
import sys

# Frame types
HAPROXY_HELLO, HAPROXY_DISCONNECT, NOTIFY = 1, 2, 3
AGENT_HELLO, AGENT_DISCONNECT, ACK = 101, 102, 103
FIN = 0x1

# Typed data types
T_NULL, T_BOOL, T_INT32, T_UINT32, T_INT64, T_UINT64 = 0, 1, 2, 3, 4, 5
T_IPV4, T_IPV6, T_STR, T_BIN = 6, 7, 8, 9


def varint(i):
    """The additive SPOP varint."""
    if i < 0 or i >= 1 << 64:
        raise ValueError(i)
    if i < 240:
        return bytes([i])
    out = [(i | 0xF0) & 0xFF]
    i = (i - 240) >> 4
    while i >= 128:
        out.append((i | 0x80) & 0xFF)
        i = (i - 128) >> 7
    out.append(i)
    return bytes(out)


def name(s):
    b = s.encode() if isinstance(s, str) else s
    return varint(len(b)) + b


def data(t, v=None):
    if t == T_NULL:
        return bytes([T_NULL])
    if t == T_BOOL:
        return bytes([T_BOOL | (0x10 if v else 0)])
    if t in (T_INT32, T_INT64):
        return bytes([t]) + varint(v & 0xFFFFFFFFFFFFFFFF)
    if t in (T_UINT32, T_UINT64):
        return bytes([t]) + varint(v)
    if t == T_IPV4:
        return bytes([t]) + bytes(v)
    if t == T_IPV6:
        return bytes([t]) + bytes(v)
    if t in (T_STR, T_BIN):
        return bytes([t]) + name(v)
    raise ValueError(t)


def kv(items):
    return b"".join(name(k) + data(t, v) for k, t, v in items)


def frame(ftype, payload, sid=0, fid=0, flags=FIN):
    body = bytes([ftype]) + struct.pack(">I", flags) + varint(sid) + varint(fid)
    body += payload
    return struct.pack(">I", len(body)) + body


def message(msg, args):
    return name(msg) + bytes([len(args)]) + kv(args)


def haproxy_hello(max_frame, caps, healthcheck=False, engine=None):
    items = [("supported-versions", T_STR, "2.0"),
             ("max-frame-size", T_UINT32, max_frame),
             ("capabilities", T_STR, caps)]
    if healthcheck:
        items.append(("healthcheck", T_BOOL, True))
    if engine is not None:
        items.append(("engine-id", T_STR, engine))
    return frame(HAPROXY_HELLO, kv(items))


def check_rate(sid, fid, ip, method, path, api_key=None, in_use=3):
    args = [("ip", T_IPV4, ip),
            ("method", T_STR, method),
            ("path", T_STR, path),
            ("api_key", T_NULL, None) if api_key is None
            else ("api_key", T_STR, api_key),
            ("be_in_use", T_INT64, in_use)]
    return frame(NOTIFY, message("check-rate", args), sid, fid)


def disconnect(ftype, status, msg):
    return frame(ftype, kv([("status-code", T_UINT32, status),
                            ("message", T_STR, msg)]))


def set_var(scope, var, t, v):
    return bytes([1, 3, scope]) + name(var) + data(t, v)


HEALTHCHECK = bytes.fromhex(
    "0000004e010000000100"
    "00"
    "12") + b"supported-versions" + bytes.fromhex("0803") + b"2.0" + \
    bytes.fromhex("0e") + b"max-frame-size" + bytes.fromhex("03fcf006") + \
    bytes.fromhex("0c") + b"capabilities" + bytes.fromhex("0800") + \
    bytes.fromhex("0b") + b"healthcheck" + bytes.fromhex("11")


def seeds():
    hc = haproxy_hello(16380, "", healthcheck=True)
    assert hc == HEALTHCHECK and len(hc) == 82
    hello = haproxy_hello(16380, "pipelining,async",
                          engine="0e6a2f3c-5d1b-4c7e-9a40-2b8f1d6e7a19")
    notify = check_rate(1, 1, [127, 0, 0, 1], "GET", "/api/v1/items")
    notify_key = check_rate(7, 1, [10, 1, 2, 3], "POST", "/login",
                            api_key="k-123", in_use=-1)
    all_types = frame(NOTIFY, message("all-types", [
        ("n", T_NULL, None), ("t", T_BOOL, True), ("f", T_BOOL, False),
        ("i32", T_INT32, -1), ("u32", T_UINT32, 16380),
        ("i64", T_INT64, -(1 << 63)), ("u64", T_UINT64, (1 << 64) - 1),
        ("v4", T_IPV4, [192, 168, 0, 1]),
        ("v6", T_IPV6, [0x20, 1, 0x0d, 0xb8] + [0] * 11 + [1]),
        ("s", T_STR, ""), ("b", T_BIN, b"\x00\xff\x80")]), 9, 2)
    ack = frame(ACK, set_var(2, "rl.allowed", T_BOOL, True)
                + set_var(2, "rl.remaining", T_INT64, 41)
                + bytes([2, 2, 2]) + name("rl.retry"), 1, 1)
    yield "hc_hello", hc
    yield "hello", hello
    yield "hello_min_frame", haproxy_hello(256, "pipelining")
    yield "agent_hello", frame(AGENT_HELLO, kv([
        ("version", T_STR, "2.0"), ("max-frame-size", T_UINT32, 16380),
        ("capabilities", T_STR, "pipelining")]))
    yield "notify_check_rate", notify
    yield "notify_all_types", all_types
    yield "notify_zero_msgs", frame(NOTIFY, b"", 3, 1)
    yield "notify_zero_args", frame(NOTIFY, message("ping", []), 5, 1)
    yield "notify_two_msgs", frame(NOTIFY, message("a", []) + message(
        "check-rate", [("ip", T_IPV4, [1, 2, 3, 4])]), 11, 1)
    yield "notify_release", frame(NOTIFY, message("release", [
        ("slot", T_STR, "free/" + "0f" * 16), ("request_id", T_STR, "7F000001:C350_7F000001")]),
        13, 1)
    yield "ack", ack
    yield "disconnect", disconnect(HAPROXY_DISCONNECT, 0, "normal")
    yield "agent_disconnect", disconnect(AGENT_DISCONNECT, 3,
                                         "frame is too big")
    yield "pipelined", hello + notify + notify_key + check_rate(
        2 ** 20 + 1, 1, [8, 8, 4, 4], "GET", "/") + all_types + \
        disconnect(HAPROXY_DISCONNECT, 2, "a timeout occurred")
    # Broken streams.
    yield "bad_truncated", notify[:-5]
    yield "bad_truncated_hdr", notify[:3]
    yield "bad_oversized", struct.pack(">I", 0x7FFFFFFF) + notify[4:]
    yield "bad_just_over", struct.pack(">I", 16385) + b"\x03" * 40
    yield "bad_short_len", struct.pack(">I", 3) + b"\x03\x00\x00\x00"
    yield "bad_varint11", struct.pack(">I", 20) + bytes([NOTIFY]) + \
        struct.pack(">I", FIN) + b"\xff" * 10 + b"\x00" * 5
    # 2^64-1 + 2^60: a 10-byte varint over the 64-bit range.
    yield "bad_varint_overflow", frame(NOTIFY, name("x") + b"\x01" + name("v") +
                                       bytes([T_UINT64]) +
                                       bytes.fromhex("fff0fefefefefefefe0f"), 1, 1)
    yield "bad_type_nibble", frame(NOTIFY, name("x") + b"\x01" + name("a") +
                                   b"\x0c", 1, 1)
    yield "bad_bool_flag", frame(HAPROXY_HELLO, hc[11:-1] + b"\x21")
    yield "bad_nargs", frame(NOTIFY, name("check-rate") + b"\x05" +
                             name("ip") + data(T_IPV4, [1, 1, 1, 1]), 1, 1)
    yield "bad_str_len", frame(NOTIFY, name("m") + b"\x01" + name("s") +
                               b"\x08" + varint(1000) + b"abc", 1, 1)
    yield "bad_hello_version", frame(HAPROXY_HELLO, kv([
        ("supported-versions", T_STR, "1.0, 2.00"),
        ("max-frame-size", T_UINT32, 16380), ("capabilities", T_STR, "")]))
    yield "bad_hello_prefix_key", frame(HAPROXY_HELLO, kv([
        ("supported-versions", T_STR, "2.0"),
        ("max-frame-size-x", T_UINT32, 16380),
        ("capabilities", T_STR, "")]))
    yield "bad_hello_frame_size", frame(HAPROXY_HELLO, kv([
        ("supported-versions", T_STR, "2.0"),
        ("max-frame-size", T_INT64, -16380),
        ("capabilities", T_STR, "")]))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "frame")
    os.makedirs(out, exist_ok=True)
    n = 0
    for fname, blob in seeds():
        with open(os.path.join(out, fname + ".bin"), "wb") as fp:
            fp.write(blob)
        n += 1
    print("wrote %d seeds to %s" % (n, out))


if __name__ == "__main__":
    main()
