"""Small HTTP engines for the tests, run as `python3 -c ENGINE` under the
agent (and the shim): each serves on RDZV_PORT_API as vLLM would."""

# The engine: RDZV_PORT_API (bound under the shim); /health answers what
# HEALTH_FILE+RANK says (200 when absent), /count how many requests it
# served, anything else is a request it serves and counts. It listens on
# ENGINE_HOST (127.0.0.1 unless set).
COUNTING = r"""
import http.server, os, threading
path = os.environ["HEALTH_FILE"] + os.environ["RDZV_RANK"]
lock, served = threading.Lock(), [0]
class H(http.server.BaseHTTPRequestHandler):
    def answer(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/health":
            try:
                code = int(open(path).read().strip())
            except (OSError, ValueError):
                code = 200
            return self.answer(code, b"")
        if self.path == "/count":
            return self.answer(200, str(served[0]).encode())
        with lock:
            served[0] += 1
        self.answer(200, os.environ["RDZV_RANK"].encode())
    def log_message(self, *args):
        pass
s = http.server.ThreadingHTTPServer((os.environ.get("ENGINE_HOST", "127.0.0.1"),
                                      int(os.environ["RDZV_PORT_API"])), H)
s.daemon_threads = True
s.serve_forever()
"""
