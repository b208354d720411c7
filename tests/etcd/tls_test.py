#!/usr/bin/env python3
"""rdzvd --etcd over TLS: an etcd that serves https and wants client
certificates (--client-cert-auth), a CA and certificates made here with
openssl. With --etcd-ca/--etcd-cert/--etcd-key rdzvd leads, serves and
replays its state after a restart; without its certificate, or trusting
another CA, it refuses to start and says why. One line per check
(rdzvtest).

Needs RDZVD, RDZV, openssl and etcd (Debian's etcd-server); skips without."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import etcd_cluster
import rdzvtest
from replicas import RDZVD, skipped, http_status, rdzv


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """ca.crt, server.{crt,key} for 127.0.0.1, client.{crt,key}, and other-ca.crt."""
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                f"/CN=rdzv test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.crt", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout",
                f"{who}.key", "-out", f"{who}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{who}.ext", "-out", f"{who}.crt",
                cwd=d)


def main():
    if skipped():
        return rdzvtest.SKIP
    if not shutil.which("openssl"):
        return rdzvtest.skip_all("openssl not installed")
    tap = rdzvtest.Report()
    with tempfile.TemporaryDirectory(prefix="rdzv-etcd-tls-") as d:
        make_pki(d)
        client_port, peer_port = rdzvtest.free_port(), rdzvtest.free_port()
        url = f"https://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        p = lambda name: os.path.join(d, name)  # noqa: E731
        log = open(p("etcd.log"), "w")
        etcd = subprocess.Popen(
            [etcd_cluster.ETCD, "--name", "tls", "--data-dir", p("data"),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"tls={peer}", "--cert-file", p("server.crt"),
             "--key-file", p("server.key"), "--trusted-ca-file", p("ca.crt"),
             "--client-cert-auth"], stdout=subprocess.DEVNULL, stderr=log,
            start_new_session=True)
        try:
            base = ["--etcd", url, "--etcd-prefix", "/tls", "--no-nccl", "--etcd-lease", "2"]
            tls = ["--etcd-ca", p("ca.crt"), "--etcd-cert", p("client.crt"),
                   "--etcd-key", p("client.key")]
            port = rdzvtest.free_port()
            r = rdzvtest.Rdzvd(RDZVD, d, *base, *tls, "--http", str(port), start=False)
            # etcd takes a moment to serve: rdzvd checks it at start.
            end = time.monotonic() + 30
            while True:
                proc = r.spawn()
                time.sleep(1)
                if proc.poll() is None or time.monotonic() > end:
                    break
            rdzvtest.wait_for(lambda: http_status(port, "/readyz") == 200, "rdzvd to lead")
            endpoint = rdzvtest.wait_for(
                lambda: os.path.exists(r.ep_file) and open(r.ep_file).read().strip(),
                "the endpoint file")
            r.endpoint = endpoint
            tap.ok(True, "with the CA and a client certificate rdzvd leads over https")
            rc, _, err = rdzv("join", "--server", endpoint, "--group", "t", "--world", "1",
                              "--rank", "0", "--timeout", "20")
            rc2, _, err2 = rdzv("kv", "put", "--server", endpoint, "--group", "t", "--epoch",
                                "1", "k", "over-tls")
            tap.ok(rc == 0 and rc2 == 0, "a join and a put are acknowledged", err + err2)
            r.stop()
            r.start()
            rdzvtest.wait_for(lambda: http_status(port, "/readyz") == 200, "rdzvd to lead again")
            rc, out, err = rdzv("kv", "get", "--server", r.endpoint, "--group", "t", "--epoch",
                                "1", "k")
            tap.ok(rc == 0 and out.strip() == "over-tls", "restarted, it replays from etcd over TLS",
                   err)
            r.stop()
            for what, flags in (("without its client certificate", ["--etcd-ca", p("ca.crt")]),
                                ("trusting another CA", ["--etcd-ca", p("other-ca.crt"),
                                                         "--etcd-cert", p("client.crt"),
                                                         "--etcd-key", p("client.key")])):
                res = subprocess.run([RDZVD, "--bind", "tcp://127.0.0.1:*", "--state-dir",
                                      p("unused"), *base, *flags], capture_output=True,
                                     text=True, timeout=30)
                tap.ok(res.returncode == 1 and url in res.stderr,
                       f"{what}, rdzvd refuses to start and names etcd",
                       f"{res.returncode}: {res.stderr.strip()[-300:]}")
        finally:
            etcd.kill()
            etcd.wait()
            log.close()
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
