"""A small OpenAI-compatible chat completions server for tests: real HTTP on a free local port.

``script`` is a list of replies used in order (the last one repeats): a string is answered as
the assistant's message, an int is answered as that HTTP status, ``("sleep", s, text)`` answers
after ``s`` seconds. Every request body and Authorization header is recorded.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.requests.append(body)
                    fake.auth.append(self.headers.get("Authorization"))
                    reply = fake.script[min(len(fake.requests) - 1, len(fake.script) - 1)]
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                counted = [True]

                def leave():
                    # A request leaves the count before its first reply byte is written: the client may send its
                    # next request as soon as it has read this reply, before this thread would reach a finally.
                    if counted:
                        counted.clear()
                        with fake._lock:
                            fake.in_flight -= 1
                try:
                    if isinstance(reply, tuple) and reply[0] == "sleep":
                        time.sleep(reply[1])
                        reply = reply[2]
                    if self.path != "/v1/chat/completions":
                        reply = 404
                    if isinstance(reply, int):
                        leave()
                        self.send_response(reply)
                        self.end_headers()
                        return
                    if callable(reply):
                        reply = reply(body)
                    data = json.dumps({"id": "x", "object": "chat.completion", "model": body.get("model"),
                                       "choices": [{"index": 0, "finish_reason": "stop",
                                                    "message": {"role": "assistant", "content": reply}}],
                                       # as OpenAI-compatible servers report it (a word a token, here)
                                       "usage": {"total_tokens": len(json.dumps(body).split()) + len(str(reply).split())}}).encode()
                    leave()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    leave()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
