# SPDX-License-Identifier: Apache-2.0
"""Certificates for the TLS tests, made with the `openssl` command in a
directory of the test's: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, a CA nobody trusts, an expired server
certificate (notAfter before notBefore, `openssl x509 -days -1`).

    certs = Certs()                              # a directory of its own
    certs = Certs(h.dir)
    RedisServer(h, tls=certs)                    # --tls-port, certs' files
    Client(host, port, tls=certs.client_context())
    ["redis-cli"] + certs.cli_args() + [...]

Each file is made once per directory; renew() makes the server and client
certificates anew (new keys, same names) for rotation tests.
"""

import os
import shutil
import ssl
import subprocess
import tempfile

import harness


def _openssl(*args, cwd):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (args[0], r.stdout.decode()[-2000:]))


# P-256 keys: a Certs (six keys) is made in a quarter of a second, where
# RSA keys took more than one and a half
NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


class Certs:
    def __init__(self, parent=None, name="tls"):
        """In parent/name, or (parent None) a temporary directory that
        remove() deletes (a module fixture's)."""
        if shutil.which("openssl") is None:
            raise harness.Skip("openssl is not installed")
        if parent is None:
            self.dir = tempfile.mkdtemp(prefix="rl-e2e-tls-")
        else:
            self.dir = os.path.join(parent, name)
            os.makedirs(self.dir, exist_ok=True)
        self.generation = 0
        self.ca, self.ca_key = self._ca("ca", "Test Redis CA")
        self.wrong_ca, self.wrong_ca_key = self._ca("wrong-ca", "Nobody's CA")
        self.renew()
        self.expired, self.expired_key = self._issue(
            "expired", "localhost", "DNS:localhost,IP:127.0.0.1", days=-1)
        self.other, self.other_key = self._issue(
            "other", "other.example", "DNS:other.example")

    def close(self):
        return []

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def _ca(self, name, cn):
        crt, key = self.path(name + ".crt"), self.path(name + ".key")
        _openssl("req", "-x509", *NEW_KEY, "-keyout", key, "-out", crt,
                 "-days", "30", "-subj", "/CN=%s" % cn, cwd=self.dir)
        return crt, key

    def _issue(self, name, cn, san, days=30, client=False, ca="ca", crt=None, key=None):
        """A certificate signed by `ca` ("ca" or "wrong"), at crt and key
        (default: in the directory, after name)."""
        crt, key = crt or self.path(name + ".crt"), key or self.path(name + ".key")
        csr, ext = self.path(name + ".csr"), self.path(name + ".ext")
        ca_crt, ca_key = (self.ca, self.ca_key) if ca == "ca" else (self.wrong_ca,
                                                                   self.wrong_ca_key)
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\n")
            if san:
                f.write("subjectAltName=%s\n" % san)
            # (a Cluster's nodes present theirs as clients too, on the bus)
            f.write("extendedKeyUsage=%s\n" % ("clientAuth" if client else "serverAuth,clientAuth"))
        _openssl("req", *NEW_KEY, "-keyout", key, "-out", csr,
                 "-subj", "/CN=%s" % cn, cwd=self.dir)
        _openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key,
                 "-CAcreateserial", "-out", crt, "-days", str(days), "-extfile", ext,
                 cwd=self.dir)
        os.chmod(key, 0o600)
        return crt, key

    def renew(self):
        """The server and client certificates, made anew (new keys), at the
        same paths as before: what a renewal leaves for a reload."""
        self.generation += 1
        self.server, self.server_key = self._issue(
            "server", "localhost", "DNS:localhost,IP:127.0.0.1")
        self.client, self.client_key = self._issue("client", "spoa-ratelimit", None,
                                                   client=True)

    def copy_client(self, crt, key):
        """The client certificate and key copied to crt and key."""
        shutil.copyfile(self.client, crt)
        shutil.copyfile(self.client_key, key)
        os.chmod(key, 0o600)

    def issue_client(self, crt, key, ca="ca"):
        """A new client certificate and key, signed by `ca`, written at crt
        and key (a renewal in place)."""
        self._issue("renewed", "spoa-ratelimit", None, client=True, ca=ca, crt=crt, key=key)

    def redis_args(self, auth_clients=False, cert=None, key=None):
        """redis-server's (and redis-sentinel's) TLS files, as arguments."""
        return ["--tls-cert-file", cert or self.server, "--tls-key-file", key or self.server_key,
                "--tls-ca-cert-file", self.ca,
                "--tls-auth-clients", "yes" if auth_clients else "no"]

    def conf_lines(self, auth_clients=False):
        """The same as configuration file lines (redis-sentinel)."""
        a = self.redis_args(auth_clients)
        return ["%s %s" % (a[i][2:], a[i + 1]) for i in range(0, len(a), 2)]

    def cli_args(self):
        """redis-cli's: TLS, the CA, the client certificate."""
        return ["--tls", "--cacert", self.ca, "--cert", self.client, "--key", self.client_key]

    def agent_args(self, client_cert=False):
        """The agent's: the CA, and the client certificate when asked."""
        args = ["--redis-tls-ca", self.ca]
        if client_cert:
            args += ["--redis-tls-cert", self.client, "--redis-tls-key", self.client_key]
        return args

    def client_context(self):
        """The tests' own RESP clients: any server of theirs, client
        certificate presented (the agent is what verifies servers here)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(self.client, self.client_key)
        return ctx
