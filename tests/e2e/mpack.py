# SPDX-License-Identifier: Apache-2.0
"""mpack.py: a minimal msgpack encoder and decoder (standard library only).

Types: None <-> nil, bool <-> bool, int <-> int (any width the format has,
negative included), float <-> float64 (float32 is decoded too), str <-> str,
bytes <-> bin, list/tuple -> array -> list, dict <-> map. Extension types
are refused. unpackb() raises ValueError on truncated or trailing bytes.
"""

import struct


def packb(obj):
    out = bytearray()
    _pack(obj, out)
    return bytes(out)


def _len_header(out, n, fix_base, fix_max, c8, c16, c32):
    if n <= fix_max:
        out.append(fix_base | n)
    elif c8 is not None and n <= 0xFF:
        out += bytes((c8, n))
    elif n <= 0xFFFF:
        out.append(c16)
        out += struct.pack(">H", n)
    elif n <= 0xFFFFFFFF:
        out.append(c32)
        out += struct.pack(">I", n)
    else:
        raise ValueError("object too long for msgpack")


def _pack(obj, out):
    if obj is None:
        out.append(0xC0)
    elif obj is True:
        out.append(0xC3)
    elif obj is False:
        out.append(0xC2)
    elif isinstance(obj, int):
        if 0 <= obj <= 0x7F:
            out.append(obj)
        elif -32 <= obj < 0:
            out.append(obj & 0xFF)
        elif 0 <= obj <= 0xFF:
            out += bytes((0xCC, obj))
        elif 0 <= obj <= 0xFFFF:
            out.append(0xCD)
            out += struct.pack(">H", obj)
        elif 0 <= obj <= 0xFFFFFFFF:
            out.append(0xCE)
            out += struct.pack(">I", obj)
        elif 0 <= obj <= 0xFFFFFFFFFFFFFFFF:
            out.append(0xCF)
            out += struct.pack(">Q", obj)
        elif -0x80 <= obj < 0:
            out.append(0xD0)
            out += struct.pack(">b", obj)
        elif -0x8000 <= obj < 0:
            out.append(0xD1)
            out += struct.pack(">h", obj)
        elif -0x80000000 <= obj < 0:
            out.append(0xD2)
            out += struct.pack(">i", obj)
        elif -0x8000000000000000 <= obj < 0:
            out.append(0xD3)
            out += struct.pack(">q", obj)
        else:
            raise ValueError("integer out of msgpack range: %d" % obj)
    elif isinstance(obj, float):
        out.append(0xCB)
        out += struct.pack(">d", obj)
    elif isinstance(obj, str):
        b = obj.encode("utf-8")
        _len_header(out, len(b), 0xA0, 31, 0xD9, 0xDA, 0xDB)
        out += b
    elif isinstance(obj, (bytes, bytearray)):
        _len_header(out, len(obj), 0, -1, 0xC4, 0xC5, 0xC6)
        out += obj
    elif isinstance(obj, (list, tuple)):
        _len_header(out, len(obj), 0x90, 15, None, 0xDC, 0xDD)
        for x in obj:
            _pack(x, out)
    elif isinstance(obj, dict):
        _len_header(out, len(obj), 0x80, 15, None, 0xDE, 0xDF)
        for k, v in obj.items():
            _pack(k, out)
            _pack(v, out)
    else:
        raise TypeError("cannot pack %s" % type(obj).__name__)


_FIXED = {
    0xCA: (">f", 4), 0xCB: (">d", 8),
    0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
    0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8),
}
_LEN = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4,
        0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4}
_LENFMT = {1: ">B", 2: ">H", 4: ">I"}


class _Reader:
    def __init__(self, data):
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n):
        if n > len(self.data) - self.pos:
            raise ValueError("truncated msgpack at byte %d" % self.pos)
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def value(self, depth=0):
        if depth > 64:
            raise ValueError("msgpack nested too deep")
        c = self.take(1)[0]
        if c <= 0x7F:
            return c
        if c >= 0xE0:
            return c - 0x100
        if 0xA0 <= c <= 0xBF:
            return self._str(c & 0x1F)
        if 0x90 <= c <= 0x9F:
            return self._array(c & 0x0F, depth)
        if 0x80 <= c <= 0x8F:
            return self._map(c & 0x0F, depth)
        if c == 0xC0:
            return None
        if c == 0xC2:
            return False
        if c == 0xC3:
            return True
        if c in _FIXED:
            fmt, n = _FIXED[c]
            return struct.unpack(fmt, self.take(n))[0]
        if c in _LEN:
            w = _LEN[c]
            n = struct.unpack(_LENFMT[w], self.take(w))[0]
            if c in (0xD9, 0xDA, 0xDB):
                return self._str(n)
            if c in (0xC4, 0xC5, 0xC6):
                return bytes(self.take(n))
            if c in (0xDC, 0xDD):
                return self._array(n, depth)
            return self._map(n, depth)
        raise ValueError("unsupported msgpack type byte 0x%02x" % c)

    def _str(self, n):
        return bytes(self.take(n)).decode("utf-8", "surrogateescape")

    def _array(self, n, depth):
        return [self.value(depth + 1) for _ in range(n)]

    def _map(self, n, depth):
        d = {}
        for _ in range(n):
            k = self.value(depth + 1)
            d[k] = self.value(depth + 1)
        return d


def unpackb(data):
    r = _Reader(data)
    v = r.value()
    if r.pos != len(r.data):
        raise ValueError("%d trailing bytes after msgpack value" % (len(r.data) - r.pos))
    return v
