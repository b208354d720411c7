"""rdzvd's HTTP endpoint under a slowloris: the kubelet's tokenless probes
(/healthz, /readyz) and Prometheus' /metrics are answered while hundreds of
connections trickle their headers (rendezvous/net/http_slots.h)."""
import re
import socket
import threading
import time

from faultlib import Server, TAP, wait_for


def probe(port, path, timeout=1.0):
    """One probe as the kubelet makes it (timeoutSeconds 1): the status
    code, or None if it did not answer in time."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"GET %s HTTP/1.1\r\nHost: rdzvd\r\nConnection: close\r\n\r\n"
                      % path.encode())
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            m = re.match(rb"HTTP/1\.[01] (\d+)", data)
            return int(m.group(1)) if m else None
    except OSError:
        return None


class Slowloris:
    """n connections, each sending a request line and then one header line
    every interval seconds, never the blank line; a connection rdzvd closes
    is opened again at once, as a determined attacker would."""

    def __init__(self, port, n, interval):
        self.port, self.n, self.interval = port, n, interval
        self.socks = []
        self.reopened = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: rdzvd\r\n")
        return s

    def start(self):
        for _ in range(self.n):
            self.socks.append(self.open())
        self.thread.start()

    def run(self):
        while not self.stop.wait(self.interval):
            for i, s in enumerate(self.socks):
                try:
                    s.sendall(b"X-a: b\r\n")
                except OSError:
                    s.close()
                    try:
                        self.socks[i] = self.open()
                        self.reopened += 1
                    except OSError:
                        pass

    def close(self):
        self.stop.set()
        self.thread.join(timeout=10)
        for s in self.socks:
            s.close()


def case_http_slowloris(opts):
    """200 connections trickle a header line every 2 s (libmicrohttpd's idle
    timeout is 10 s) and reconnect when closed: 20 probes each of /healthz,
    /readyz and /metrics, each given the kubelet's 1 s, are all answered
    200."""
    srv = Server(opts, extra=("--http", "127.0.0.1:0"))
    attack = None
    try:
        port = int(wait_for(lambda: re.search(r"http port=(\d+)", srv.log()), "the http port")
                   .group(1))
        before = [probe(port, path) for path in ("/healthz", "/readyz", "/metrics")]
        TAP.ok(before == [200] * 3, "before: /healthz, /readyz and /metrics answer %s" % before)
        attack = Slowloris(port, 200, 2.0)
        attack.start()
        time.sleep(3)                  # every slow connection is in, and trickling
        answers = {"/healthz": [], "/readyz": [], "/metrics": []}
        for _ in range(20):
            for path in answers:
                answers[path].append(probe(port, path))
            time.sleep(0.25)
        for path, got in answers.items():
            ok = sum(code == 200 for code in got)
            TAP.ok(ok == len(got), "%d of %d %s requests answered 200 in 1 s while 200 connections "
                   "trickle headers (%d reopened after rdzvd closed them)"
                   % (ok, len(got), path, attack.reopened))
        TAP.ok(srv.proc.poll() is None, "rdzvd is still running")
    finally:
        if attack:
            attack.close()
        srv.close()
