#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Serves a small HTTP application on a loopback port and sends requests to
an HAProxy whose frontend checks them with the agent (the installed
basic.cfg, RL_APP pointing at the application): the check that HAProxy and
the installed agent work together (scripts/deb-docker-test.sh). The agent
runs with a small limit (--limit 2/1m): a request it admitted comes back
200 from the application with RateLimit-Policy, and a later one 429 with
Retry-After. Exit status 1 when either does not come within the time
given.

    python3 scripts/haproxy-limit-check.py FRONTEND_PORT APP_PORT [SECONDS]
"""

import http.client
import http.server
import sys
import threading
import time


class App(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"app\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def get(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/", headers={"X-Api-Key": "not-in-the-map"})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def main():
    front, app = int(sys.argv[1]), int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 30
    server = http.server.ThreadingHTTPServer(("127.0.0.1", app), App)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    admitted = refused = None
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline and not (admitted and refused):
        try:
            status, headers, body = get(front)
        except OSError as e:  # HAProxy not listening yet
            last = e
            time.sleep(0.1)
            continue
        last = (status, headers, body)
        if status == 200 and body == b"app\n" and "ratelimit-policy" in headers:
            admitted = admitted or (status, headers.get("ratelimit-policy"))
        elif status == 429 and "retry-after" in headers and admitted:
            refused = (status, headers.get("retry-after"), body.decode(errors="replace"))
        time.sleep(0.05)
    server.shutdown()
    if not (admitted and refused):
        print("haproxy-limit-check: admitted %r, refused %r; last answer %r"
              % (admitted, refused, last), file=sys.stderr)
        return 1
    print("  200 RateLimit-Policy: %s" % admitted[1])
    print("  429 Retry-After: %s %s" % refused[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
