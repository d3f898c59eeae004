"""A small server speaking the OpenAI chat-completions protocol on 127.0.0.1, for tests of
the OpenAI-compatible provider. It answers like the FakeLLM, and injects faults from a
script: each request pops the next fault (or none) for the statement it is about."""

from __future__ import annotations

import json
import math
import re
import struct
import sys
import threading
import time
import zlib
from base64 import b64encode
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from conftest import FakeLLM

Fault = str | None
"""None (answer), "429", "429-retry-after", "500", "503", "401", "slow", "malformed"."""


@dataclass
class Script:
    faults: list[Fault] = field(default_factory=list)
    """Faults for the next requests, in order; then every request is answered."""
    fault_for: Callable[[str], Fault] | None = None
    """A fault decided by the statement the request is about (after the scripted ones)."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    delay: float = 0.0
    embed_delay: float = 0.0
    """Seconds each embeddings request takes (a remote server's round trip)."""
    float_vectors: bool = False
    """Embeddings as lists of numbers even when base64 is asked (as some servers do)."""
    spans: list[tuple[float, float]] = field(default_factory=list)
    """When each chat request arrived and was answered (``time.monotonic``)."""
    yes: float | None = None
    """A request for ``logprobs`` gets a first token "Yes" with this probability and "No"
    with the rest (as OpenAI's ``top_logprobs`` lists them); None: refused with HTTP 400,
    as an endpoint without log-probabilities does."""


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
                  ) -> None:
            data = json.dumps(body).encode()
            self._answered()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        counted = False
        """This chat request is counted in ``in_flight``."""

        def _answered(self) -> None:
            """The request stops counting as in flight before its reply goes: the
            client may send its next one as soon as the reply is read, before this thread
            runs again."""
            if self.counted:
                with script.lock:
                    script.in_flight -= 1
                self.counted = False

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            request = json.loads(self.rfile.read(length))
            if self.path.endswith("/embeddings"):
                with script.lock:
                    script.requests.append(request)
                time.sleep(script.embed_delay)
                texts = request["input"]
                self._send(200, {
                    "object": "list", "model": request["model"],
                    "data": [{"object": "embedding", "index": i, "embedding": _embed(
                        t, base64=request.get("encoding_format") == "base64"
                        and not script.float_vectors)} for i, t in enumerate(texts)],
                    "usage": {"prompt_tokens": 10, "total_tokens": 10},
                })
                return
            arrived = time.monotonic()
            with script.lock:
                script.requests.append(request)
                script.in_flight += 1
                script.max_in_flight = max(script.max_in_flight, script.in_flight)
                self.counted = True
                fault = script.faults.pop(0) if script.faults else None
            try:
                user = request["messages"][1]["content"]  # the task, also under a repair
                if fault is None and script.fault_for is not None:
                    fault = script.fault_for(_statement(request))
                time.sleep(script.delay)
                self._answer(fault, request, user)
            finally:
                self._answered()
                with script.lock:
                    script.spans.append((arrived, time.monotonic()))

        def _answer(self, fault: Fault, request: dict[str, Any], user: str) -> None:
            error = {"error": {"message": f"injected {fault}", "type": "test"}}
            if fault == "429":
                self._send(429, error)
            elif fault == "429-retry-after":
                self._send(429, error, {"Retry-After": "1"})
            elif fault in ("500", "503"):
                self._send(int(fault), error)
            elif fault == "401":
                self._send(401, error)
            elif fault == "slow":
                time.sleep(3)
                self._send(200, _completion("too late"))
            elif fault == "malformed":
                self._send(200, _completion("Sure! Here is what you asked for."))
            elif request.get("logprobs"):
                if script.yes is None:
                    self._send(400, {"error": {"message": "logprobs are not supported",
                                               "type": "invalid_request_error"}})
                    return
                reply = _completion("Yes" if script.yes >= 0.5 else "No")
                tops = [{"token": "Yes", "logprob": math.log(max(script.yes, 1e-9))},
                        {"token": "No", "logprob": math.log(max(1 - script.yes, 1e-9))},
                        {"token": "Maybe", "logprob": -9.0}]
                reply["choices"][0]["logprobs"] = {"content": [{**max(
                    tops, key=lambda t: t["logprob"]), "top_logprobs": tops}]}
                self._send(200, reply)
            else:
                self._send(200, _completion(FakeLLM._reply(user)))

    return Handler


EMBED_DIM = 64


def _embed(text: str, *, base64: bool = False) -> list[float] | str:
    """A bag of hashed words: texts sharing words get similar vectors (with ``base64``,
    its float32 bytes in base64, as OpenAI's API sends them when asked)."""
    vector = [0.0] * EMBED_DIM
    for word in re.findall(r"\w+", text.lower()):
        vector[zlib.crc32(word.encode()) % EMBED_DIM] += 1.0
    if base64:
        return b64encode(struct.pack(f"<{EMBED_DIM}f", *vector)).decode()
    return vector


def _statement(request: dict[str, Any]) -> str:
    """The statement a question prompt is about (the whole first user message otherwise)."""
    first = request["messages"][1]["content"]
    return first.split("Statement:", 1)[-1].split("\n", 1)[0].strip()


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
        "model": "test-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70},
    }


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # (socketserver's 5 drops connections when 64 open at once)
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client went away (a cancelled call, a test that ended): no noise
        super().handle_error(request, client_address)  # (in another test's output)


@contextmanager
def serve(script: Script) -> Iterator[str]:
    """Serve on a free port of 127.0.0.1; yields the base URL (``.../v1``)."""
    server = _Server(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    """``python tests/openai_server.py --delay S [--embed-delay S] --spans FILE``: serve in
    a process of its
    own (for benchmarks, so the client's CPU is not shared with the server's); prints the
    URL, serves until stdin closes, then writes the chat calls' spans to FILE as JSON."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--embed-delay", type=float, default=0.0)
    parser.add_argument("--spans", required=True)
    args = parser.parse_args()
    script = Script(delay=args.delay, embed_delay=args.embed_delay)
    with serve(script) as url:
        print(url, flush=True)
        sys.stdin.read()
    with open(args.spans, "w") as fh:
        json.dump(script.spans, fh)


if __name__ == "__main__":
    main()
