#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A slow HTTP application for the demo: every request takes DELAY seconds,
so a few dozen concurrent requests take every connection the backend
allows (maxconn in haproxy.cfg) and HAProxy's load figure rises. Standard library
only; the loopback demo starts it, and the compose stack runs it with
Debian's python3 (docker/Dockerfile.backend).

    python3 tools/demo/backend.py --listen 127.0.0.1:8000 --delay 0.3

With port 0 the system picks a free port; the first line of output names it
("backend: listening on 127.0.0.1:PORT, ...").

Answers 200 with a one-line JSON body naming the method and path. A request
with the header X-Delay: SECONDS (at most 30) takes that long instead: the
demo's load generator holds connections with it. A request with the header
X-Release: 1 is answered at once, and so is every request still waiting:
the demo ends its held load with it (through HAProxy, as a payment, never
shed), so that the load stays the same, connection for connection, for
as long as the demo looks at it.
"""

import argparse
import http.server
import json
import signal
import sys
import threading


MAX_DELAY = 30.0


class Waits:
    """Requests waiting their delay, all answered at once by release()."""

    def __init__(self):
        self.cond = threading.Condition()
        self.released = 0  # how many times release() was called

    def wait(self, seconds):
        with self.cond:
            seen = self.released
            self.cond.wait_for(lambda: self.released != seen, timeout=seconds)

    def release(self):
        with self.cond:
            self.released += 1
            self.cond.notify_all()


def request_delay(header, default):
    """The delay a request asks for in X-Delay, within [0, MAX_DELAY]; the
    default when it asks for none or for something unreadable."""
    if header is None:
        return default
    try:
        d = float(header)
    except ValueError:
        return default
    if d != d:  # NaN
        return default
    return min(max(d, 0.0), MAX_DELAY)


def make_handler(delay):
    waits = Waits()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length > 0:
                self.rfile.read(min(length, 1 << 20))
            if self.headers.get("X-Release") == "1":
                waits.release()
            else:
                waits.wait(request_delay(self.headers.get("X-Delay"), delay))
            body = (json.dumps({"ok": True, "method": self.command, "path": self.path})
                    + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

        def log_message(self, *args):
            pass

    return Handler


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # HAProxy opens dozens of connections at once under load; the default
    # backlog of 5 would make some of them wait for a SYN retry.
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass  # a peer gone mid-request is normal when the demo stops


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:8000", help="ADDR:PORT")
    ap.add_argument("--delay", type=float, default=0.3, help="seconds per request")
    args = ap.parse_args()
    host, _, port = args.listen.rpartition(":")
    server = Server((host.strip("[]"), int(port)), make_handler(args.delay))
    # SIGTERM (docker stop, the demo's cleanup) ends it like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    bound_host, bound_port = server.server_address[:2]
    print("backend: listening on %s:%d, %.2f s per request" % (bound_host, bound_port, args.delay),
          flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
