"""fairsched-gateway end to end: a real fairschedd, the fake OpenAI upstream
and the gateway, driven by http.client and curl."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import BIN, KEYS, SLOW, Stack, daemon_toml, sha, sse_events, wait_until

CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "hello there"}]}


def test_check_config_accepts_a_good_file_and_names_the_line_and_key_of_a_bad_one(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[upstream]\nurl = "http://127.0.0.1:8000"\n'
                    f'[keys.a]\nsha256 = "{sha("k")}"\ntenant = "acme"\n')
    r = subprocess.run([str(BIN / "fairsched-gateway"), "--check-config", str(good)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[upstream]\nurl = "http://127.0.0.1:8000"\n'
                   '[keys.a]\nsha256 = "not-a-digest"\ntenant = "acme"\n')
    r = subprocess.run([str(BIN / "fairsched-gateway"), "--check-config", str(bad)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    assert f"{bad}:4: keys.a.sha256: expected 64 hex digits" in r.stderr


def test_streamed_chat_relays_every_token_then_done(stack: Stack):
    stack.start()
    status, headers, body = stack.request(
        "POST", "/v1/chat/completions", {**CHAT, "stream": True, "max_tokens": 12})
    assert status == 200, body
    assert headers["content-type"] == "text/event-stream"
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "".join(f"t{i} " for i in range(12))
    # The caller did not ask for usage: the chunk the gateway asked for is not relayed.
    assert all(c["choices"] for c in chunks)


def test_streamed_completion_with_include_usage_relays_the_usage_chunk(stack: Stack):
    stack.start()
    status, _, body = stack.request("POST", "/v1/completions", {
        "model": "test-model", "prompt": "x" * 40, "stream": True, "max_tokens": 5,
        "stream_options": {"include_usage": True}})
    assert status == 200, body
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    usage = json.loads(events[-2])["usage"]
    assert usage["completion_tokens"] == 5


def raw_chunks(stack: Stack, body: dict) -> list[bytes]:
    """The HTTP chunks of a streamed answer to POST /v1/completions, as framed."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", stack.port), timeout=10 * SLOW)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (KEYS["alice"][0].encode(), len(data), data))
    buf = b""

    def need(cond) -> None:
        nonlocal buf
        while not cond():
            got = s.recv(65536)
            assert got, "the gateway closed the connection"
            buf += got

    need(lambda: b"\r\n\r\n" in buf)
    head, buf = buf.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), head
    chunks: list[bytes] = []
    while not chunks or chunks[-1]:
        need(lambda: b"\r\n" in buf)
        size, buf = buf.split(b"\r\n", 1)
        n = int(size.split(b";")[0], 16)
        need(lambda: len(buf) >= n + 2)
        chunks.append(buf[:n])
        buf = buf[n + 2:]
    s.close()
    return chunks


def test_events_that_arrive_together_go_to_the_caller_in_one_write(stack: Stack):
    # The upstream sends 8 tokens' events and [DONE] in one write: the caller
    # gets them in one HTTP chunk and then the last, not a chunk per event.
    stack.start()
    chunks = raw_chunks(stack, {"model": "burst", "prompt": "x", "stream": True, "max_tokens": 8})
    assert chunks[-1] == b""
    data = [c for c in chunks if c]
    events = sse_events(b"".join(data))
    assert events[-1] == "[DONE]"
    assert len(events) == 9, events
    assert len(data) == 1, [c[:60] for c in data]
    assert stack.tenant_counts("alice")["completed"] == 1


def test_the_daemon_hears_every_output_token_streamed_or_whole(stack: Stack):
    # The gateway emits a stream's first tokens at once and the rest in
    # batches (at most every 5 ms, the remainder with the finish), and a
    # whole response's tokens with its finish: the daemon's worker counts
    # each token once either way.
    stack.start()
    status, _, body = stack.request("POST", "/v1/completions",
                                    {"model": "test-model", "prompt": "hi", "max_tokens": 3})
    assert status == 200, body
    for model in ("burst", "test-model"):  # all in one read; a token a millisecond
        chunks = raw_chunks(stack, {"model": model, "prompt": "x", "stream": True, "max_tokens": 8})
        assert sse_events(b"".join(c for c in chunks if c))[-1] == "[DONE]"
    assert stack.tenant_counts("alice")["completed"] == 3
    assert sum(w["tokens"] for w in stack.status()["workers"]) == 3 + 8 + 8


def test_a_stream_header_waits_for_events_only_when_they_came_with_the_upstreams(stack: Stack):
    # "ping-held" sends its header and a comment (no event) in one write,
    # then holds its tokens until released: the caller has the response's
    # header while the tokens are held (the gateway writes its header with
    # the first events only when those came with the upstream's header).
    stack.start(**NO_TIMEOUTS)
    c = stack.conn(60)
    c.request("POST", "/v1/completions",
              body=json.dumps({"model": "ping-held", "prompt": "p", "stream": True,
                               "max_tokens": 3}),
              headers={"Authorization": f"Bearer {KEYS['alice'][0]}",
                       "Content-Type": "application/json"})
    r = c.getresponse()  # the header, while the upstream holds every token
    assert r.status == 200
    assert r.getheader("content-type") == "text/event-stream"
    release = http.client.HTTPConnection("127.0.0.1", stack.upstream_port, timeout=10)
    release.request("GET", "/release")
    assert release.getresponse().status == 200
    events = sse_events(r.read())
    c.close()
    assert events[-1] == "[DONE]"
    assert len([e for e in events if '"text"' in e]) == 3, events


def test_non_streamed_completion_returns_the_upstream_json(stack: Stack):
    stack.start()
    status, headers, body = stack.request("POST", "/v1/completions",
                                          {"model": "test-model", "prompt": "hi", "max_tokens": 3})
    assert status == 200, body
    j = json.loads(body)
    assert j["choices"][0]["text"] == "t0 t1 t2 "
    assert j["usage"]["completion_tokens"] == 3


def test_default_max_tokens_is_set_for_the_upstream(stack: Stack):
    stack.start(default_max_tokens=7)
    status, _, body = stack.request("POST", "/v1/completions", {"model": "m", "prompt": "hi"})
    assert status == 200, body
    assert json.loads(body)["usage"]["completion_tokens"] == 7


def test_curl_streams_through_the_gateway(stack: Stack):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (scripts/install-deps installs it)")
    stack.start()
    r = subprocess.run(
        ["curl", "-sS", "-N", "--max-time", str(int(20 * SLOW)),
         f"http://127.0.0.1:{stack.port}/v1/chat/completions",
         "-H", f"Authorization: Bearer {KEYS['bob'][0]}", "-H", "Content-Type: application/json",
         "-d", json.dumps({**CHAT, "stream": True, "max_tokens": 4})],
        capture_output=True, text=True, timeout=30 * SLOW)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("data: [DONE]")
    assert r.stdout.count("data: ") == 5


def test_keys_health_models_and_routes(stack: Stack):
    stack.start()
    assert stack.request("GET", "/healthz", key=None)[0] == 200
    assert stack.request("GET", "/readyz", key=None)[0] == 200
    s, _, b = stack.request("POST", "/v1/chat/completions", CHAT, key=None)
    assert s == 401 and json.loads(b)["error"]["code"] == "missing_api_key"
    s, _, b = stack.request("POST", "/v1/chat/completions", CHAT,
                            headers={"Authorization": "Bearer sk-wrong"}, key=None)
    assert s == 401 and json.loads(b)["error"]["type"] == "authentication_error"
    s, _, b = stack.request("POST", "/v1/chat/completions", CHAT, key="modelsonly")
    assert s == 403 and json.loads(b)["error"]["type"] == "permission_error"
    s, _, b = stack.request("GET", "/v1/models", key="modelsonly")
    assert s == 200 and json.loads(b)["data"][0]["id"] == "test-model"
    s, _, b = stack.request("GET", "/v1/nothing")
    assert s == 404


def test_malformed_json_is_400_and_a_large_body_is_413(stack: Stack):
    stack.start(max_body_bytes=4096)
    s, _, b = stack.request("POST", "/v1/chat/completions", b"{not json")
    assert s == 400
    err = json.loads(b)["error"]
    assert err["type"] == "invalid_request_error" and "JSON" in err["message"]
    s, _, b = stack.request("POST", "/v1/chat/completions", {"model": "m", "messages": "x"})
    assert s == 400 and json.loads(b)["error"]["param"] == "messages"
    s, _, b = stack.request("POST", "/v1/completions", {"model": "m", "prompt": "x" * 5000})
    assert s == 413 and json.loads(b)["error"]["code"] == "body_too_large"
    s, _, b = stack.request("POST", "/v1/completions",
                            {"model": "m", "prompt": "x", "max_tokens": 5000})
    assert s == 400 and json.loads(b)["error"]["param"] == "max_tokens"


def test_rate_limited_is_429_with_retry_after_and_ratelimit_headers(stack: Stack):
    stack.start()
    body = {"model": "m", "prompt": "hi", "max_tokens": 2}
    for _ in range(2):
        s, h, b = stack.request("POST", "/v1/completions", body, key="limited")
        assert s == 200, b
        assert h["x-ratelimit-limit-requests"] == "2"
    s, h, b = stack.request("POST", "/v1/completions", body, key="limited")
    assert s == 429, b
    err = json.loads(b)["error"]
    assert err["type"] == "rate_limit_error" and err["code"] == "rate_limit_exceeded"
    assert 1 <= int(h["retry-after"]) <= 60
    assert int(h["retry-after-ms"]) > 0
    assert h["x-ratelimit-limit-requests"] == "2"
    assert h["x-ratelimit-remaining-requests"] == "0"
    reset = float(h["x-ratelimit-reset-requests"].rstrip("s"))
    assert reset * 1000 >= int(h["retry-after-ms"]) - 1
    # Another tenant is not affected.
    assert stack.request("POST", "/v1/completions", body, key="bob")[0] == 200


def slow_stream(stack: Stack, key: str, tokens: int = 50):
    """Opens a streamed request of the slow model and returns its connection
    once its first event arrived."""
    c = stack.conn(30)
    c.request("POST", "/v1/completions",
              body=json.dumps({"model": "slow", "prompt": "p", "stream": True,
                               "max_tokens": tokens}),
              headers={"Authorization": f"Bearer {KEYS[key][0]}",
                       "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    line = b""
    while not line.startswith(b"data: "):
        line = r.readline()
        assert line, "the stream ended before its first event"
    return c, r


def test_queue_full_is_503_and_a_passed_deadline_is_504(stack: Stack):
    # Alice's stream holds the upstream's only sequence until she hangs up
    # (4000 tokens: 400 s). The deadline that passes is that of a request
    # awaited alone: on the request holding the tiny tenant's one queue slot
    # it would race the steps that check the 503 behind that request.
    stack.start(upstream_args=("--slow-ms", "100"), upstream_max_sequences=1,
                request_timeout_ms=600000)
    c, r = slow_stream(stack, "alice", tokens=4000)  # takes the upstream's only sequence
    small = {"model": "m", "prompt": "hi", "max_tokens": 1}
    s, h, b = stack.request("POST", "/v1/completions", small, key="tiny", timeout=30,
                            headers={"x-fairsched-timeout-ms": str(int(1500 * SLOW))})
    assert s == 504, b  # queued behind the stream past its deadline
    assert json.loads(b)["error"]["code"] == "deadline_exceeded"
    results = {}

    def queued():
        results["queued"] = stack.request("POST", "/v1/completions", small, key="tiny",
                                          timeout=60)

    t = threading.Thread(target=queued)
    t.start()
    wait_until(lambda: stack.queued("tiny") == 1, 10, "the tiny tenant's one queue slot to be taken")
    s, h, b = stack.request("POST", "/v1/completions", small, key="tiny")
    assert s == 503, b
    assert json.loads(b)["error"]["code"] == "queue_full"
    assert int(h["retry-after"]) >= 1 and int(h["retry-after-ms"]) > 0, h
    # Alice hangs up: the sequence goes to the request that waited in the slot.
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    t.join(60 * SLOW)
    assert not t.is_alive(), "the queued request was not answered"
    s, h, b = results["queued"]
    assert s == 200, b


def test_a_caller_that_hangs_up_cancels_its_running_request(stack: Stack):
    # Alice's stream (4000 tokens at 50 ms: 200 s) holds the upstream's only
    # sequence: it cannot end by itself within the test, so Bob is served
    # only if her hang-up freed it.
    stack.start(upstream_args=("--slow-ms", "50"), upstream_max_sequences=1,
                request_timeout_ms=600000)
    c, r = slow_stream(stack, "alice", tokens=4000)
    wait_until(lambda: stack.upstream_stats()["running"] == 1, 10, "the upstream to run it")
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    # The gateway closes its upstream call, the daemon frees the sequence...
    wait_until(lambda: stack.upstream_stats()["running"] == 0, 10, "the upstream call to end")
    assert stack.upstream_stats()["disconnects"] == 1  # cut off, not run to its end
    # ...and the next request gets it, not after Alice's 4000 tokens.
    s, _, b = stack.request("POST", "/v1/completions",
                            {"model": "m", "prompt": "hi", "max_tokens": 2}, key="bob",
                            timeout=60)
    assert s == 200, b
    alice = stack.tenant_counts("alice")
    assert (alice["cancelled"], alice["completed"]) == (1, 0), alice
    assert stack.upstream_stats()["prompts"] == ["p", "hi"]


def test_a_caller_that_hangs_up_while_queued_cancels_it(stack: Stack):
    # Alice's stream (4000 tokens: 400 s) holds the only sequence until she
    # hangs up below, however long the steps before take: one that ended by
    # itself would hand bob's request to the upstream before his cancel.
    stack.start(upstream_args=("--slow-ms", "100"), upstream_max_sequences=1,
                request_timeout_ms=600000)
    c, r = slow_stream(stack, "alice", tokens=4000)
    q = stack.conn(10)
    q.request("POST", "/v1/completions",
              body=json.dumps({"model": "m", "prompt": "queued", "max_tokens": 2}),
              headers={"Authorization": f"Bearer {KEYS['bob'][0]}",
                       "Content-Type": "application/json"})
    wait_until(lambda: stack.queued("bob") == 1, 10, "bob's request to be queued in the daemon")
    q.sock.shutdown(socket.SHUT_RDWR)
    q.close()
    # Alice's stream holds the only sequence until bob's cancel has landed
    # (two hang-ups on two gateway threads may otherwise be seen in either order).
    wait_until(lambda: stack.queued("bob") == 0, 10, "bob's request to leave the daemon's queue")
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    wait_until(lambda: stack.upstream_stats()["running"] == 0, 10, "the stream to end")

    def settled() -> bool:
        s = stack.status()
        return s["queued"] == 0 and s["in_flight"] == 0

    wait_until(settled, 10, "the daemon to hold no request (bob's and alice's cancelled)")
    # The queued request was cancelled where it queued: never assigned to the
    # gateway, never sent to the upstream.
    assert stack.assigned() == 1, stack.status()["workers"]
    assert not any("queued" in p for p in stack.upstream_stats()["prompts"])


def test_upstream_down_is_502(stack: Stack):
    # One sequence: a second request is served only if the first gave it back.
    stack.start(upstream=False, upstream_max_sequences=1)
    s, _, b = stack.request("POST", "/v1/chat/completions", CHAT)
    assert s == 502, b
    # Refused, said at once: not a timeout (upstream_timeout) nor the
    # request's deadline passing while it waited (deadline_exceeded).
    assert json.loads(b)["error"]["code"] == "upstream_unavailable"
    # The sequence was given back: the next one fails the same way, not by waiting.
    s, _, b = stack.request("POST", "/v1/chat/completions", CHAT)
    assert s == 502 and json.loads(b)["error"]["code"] == "upstream_unavailable", b
    wait_until(lambda: [w["free_sequences"] for w in stack.status()["workers"]] == [1], 10,
               "the gateway's sequence to come back")


def test_upstream_errors_are_passed_on_and_a_hang_times_out(stack: Stack):
    stack.start()
    s, _, b = stack.request("POST", "/v1/chat/completions", {**CHAT, "model": "fail"})
    assert s == 500 and json.loads(b)["error"]["message"] == "engine failure"
    s, _, b = stack.request("POST", "/v1/chat/completions", {**CHAT, "model": "bad-request"})
    assert s == 400
    # The upstream's response_timeout_ms (1.5 s) ends it: upstream_timeout, not the
    # request's own deadline (request_timeout_ms, 30 s: deadline_exceeded).
    s, _, b = stack.request("POST", "/v1/chat/completions", {**CHAT, "model": "hang"}, timeout=60)
    assert s == 504 and json.loads(b)["error"]["code"] == "upstream_timeout", b
    # A stream cut short ends with an explicit error event.
    s, _, b = stack.request("POST", "/v1/chat/completions",
                            {**CHAT, "model": "drop", "stream": True, "max_tokens": 10})
    assert s == 200
    events = sse_events(b)
    assert json.loads(events[-2])["error"]["code"] == "upstream_bad_response"
    # And the gateway still serves.
    assert stack.request("POST", "/v1/chat/completions", CHAT)[0] == 200


def test_upstream_concurrency_is_never_exceeded(stack: Stack):
    stack.start(upstream_args=("--token-ms", "5"), upstream_max_sequences=3)
    results = []

    def one(i):
        results.append(stack.request("POST", "/v1/completions",
                                     {"model": "m", "prompt": f"p{i}", "max_tokens": 10},
                                     key="alice" if i % 2 else "bob", timeout=60)[0])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * SLOW)
    assert results == [200] * 24
    assert stack.upstream_stats()["max_running"] <= 3


def test_keep_alive_serves_many_requests_on_one_connection(stack: Stack):
    stack.start()
    c = stack.conn()
    for i in range(20):
        c.request("POST", "/v1/completions",
                  body=json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2,
                                   "stream": i % 2 == 0}),
                  headers={"Authorization": f"Bearer {KEYS['alice'][0]}",
                           "Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200
        r.read()
    c.close()


def test_a_slow_header_is_cut_off(stack: Stack):
    # Every other timer of the connection is 10 minutes: only the header
    # timeout can close it before the test's own bound (60 s, against a hang).
    stack.start(header_timeout_ms=300, idle_timeout_ms=600000, body_timeout_ms=600000,
                write_timeout_ms=600000, request_timeout_ms=600000)
    s = socket.create_connection(("127.0.0.1", stack.port), timeout=60 * SLOW)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # never finishes
    assert s.recv(100) == b""  # closed by the gateway
    s.close()


def test_sighup_reloads_the_keys(stack: Stack):
    stack.start()
    text = stack.gateway_config.read_text()
    stack.gateway_config.write_text(
        text + f'[keys.carol]\nsha256 = "{sha("sk-carol")}"\ntenant = "carol"\n')
    stack.gateway.send(signal.SIGHUP)
    wait_until(lambda: "reloaded" in stack.gateway.output(), 5, "the reload")
    s, _, b = stack.request("POST", "/v1/completions", {"model": "m", "prompt": "x"},
                            key=None, headers={"Authorization": "Bearer sk-carol"})
    assert s == 200, b
    # A broken file is refused and the running keys stay.
    stack.gateway_config.write_text(text + "[keys.bad]\nsha256 = 1\n")
    stack.gateway.send(signal.SIGHUP)
    wait_until(lambda: "reload refused" in stack.gateway.output(), 5, "the refusal")
    assert stack.request("POST", "/v1/completions", {"model": "m", "prompt": "x"},
                         key=None, headers={"Authorization": "Bearer sk-carol"})[0] == 200


def test_a_thousand_keys_each_with_its_tenant_are_all_served_and_released_on_reload(
        stack: Stack):
    stack.start()
    base = stack.gateway_config.read_text()
    many = "".join(f'[keys.k{i}]\nsha256 = "{sha(f"sk-many-{i}")}"\ntenant = "org-{i}"\n'
                   for i in range(1000))
    stack.gateway_config.write_text(base + many)
    stack.gateway.send(signal.SIGHUP)
    wait_until(lambda: "reloaded" in stack.gateway.output(), 10, "the reload")
    # Every key's tenant is held open by the gateway's one connection.
    assert stack.status()["counters"]["tenant_handles_open"] >= 1000
    c = stack.conn()
    for i in range(1000):
        c.request("POST", "/v1/completions",
                  body=json.dumps({"model": "m", "prompt": "hi", "max_tokens": 1}),
                  headers={"Authorization": f"Bearer sk-many-{i}",
                           "Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read()
        assert r.status == 200, (i, body)
    c.close()
    served = json.loads(stack.ctl("tenants", "--limit", "0", "--json"))["tenants"]
    assert len({row["tenant"] for row in served if row["tenant"].startswith("org-")}) == 1000
    # Keys removed: their tenants are released, the others still served.
    open_before = stack.status()["counters"]["tenant_handles_open"]
    stack.gateway_config.write_text(base + many.split("[keys.k400]")[0])
    stack.gateway.send(signal.SIGHUP)
    wait_until(lambda: stack.gateway.output().count("reloaded") >= 2, 10, "the second reload")
    assert stack.status()["counters"]["tenant_handles_open"] == open_before - 600
    s, _, b = stack.request("POST", "/v1/completions", {"model": "m", "prompt": "x"},
                            key=None, headers={"Authorization": "Bearer sk-many-399"})
    assert s == 200, b
    s, _, _ = stack.request("POST", "/v1/completions", {"model": "m", "prompt": "x"},
                            key=None, headers={"Authorization": "Bearer sk-many-400"})
    assert s == 401


def test_sigterm_drains_and_exits_cleanly(stack: Stack):
    stack.start(upstream_args=("--slow-ms", "20"))
    c, r = slow_stream(stack, "alice", tokens=20)
    stack.gateway.send(signal.SIGTERM)
    rest = r.read()
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert stack.gateway.proc.wait(10 * SLOW) == 0


def ttft(stack: Stack, key: str, prompt: str = "light") -> float:
    c = stack.conn(60)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions",
              body=json.dumps({"model": "m", "prompt": prompt, "stream": True,
                               "max_tokens": 4}),
              headers={"Authorization": f"Bearer {KEYS[key][0]}",
                       "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    line = r.readline()
    first = time.monotonic() - t0
    assert line.startswith(b"data: ")
    r.read()
    c.close()
    return first


def open_calls(stack: Stack, key: str, n: int, model: str = "hang", prefix: str = "f",
               pad: int = 0) -> dict[str, http.client.HTTPConnection]:
    """`n` calls of `key` sent at once, each on its own connection and not
    read (prompts prefix0, prefix1, ..., each followed by `pad` bytes: about
    pad/4 tokens of cost; the model "hang" never answers): their connections
    by prompt as the upstream records it (its first 64 bytes), for the test
    to hang up."""
    calls = {}
    for i in range(n):
        prompt = f"{prefix}{i}" + (" " + "x" * pad if pad else "")
        c = stack.conn(60)
        c.request("POST", "/v1/completions",
                  body=json.dumps({"model": model, "prompt": prompt, "max_tokens": 4}),
                  headers={"Authorization": f"Bearer {KEYS[key][0]}",
                           "Content-Type": "application/json"})
        calls[prompt[:64]] = c
    return calls


def hang_up(c: http.client.HTTPConnection) -> None:
    if c.sock is not None:  # not hung up before
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()


def hang_up_all(stack: Stack, tenant: str, calls: dict[str, http.client.HTTPConnection],
                port: int = 0) -> None:
    """Hangs up every call of `calls` (all of `tenant`'s, settled where they
    are): first those that never reached the upstream (on `port`), and once
    none of them waits in the daemon, the rest. So no sequence a hang-up
    frees is assigned to a call whose caller has just hung up too: a cancel
    that crosses its request's assignment is not what these tests are about
    (the upstream call may then run on until it ends by itself)."""
    reached = set(stack.upstream_stats(port or None)["prompts"])
    for prompt, c in calls.items():
        if prompt not in reached:
            hang_up(c)
    wait_until(lambda: stack.queued(tenant) == 0, 30, f"{tenant}'s waiting calls to be cancelled")
    for c in calls.values():
        hang_up(c)


# Nothing may end a call that hangs at the upstream but the test's hang-up.
NO_TIMEOUTS = dict(request_timeout_ms=600000, upstream_response_timeout_ms=600000,
                   upstream_idle_timeout_ms=600000)


def test_a_flooding_tenant_does_not_delay_a_light_tenants_first_token(stack: Stack):
    # The upstream runs 4 sequences; Alice floods with 40 calls of about 40
    # tokens each (more than a turn's quantum of 16, as a 40-token answer
    # would cost) that never end by themselves: 4 run, 36 wait in the daemon.
    # Each time Bob asks, one of Alice's running calls is hung up: the
    # sequence it frees goes to Bob, ahead of every call Alice has waiting
    # (fair order gives Bob the next free sequence, not an immediate one:
    # the headroom test below). Without fair scheduling he would wait behind
    # the whole flood. How soon his first token comes against alone is a
    # benchmark (docs/benchmarks.md, "A light tenant during a flood, through
    # the gateway").
    stack.start(upstream_max_sequences=4, **NO_TIMEOUTS)
    flood = open_calls(stack, "alice", 40, pad=160)
    wait_until(lambda: stack.upstream_stats()["running"] == 4 and stack.queued("alice") == 36, 30,
               "the flood to fill the upstream and queue the rest")
    hung: set[str] = set()
    for k in range(3):
        # Alice's 4 run again (the sequence Bob used went back to her).
        wait_until(lambda: stack.upstream_stats()["running"] == 4, 30, "Alice's 4 calls to run")
        waiting = stack.queued("alice")
        assert waiting == 36 - k, waiting
        firsts: list = []
        bob = threading.Thread(target=lambda k=k: firsts.append(ttft(stack, "bob", f"light{k}")))
        bob.start()
        wait_until(lambda: stack.queued("bob") == 1, 30, "Bob's request to wait in the daemon")
        prompts = stack.upstream_stats()["prompts"]
        victim = next(p for p in prompts if p in flood and p not in hung)
        hang_up(flood[victim])
        hung.add(victim)
        bob.join(60 * SLOW)
        assert not bob.is_alive() and len(firsts) == 1, "Bob's request was not answered"
        # The sequence went to Bob: his call reached the upstream next.
        after = stack.upstream_stats()["prompts"][len(prompts):]
        assert after and after[0] == f"light{k}", (after, prompts)
        print(f"Bob's first token with {waiting} of Alice's waiting: {firsts[0] * 1000:.1f} ms")
    wait_until(lambda: stack.upstream_stats()["running"] == 4, 30, "Alice's 4 calls to run")
    hang_up_all(stack, "alice", flood)

    def settled() -> bool:
        st = stack.status()
        return st["queued"] == 0 and st["in_flight"] == 0

    wait_until(settled, 30, "every call of the flood to end")
    assert stack.tenant_counts("bob")["completed"] == 3
    alice = stack.tenant_counts("alice")
    assert (alice["cancelled"], alice["completed"]) == (40, 0), alice


# --- what a new user hit -------------------------------------------------------


def test_callers_hanging_up_mid_stream_are_counted_cancelled_not_failed(stack: Stack):
    # The gateway's worker ends a hung-up request only after the daemon took
    # the cancel, so the daemon counts a cancel, not a worker that gave up.
    # 4000 tokens (80 s) each: none ends by itself while the others open,
    # however long that takes.
    stack.start(upstream_args=("--slow-ms", "20"), request_timeout_ms=600000)
    streams = [slow_stream(stack, "bob", tokens=4000) for _ in range(8)]
    for c, _ in streams:
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()

    def settled() -> bool:
        n = stack.tenant_counts("bob")
        return n["queued"] == 0 and n["in_flight"] == 0

    wait_until(settled, 10, "bob's requests to end")
    n = stack.tenant_counts("bob")
    assert (n["cancelled"], n["completed"]) == (8, 0), n
    assert "EXECUTOR_FAILED" not in stack.daemon.output()


def test_a_caller_that_stops_reading_is_dropped_and_its_request_cancelled(stack: Stack):
    # 4000 tokens at 5 ms: 20 s of stream, far more than the bounded send
    # buffer; the caller reads the header and stops.
    stack.start(upstream_args=("--token-ms", "5"), write_timeout_ms=1000,
                send_buffer_bytes=4096, request_timeout_ms=600000)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", stack.port))
    body = json.dumps({"model": "m", "prompt": "p", "stream": True, "max_tokens": 4000}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEYS["bob"][0].encode() + b"\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert s.recv(64).startswith(b"HTTP/1.1 200")
    # Dropped after write_timeout_ms of a full buffer: the upstream call is
    # closed before the stream ended ("disconnects" counts a call the
    # upstream could not finish writing; one run to its end is not one).
    wait_until(lambda: stack.upstream_stats()["disconnects"] == 1, 60,
               "the upstream call to close")
    wait_until(lambda: stack.tenant_counts("bob")["cancelled"] == 1, 10, "bob's request cancelled")
    assert stack.tenant_counts("bob")["completed"] == 0
    s.close()


def test_remaining_tokens_follow_the_upstreams_usage(stack: Stack):
    # The gateway estimates ~1000 prompt tokens; the upstream counts 1. The
    # daemon settles the reservation by the usage, and so do the headers.
    # One thread: the first response's headers are built before the
    # settlement, which another thread's completion loop could apply first.
    stack.start(threads=1)
    s, h, b = stack.request("POST", "/v1/completions",
                            {"model": "short-usage", "prompt": "x" * 4000, "max_tokens": 8},
                            key="tokened")
    assert s == 200, b
    assert int(h["x-ratelimit-remaining-tokens"]) < 99_000  # the estimate, reserved while it ran
    wait_until(lambda: stack.finals_taken() == 1, 10, "the daemon's completion to reach the gateway")
    s, h, b = stack.request("POST", "/v1/completions",
                            {"model": "m", "prompt": "hi", "max_tokens": 1}, key="tokened")
    assert s == 200, b
    # 100000 − (1 prompt + 8 output) − this request's own reservation.
    assert int(h["x-ratelimit-remaining-tokens"]) > 99_900, h


def test_health_endpoints_answer_get_and_head_only(stack: Stack):
    stack.start()
    for path in ("/healthz", "/readyz"):
        s, _, b = stack.request("POST", path, b"", key=None)
        assert s == 405, b
        assert json.loads(b)["error"]["code"] == "method_not_allowed"
        s, h, b = stack.request("HEAD", path, key=None)
        assert s == 200 and b == b"" and int(h["content-length"]) > 0, (s, h, b)
        assert stack.request("GET", path, key=None)[0] == 200


def test_an_upstream_answering_something_not_http_is_a_bad_response(stack: Stack):
    # No health checks: the one connection accepted below is the call's.
    stack.start(upstream=False, upstream_health_path='""')
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", stack.upstream_port))
    srv.listen(8)

    def answer_garbage():
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\r\nnot http at all\r\n")
        time.sleep(0.5)
        conn.close()

    t = threading.Thread(target=answer_garbage, daemon=True)
    t.start()
    s, _, b = stack.request("POST", "/v1/chat/completions", CHAT)
    t.join(5)
    srv.close()
    assert s == 502, b
    assert json.loads(b)["error"]["code"] == "upstream_bad_response"


def test_a_deadline_passing_mid_stream_says_it_was_running(stack: Stack):
    # A "held" stream: its first token at once (1 ms), then nothing more
    # until released, which it never is: the stream cannot end before the
    # deadline does, and no other timeout may end it first.
    stack.start(**NO_TIMEOUTS)
    c = stack.conn(60)
    c.request("POST", "/v1/completions",
              body=json.dumps({"model": "held", "prompt": "p", "stream": True,
                               "max_tokens": 4000}),
              headers={"Authorization": f"Bearer {KEYS['alice'][0]}",
                       "Content-Type": "application/json",
                       "x-fairsched-timeout-ms": str(int(1000 * SLOW))})
    r = c.getresponse()
    assert r.status == 200
    events = sse_events(r.read())
    c.close()
    assert events[-1] == "[DONE]"
    tokens = [e for e in events[:-1] if '"error"' not in e]
    assert tokens, events
    err = json.loads(events[-2])["error"]
    assert err["code"] == "deadline_exceeded", err
    assert "while it was running" in err["message"], err


def test_every_answer_says_where_its_time_went(stack: Stack):
    stack.start()
    s, h, b = stack.request("POST", "/v1/completions",
                            {"model": "m", "prompt": "hi", "max_tokens": 2})
    assert s == 200, b
    assert float(h["x-fairsched-overhead-ms"]) >= 0
    assert float(h["x-fairsched-queue-ms"]) >= 0
    s, h, _ = stack.request("POST", "/v1/completions", {"prompt": "hi"}, key=None)
    assert s == 401
    assert float(h["x-fairsched-overhead-ms"]) >= 0
    assert "x-fairsched-queue-ms" not in h  # never submitted


# --- pooled upstream connections -------------------------------------------------


def test_upstream_connections_are_kept_alive_and_reused(stack: Stack):
    stack.start(threads=1)  # each gateway thread has its own pool
    for i in range(12):
        stream = i % 2 == 0
        s, _, b = stack.request("POST", "/v1/completions",
                                {"model": "m", "prompt": f"p{i}", "max_tokens": 3,
                                 "stream": stream})
        assert s == 200, b
        if stream:
            assert sse_events(b)[-1] == "[DONE]"
    assert stack.request("GET", "/v1/models")[0] == 200
    # One after the other: one connection serves them all (the fake sends a
    # stream's last chunk with its [DONE], so the gateway has read the whole
    # body, and pooled the connection, when the stream ends).
    assert stack.upstream_stats()["connections"] == 1


def test_without_a_pool_each_call_has_its_own_connection(stack: Stack):
    stack.start(upstream_pool_connections=0)
    for i in range(4):
        assert stack.request("POST", "/v1/completions",
                             {"model": "m", "prompt": "p", "max_tokens": 2})[0] == 200
    assert stack.upstream_stats()["connections"] == 4


def test_a_pooled_connection_the_upstream_closed_is_not_used(stack: Stack):
    # The upstream closes idle connections after 0.2 s; the pool keeps them
    # 4 s: every call after the upstream closed the last one's connection
    # must notice and connect again.
    stack.start(upstream_args=("--keep-alive-s", "0.2"))
    for i in range(4):
        s, _, b = stack.request("POST", "/v1/completions",
                                {"model": "m", "prompt": "p", "max_tokens": 2, "stream": i % 2 == 1})
        assert s == 200, b
        wait_until(lambda: stack.upstream_stats()["closed"] == i + 1, 10,
                   "the upstream to close the idle connection")
    assert stack.upstream_stats()["connections"] == 4


def test_concurrent_calls_open_no_more_connections_than_they_need(stack: Stack):
    stack.start(upstream_max_sequences=4, threads=1)  # each gateway thread has its own pool
    results = []

    def burst(i):
        results.append(stack.request("POST", "/v1/completions",
                                     {"model": "m", "prompt": f"b{i}", "max_tokens": 4},
                                     timeout=30)[0])

    for _ in range(3):
        threads = [threading.Thread(target=burst, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30 * SLOW)
    assert results == [200] * 24
    # The upstream runs at most 4 at once: 4 connections are all it ever needs.
    assert stack.upstream_stats()["connections"] <= 4


def test_several_threads_share_the_callers_and_each_gets_its_own_answer(stack: Stack):
    stack.start(threads=4, replicas=2, upstream_max_sequences=8)
    # Each new connection goes to the thread serving the fewest.
    held = [stack.conn(10) for _ in range(8)]
    for c in held:
        c.request("GET", "/healthz")
        c.getresponse().read()
    s, _, b = stack.request("GET", "/readyz", key=None)
    assert s == 200, b
    per_thread = json.loads(b)["threads"]
    assert len(per_thread) == 4, per_thread
    assert all(t["connections"] >= 2 for t in per_thread), per_thread  # 9 open, /readyz's too
    for c in held:
        c.close()

    # 64 callers at once on their own connections, half streamed, two
    # tenants, each asking for its own number of tokens.
    results: dict[int, tuple[int, str]] = {}

    def one(i: int) -> None:
        stream = i % 2 == 0
        s, _, body = stack.request("POST", "/v1/completions",
                                   {"model": "m", "prompt": f"p{i}", "max_tokens": 1 + i % 13,
                                    "stream": stream},
                                   key=("alice", "bob")[(i // 2) % 2], timeout=60)
        if s != 200:
            results[i] = (s, body.decode(errors="replace"))
        elif stream:
            events = sse_events(body)
            assert events[-1] == "[DONE]", events
            results[i] = (s, "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]))
        else:
            results[i] = (s, json.loads(body)["choices"][0]["text"])

    callers = [threading.Thread(target=one, args=(i,)) for i in range(64)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(60 * SLOW)
    assert sorted(results) == list(range(64))
    for i, (s, text) in results.items():
        assert (s, text) == (200, "".join(f"t{k} " for k in range(1 + i % 13))), (i, s, text)

    def settled() -> bool:
        st = stack.status()
        return st["queued"] == 0 and st["in_flight"] == 0

    wait_until(settled, 10, "the daemon to hold no request")
    for tenant in ("alice", "bob"):
        counts = stack.tenant_counts(tenant)
        assert counts["completed"] == 32 and counts["cancelled"] == 0, (tenant, counts)
    stats = [stack.upstream_stats(port) for _, port in stack.replicas]
    assert sum(st["requests"] for st in stats) == 64, stats
    assert all(st["max_running"] <= 8 for st in stats), stats


# --- several upstreams ------------------------------------------------------------


def readyz_upstreams(stack: Stack) -> dict:
    """Each upstream's state by name, from /readyz (503 when every one is out)."""
    s, _, b = stack.request("GET", "/readyz", key=None)
    assert s in (200, 503), b
    return {u["name"]: u for u in json.loads(b)["upstreams"]}


def complete(stack: Stack, i: int, key: str = "alice", tokens: int = 4) -> int:
    return stack.request("POST", "/v1/completions",
                         {"model": "m", "prompt": f"r{i}", "max_tokens": tokens}, key=key,
                         timeout=30)[0]


def test_replicas_each_run_their_share_within_their_own_capacity(stack: Stack):
    stack.start(replicas=2, upstream_args=("--token-ms", "20"), upstream_max_sequences=2)
    workers = sorted(w["name"] for w in stack.status()["workers"])
    assert workers == ["gateway/r0", "gateway/r1"]  # fairschedctl status shows each
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(complete(stack, i, tokens=10)))
               for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * SLOW)
    assert results == [200] * 12
    stats = [stack.upstream_stats(port) for _, port in stack.replicas]
    assert all(s["requests"] >= 3 for s in stats), stats  # both took a share
    assert all(s["max_running"] <= 2 for s in stats), stats  # each within its own capacity
    assert sum(s["requests"] for s in stats) == 12


def test_prefix_routing_sends_each_shared_prompt_to_the_replica_that_holds_it(stack: Stack):
    # routing = "prefix": the gateway hashes each prompt's text in blocks,
    # the daemon places a call where its blocks were sent before, within
    # the load bound. Family A's prompts are long, B's short: by room alone
    # the second A would go where the first B went (more KV free there).
    stack.daemon_config.write_text(daemon_toml(stack.socket).replace(
        "[endpoints.chat.worker]\n", '[endpoints.chat.worker]\nrouting = "prefix"\n'))
    stack.start(replicas=2, upstream_args=("--prefix-cache-blocks", "1000"),
                upstream_response_timeout_ms=600000, upstream_idle_timeout_ms=600000)
    ports = [port for _, port in stack.replicas]

    def running() -> int:
        return sum(stack.upstream_stats(p)["running"] for p in ports)

    calls = []
    for i, family in enumerate("ABABAB"):
        prompt = family * (2000 if family == "A" else 300) + f" {i}"
        c = stack.conn(60)
        c.request("POST", "/v1/completions",
                  body=json.dumps({"model": "hang", "prompt": prompt, "max_tokens": 4}),
                  headers={"Authorization": f"Bearer {KEYS['alice'][0]}",
                           "Content-Type": "application/json"})
        calls.append(c)
        wait_until(lambda: running() == i + 1, 30 * SLOW, f"call {i} running on a replica")
    seen = sorted("".join(sorted({p[0] for p in stack.upstream_stats(port)["prompts"]}))
                  for port in ports)
    assert seen == ["A", "B"], seen  # each family on one replica
    rows = [w["prefix_cache"] for w in stack.status()["workers"]]
    # A's prompts share 31 blocks of 64 bytes, B's 4: the second and third of
    # each found them where they went.
    assert sum(r["hit_blocks"] for r in rows) == 2 * 31 + 2 * 4, rows
    assert all(r["source"] == "sent" for r in rows), rows
    # The engines' own counters agree: each prompt after a family's first
    # found the family's blocks cached where it went (a completion's prompt
    # is its text as is, so the gateway's blocks are the engine's).
    caches = [stack.upstream_stats(p)["prefix_cache"] for p in ports]
    assert sum(c["hits"] for c in caches) == (2 * 31 + 2 * 4) * 16, caches
    m = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=5)
    m.request("GET", "/metrics")
    text = m.getresponse().read().decode()
    m.close()
    assert f'vllm:prefix_cache_hits_total{{model_name="test-model"}} {float(caches[0]["hits"])}' \
        in text, text
    for c in calls:
        hang_up(c)


def test_a_killed_replica_is_ejected_its_calls_run_elsewhere_and_it_comes_back(stack: Stack):
    # One check at start and no periodic one after it (every 600 s): however
    # long the burst below takes to start, it meets the dead replica before
    # a check could eject it. An ejection's end still waits for a passing
    # check (after eject_ms), which brings the restarted replica back.
    stack.start(replicas=2, upstream_health_interval_ms=600000, upstream_eject_ms=200)
    proc, port = stack.replicas[1]
    wait_until(lambda: stack.upstream_stats(port)["health_checks"] >= 1, 5 * SLOW,
               "r1's first check")
    proc.stop(signal.SIGKILL)
    # Every request is answered: one assigned to the dead replica is refused
    # before anything was sent, so the live one runs it; then it is ejected.
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(complete(stack, i, tokens=20)))
               for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * SLOW)
    assert results == [200] * 12
    assert "unreachable; upstream r0 runs it" in stack.gateway.output()
    wait_until(lambda: readyz_upstreams(stack)["r1"]["state"] != "healthy", 5, "r1's ejection")
    assert readyz_upstreams(stack)["r1"]["ejections"] >= 1
    # Restarted on its port: a passing check brings it back, and it serves again.
    _, again = stack.start_upstream(port=port)
    assert again == port
    wait_until(lambda: readyz_upstreams(stack)["r1"]["state"] == "healthy", 10, "r1's return")
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(complete(stack, i, tokens=20)))
               for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * SLOW)
    assert results == [200] * 16
    assert stack.upstream_stats(port)["requests"] > 0


def test_a_replica_killed_under_its_pooled_connections_has_its_calls_run_elsewhere(stack: Stack):
    # One gateway thread, so the second burst takes the connections the
    # first left in its pool. One idle for under a second is taken without
    # a look: killed under it, a call's request fails as it goes out, the
    # new connection it tries is refused, and the call runs on r0 (nothing
    # reached r1). Idle longer, the look finds it closed: the same outcome.
    stack.start(replicas=2, threads=1, upstream_max_sequences=2,
                upstream_health_interval_ms=600000, upstream_eject_ms=60000)
    proc, port = stack.replicas[1]

    def burst(n: int) -> list[int]:
        results: list[int] = []
        threads = [threading.Thread(target=lambda i=i: results.append(complete(stack, i)))
                   for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60 * SLOW)
        return results

    assert burst(8) == [200] * 8
    assert stack.upstream_stats(port)["requests"] > 0, "r1 ran some: it has pooled connections"
    proc.stop(signal.SIGKILL)
    assert burst(8) == [200] * 8
    assert "unreachable; upstream r0 runs it" in stack.gateway.output()


def test_a_failing_health_check_ejects_a_replica_until_it_passes(stack: Stack):
    sick = stack.dir / "r1-sick"
    sick.touch()
    stack.start(replicas=2, upstream_args=("--unhealthy-file", str(sick)),
                upstream_health_interval_ms=200, upstream_eject_ms=200)
    wait_until(lambda: readyz_upstreams(stack)["r1"]["state"] != "healthy" and
               readyz_upstreams(stack)["r0"]["state"] != "healthy", 5, "both ejected")
    s, _, b = stack.request("GET", "/readyz", key=None)
    assert s == 503 and b"every upstream is ejected" in b, b
    # Every replica out: the gateway still calls them (an answer now, not a
    # wait in the queue); this one answers, its check does not.
    assert complete(stack, 0) == 200
    sick.unlink()
    wait_until(lambda: all(u["state"] == "healthy" for u in readyz_upstreams(stack).values()), 10,
               "both back")
    assert "ejected" in stack.gateway.output() and "healthy again" in stack.gateway.output()


def test_removing_a_replica_by_sighup_drains_it_without_cutting_its_stream(stack: Stack):
    # A "held" stream: its first token, then nothing until the test releases
    # it, so it outlasts the reload, the drain's start and the 4 calls after
    # it however long they take (no timeout may end it meanwhile); then it
    # is read to its end.
    stack.start(replicas=2, **NO_TIMEOUTS)
    c = stack.conn(60)
    c.request("POST", "/v1/completions",
              body=json.dumps({"model": "held", "prompt": "p", "stream": True, "max_tokens": 20}),
              headers={"Authorization": f"Bearer {KEYS['alice'][0]}",
                       "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    assert r.readline().startswith(b"data: ")
    busy = next(i for i, (_, port) in enumerate(stack.replicas)
                if stack.upstream_stats(port)["running"] == 1)
    keep = 1 - busy
    # The config now lists only the other replica (named as before).
    text = gateway_toml_without(stack, busy)
    stack.gateway_config.write_text(text)
    stack.gateway.send(signal.SIGHUP)
    wait_until(lambda: readyz_upstreams(stack)[f"r{busy}"]["state"] == "draining", 5,
               "the removed replica to drain")
    # New work goes to the one that stays; the draining one finishes its stream.
    assert [complete(stack, i) for i in range(4)] == [200] * 4
    assert stack.upstream_stats(stack.replicas[keep][1])["requests"] == 4
    assert readyz_upstreams(stack)[f"r{busy}"]["state"] == "draining"  # the stream holds it
    release = http.client.HTTPConnection("127.0.0.1", stack.replicas[busy][1], timeout=10)
    release.request("GET", "/release")
    assert release.getresponse().status == 200
    release.close()
    rest = r.read()
    c.close()
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert sse_events(rest).count("[DONE]") == 1 and len(sse_events(rest)) == 20  # 19 tokens
    assert b'"error"' not in rest
    wait_until(lambda: list(readyz_upstreams(stack)) == [f"r{keep}"], 5, "the drained worker to go")
    assert [w["name"] for w in stack.status()["workers"]] == [f"gateway/r{keep}"]


def gateway_toml_without(stack: Stack, index: int) -> str:
    from conftest import gateway_toml
    text = gateway_toml(stack.socket, stack.daemon_config,
                        [port for _, port in stack.replicas], **stack.gateway_over)
    blocks = text.split("[[upstreams]]\n")
    head, ups = blocks[0], blocks[1:]
    return head + "".join("[[upstreams]]\n" + b for i, b in enumerate(ups) if i != index)


def test_with_headroom_a_light_tenants_first_token_does_not_wait_for_a_sequence(stack: Stack):
    # As the flood test above, with one of the upstream's 4 sequences kept for
    # tenants with nothing running: Alice's flood never ends by itself and
    # fills 3, and Bob is served on the fourth at once, each time, with none
    # of Alice's calls ending (nothing else could make room). How soon, against
    # alone, is a benchmark (docs/benchmarks.md, "A light tenant during a
    # flood, through the gateway", headroom 1).
    from conftest import daemon_toml
    stack.daemon_config.write_text(
        daemon_toml(stack.socket).replace("max_sequences = 256\n",
                                          "max_sequences = 256\nheadroom = 1\n"))
    stack.start(upstream_max_sequences=4, **NO_TIMEOUTS)
    flood = open_calls(stack, "alice", 40)
    wait_until(lambda: stack.upstream_stats()["running"] == 3 and stack.queued("alice") == 37, 30,
               "the flood to fill 3 sequences and queue the rest")
    for k in range(5):
        first = ttft(stack, "bob", f"light{k}")
        print(f"Bob's first token with 37 of Alice's waiting: {first * 1000:.1f} ms")
    st = stack.upstream_stats()
    # Alice never had the fourth: her 3 calls are the only ones of hers that
    # reached the upstream, and Bob's 5 came on the sequence kept beside them.
    assert sorted(p for p in st["prompts"] if p in flood) == sorted(st["prompts"][:3]), st
    assert st["prompts"][3:] == [f"light{k}" for k in range(5)], st
    assert st["max_running"] == 4 and st["running"] == 3, st
    assert stack.queued("alice") == 37
    hang_up_all(stack, "alice", flood)

    def settled() -> bool:
        s = stack.status()
        return s["queued"] == 0 and s["in_flight"] == 0

    wait_until(settled, 30, "every call of the flood to end")
    assert stack.tenant_counts("bob")["completed"] == 5
    assert stack.tenant_counts("alice")["cancelled"] == 40


# --- capacity that follows the engine ---------------------------------------------


def flood(stack: Stack, n: int, tokens: int, samples: list) -> list:
    """`n` requests at once; while they run, /readyz's limit of upstream r0 is
    sampled into `samples`. Their statuses."""
    results: list = []
    threads = [threading.Thread(target=lambda i=i: results.append(complete(stack, i, tokens=tokens)))
               for i in range(n)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        samples.append(readyz_upstreams(stack)["r0"]["max_sequences"])
        time.sleep(0.03)
    for t in threads:
        t.join(60 * SLOW)
    return results


def test_capacity_auto_sends_what_the_engine_runs_and_keeps_its_queue_near_empty(stack: Stack):
    # An engine that runs 3 calls at once and queues the rest; the gateway
    # may send 16 (fixed), then follows its metrics (auto, after a reload).
    # Each way, first 20 calls that never end by themselves, which settle
    # where the limit leaves them whatever the speed of the machine; then a
    # flood of 32 short calls, all served. A call waits in the engine's
    # queue behind up to 13 others: no timeout may end it there.
    stack.start(replicas=1, upstream_args=("--engine-slots", "3", "--token-ms", "12"),
                upstream_max_sequences=16, upstream_metrics_interval_ms=50, **NO_TIMEOUTS)
    port = stack.replicas[0][1]

    def engine() -> dict:
        return stack.upstream_stats(port)["engine"]

    def idle() -> bool:
        st, e = stack.status(), engine()
        return (st["queued"], st["in_flight"], e["running"], e["waiting"]) == (0, 0, 0, 0)

    # Fixed: all 16 sent at once, 13 of them wait in the engine's FIFO, where
    # fairsched cannot order them.
    held = open_calls(stack, "alice", 20, prefix="h")
    wait_until(lambda: (engine()["running"], engine()["waiting"], stack.queued("alice")) ==
               (3, 13, 4), 30, "16 calls sent, 3 run, 13 wait in the engine")
    assert engine()["max_waiting"] == 13
    hang_up_all(stack, "alice", held, port)
    wait_until(idle, 30, "the held calls to end")
    stack_reset(port)
    fixed: list = []
    t0 = time.monotonic()
    assert flood(stack, 32, 8, fixed) == [200] * 32
    fixed_s = time.monotonic() - t0
    fixed_engine = engine()
    assert fixed_engine["max_running"] == 3
    assert set(fixed) == {16}

    text = stack.gateway_config.read_text()
    stack.gateway_config.write_text(text.replace("max_sequences = 16\n",
                                                 'max_sequences = 16\ncapacity = "auto"\n'))
    stack.gateway.send(signal.SIGHUP)
    wait_until(lambda: readyz_upstreams(stack)["r0"]["capacity"] == "auto", 10, "the reload")
    wait_until(lambda: readyz_upstreams(stack)["r0"]["engine"].get("kind") == "vllm", 10,
               "a first scrape")
    # Auto: the limit starts at 4; the one call the engine cannot run waits
    # there, the next read says so, and the limit drops to the 3 it runs.
    # Nothing more is sent while those 4 are out: 16 calls stay in fairsched.
    stack_reset(port)
    held = open_calls(stack, "alice", 20, prefix="a")
    wait_until(lambda: (readyz_upstreams(stack)["r0"]["max_sequences"], engine()["running"],
                        engine()["waiting"], stack.queued("alice")) == (3, 3, 1, 16), 30,
               "the limit at what the engine runs, one call waiting there")
    assert engine()["max_waiting"] == 1  # against 13 fixed
    hang_up_all(stack, "alice", held, port)
    wait_until(idle, 30, "the held calls to end")
    stack_reset(port)
    auto: list = []
    t0 = time.monotonic()
    assert flood(stack, 32, 8, auto) == [200] * 32
    auto_s = time.monotonic() - t0
    auto_engine = engine()
    up = readyz_upstreams(stack)["r0"]
    assert auto_engine["max_running"] == 3, auto_engine  # the engine stayed busy
    # At most what the engine runs, and the one more that probes for room
    # (a call on its way to the engine may look like room for a scrape).
    assert auto_engine["max_waiting"] <= 3, (auto_engine, auto)
    assert max(auto) <= 8 and min(auto) >= 1, auto
    assert 1 <= up["max_sequences"] <= 4, up
    assert not up["engine"]["slow_start"]
    assert up["engine"]["scrape_error"] == ""
    # How long calls waited in the engine each way (call-seconds) is measured,
    # not asserted: docs/benchmarks.md, "Capacity that follows the engine".
    print(f"engine queue: fixed max {fixed_engine['max_waiting']} waiting "
          f"{fixed_engine['waiting_s']:.2f} call-s; auto max {auto_engine['max_waiting']} "
          f"waiting {auto_engine['waiting_s']:.2f} call-s, running "
          f"{auto_engine['running_s']:.2f} call-s; limits {sorted(set(auto))}; "
          f"flood {fixed_s:.2f} s fixed, {auto_s:.2f} s auto")


def stack_reset(port: int) -> None:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/stats/reset")
    c.getresponse().read()
    c.close()


def test_capacity_auto_holds_its_limit_when_the_metrics_cannot_be_read(stack: Stack):
    # No --engine-slots: the fake serves no /metrics (404).
    stack.start(replicas=1, upstream_capacity='"auto"', upstream_max_sequences=16,
                upstream_metrics_interval_ms=50)
    wait_until(lambda: readyz_upstreams(stack)["r0"]["engine"]["scrape_error"] != "", 5,
               "a failed scrape")
    up = readyz_upstreams(stack)["r0"]
    assert "GET /metrics" in up["engine"]["scrape_error"], up
    assert up["max_sequences"] == 4  # where it starts, held
    results: list = []
    assert flood(stack, 8, 4, results) == [200] * 8
    assert "capacity stays 4" in stack.gateway.output()


# --- the order passed to the engine -----------------------------------------------


@pytest.mark.parametrize("mode", ["off", "lower_first", "higher_first"])
def test_engine_priority_puts_a_light_tenants_call_before_a_floods_waiting_calls(
        stack: Stack, mode: str):
    # An engine that runs 2 at once and orders its waiting calls by their
    # "priority" as vLLM (lower_first) or SGLang (higher_first) do; the
    # gateway sends it 10 of a flood that never ends by itself (2 run, 8 wait
    # in the engine). Bob's call waits in the daemon until the test hangs up
    # one of the flood's running calls (its sequence goes to Bob), and then
    # one more each time the engine has refilled its freed slot, until Bob's
    # call is admitted: the order the engine admitted them in is the outcome,
    # whatever the speed of the machine.
    stack.start(replicas=1, upstream_max_sequences=10, upstream_engine_priority=f'"{mode}"',
                upstream_args=("--engine-slots", "2", "--token-ms", "10",
                               "--engine-priority", "lower_first" if mode == "off" else mode),
                **NO_TIMEOUTS)
    port = stack.replicas[0][1]

    def engine() -> dict:
        return stack.upstream_stats(port)["engine"]

    def admitted() -> list:
        return [e[1] for e in engine()["log"] if e[0] == "admit"]

    flood = open_calls(stack, "alice", 10, prefix="r")
    wait_until(lambda: (engine()["running"], engine()["waiting"]) == (2, 8), 30,
               "the flood to run 2 and wait 8 in the engine")
    results: list = []
    bob = threading.Thread(target=lambda: results.append(complete(stack, 1000, key="bob",
                                                                  tokens=2)))
    bob.start()
    wait_until(lambda: stack.queued("bob") == 1, 30, "Bob's call to wait in the daemon")
    hung: set[str] = set()
    while "r1000" not in (done := admitted()):
        victim = next(p for p in done if p in flood and p not in hung)
        hang_up(flood[victim])
        hung.add(victim)
        # The slot it frees is taken at once: something always waits there.
        wait_until(lambda: len(admitted()) > len(done), 30, "the engine to refill its slot")
    bob.join(60 * SLOW)
    assert results == [200]
    log = engine()["log"]
    for c in flood.values():
        hang_up(c)
    wait_until(lambda: stack.status()["queued"] == 0 and stack.status()["in_flight"] == 0, 30,
               "every call of the flood to end")
    arrived = next(i for i, e in enumerate(log) if e[:2] == ["arrive", "r1000"])
    bob_priority = log[arrived][2]
    waiting = {e[1] for e in log[:arrived] if e[0] == "arrive"} - {
        e[1] for e in log[:arrived] if e[0] == "admit"}
    admitted_after = [e[1] for e in log[arrived:] if e[0] == "admit"]
    priority = {e[1]: e[2] for e in log if e[0] == "arrive"}
    alice_priorities = sorted(v for k, v in priority.items() if k != "r1000")
    ahead = admitted_after[:admitted_after.index("r1000")]
    print(f"{mode}: {len(waiting)} of the flood waiting when bob's call arrived, {len(ahead)} "
          f"admitted before it ({len(hung)} of the flood's calls hung up)")
    # Bob's call was sent when the first hang-up freed a sequence: all the
    # flood but the 2 running (and the one admitted in its place) waited.
    assert len(waiting) >= 7, log
    if mode == "off":
        # The caller sent none: none reaches the engine, which serves first come.
        assert bob_priority == 0 and set(alice_priorities) == {0}
        assert len(ahead) == len(waiting), log
    else:
        # Bob has nothing running there: the engine's first choice among what
        # waits, ahead of every call of the flood's ranked below his (only a
        # call of the flood sent while it had none running ranks with his;
        # it arrived first, so it goes first).
        assert bob_priority == 0
        sign = 1 if mode == "lower_first" else -1
        assert all(sign * priority[p] <= 0 for p in ahead), (ahead, log)
        assert len(ahead) <= 1, log
        assert sign * alice_priorities[-1 if sign > 0 else 0] >= 5, alice_priorities


def test_a_callers_own_priority_reaches_the_engine_only_when_the_gateway_sets_none(stack: Stack):
    stack.start(replicas=1, upstream_args=("--engine-slots", "4"),
                upstream_engine_priority='"lower_first"')
    port = stack.replicas[0][1]
    s, _, b = stack.request("POST", "/v1/completions",
                            {"model": "m", "prompt": "jump", "max_tokens": 1, "priority": -100})
    assert s == 200, b
    log = stack.upstream_stats(port)["engine"]["log"]
    assert ["arrive", "jump", 0] in log, log  # the gateway's, not the caller's
    s, _, b = stack.request("POST", "/v1/completions",
                            {"model": "m", "prompt": "x", "priority": "high"})
    assert s == 400 and json.loads(b)["error"]["param"] == "priority", b


# --- embeddings ---------------------------------------------------------------------


def test_embeddings_are_scheduled_with_their_input_alone_and_settled_by_usage(stack: Stack):
    stack.start(threads=1)  # the headers before the settlement, as above
    s, h, b = stack.request("POST", "/v1/embeddings",
                            {"model": "embed", "input": ["first text", "second, longer text"]},
                            key="tokened")
    assert s == 200, b
    out = json.loads(b)
    assert [d["index"] for d in out["data"]] == [0, 1]
    assert len(out["data"][0]["embedding"]) == 4
    assert out["usage"]["prompt_tokens"] == 6
    assert "x-fairsched-overhead-ms" in h and "x-fairsched-queue-ms" in h
    # Reserved while it ran: the estimate (3 + 5 tokens), nothing for output.
    assert int(h["x-ratelimit-remaining-tokens"]) == 100000 - 8, h
    c = stack.tenant_counts("tokened")
    assert c["completed"] == 1 and c["queued"] == 0 and c["in_flight"] == 0
    # Then settled at what the upstream counted (6): the next request's
    # headers are 100000 − 6 − its own reservation (2 tokens).
    wait_until(lambda: stack.finals_taken() == 1, 10, "the daemon's completion to reach the gateway")
    s, h, b = stack.request("POST", "/v1/embeddings", {"model": "embed", "input": "12345678"},
                            key="tokened")
    assert s == 200, b
    assert int(h["x-ratelimit-remaining-tokens"]) == 100000 - 6 - 2, h
    s, _, b = stack.request("POST", "/v1/embeddings", {"model": "embed", "input": [1, 2, 3]})
    assert s == 200, b
    assert json.loads(b)["usage"]["prompt_tokens"] == 3


def test_embeddings_refuse_what_has_no_input_or_asks_to_stream(stack: Stack):
    stack.start()
    for body, param in (({"model": "e"}, "input"), ({"model": "e", "input": ""}, None),
                        ({"model": "e", "input": [{"x": 1}]}, "input"),
                        ({"model": "e", "input": []}, "input"),
                        ({"model": "e", "input": "x", "stream": True}, "stream")):
        s, _, b = stack.request("POST", "/v1/embeddings", body)
        if param is None:
            assert s == 200, b  # an empty string is one (estimated) token
            continue
        assert s == 400, (body, b)
        assert json.loads(b)["error"]["param"] == param, b
    # A key limited to other routes may not use it.
    assert stack.request("POST", "/v1/embeddings", {"model": "e", "input": "x"},
                         key="modelsonly")[0] == 403
    assert stack.request("GET", "/v1/embeddings")[0] == 405


# --- what the gateway's worker gives back -----------------------------------------


def test_an_assignment_the_gateway_ends_at_once_gives_its_sequence_back(stack: Stack):
    # A request another client submits to the gateway's endpoint is not the
    # gateway's: its worker ends it at once (EXECUTOR_FAILED). The sequence
    # the daemon counted for it must come back, or two of them leave the
    # gateway (2 sequences) no room for its own callers.
    if os.environ.get("FAIRSCHED_SANITIZED"):
        pytest.skip("the Python client cannot load a sanitized libfairsched into python3")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import fairsched
    stack.start(upstream_max_sequences=2)
    client = fairsched.Client.connect(stack.socket, name="foreign")
    try:
        tenant = client.open_tenant("foreign")
        for _ in range(4):
            done = client.submit_and_wait(tenant, "chat", [1, 2, 3], max_output_tokens=4,
                                          wait_timeout=10 * SLOW)
            assert done.status == fairsched.Status.EXECUTOR_FAILED, done
    finally:
        client.close()
    assert [w["free_sequences"] for w in stack.status()["workers"]] == [2]
    assert complete(stack, 1) == 200


def test_callers_who_all_hang_up_at_once_leave_no_call_running(stack: Stack):
    # 20 callers of the never-answering model, 8 of them running on the
    # upstream, all hang up at once, in no particular order: a sequence one
    # cancel frees may be assigned to a call whose caller is gone too, even
    # while its upstream call is being connected. Every upstream call must
    # still be closed and every assignment ended, by the hang-ups alone
    # (no timeout of the stack can end them). Five rounds.
    stack.start(**NO_TIMEOUTS)
    for round_ in range(5):
        calls = open_calls(stack, "alice", 20, prefix=f"r{round_}-")
        wait_until(lambda: stack.upstream_stats()["running"] == 8
                   and stack.tenant_counts("alice")["queued"] == 12, 30,
                   "8 calls running on the upstream and 12 queued")
        for c in calls.values():
            hang_up(c)

        def settled() -> bool:
            counts = stack.tenant_counts("alice")
            return (stack.upstream_stats()["running"] == 0 and counts["queued"] == 0
                    and counts["in_flight"] == 0)

        wait_until(settled, 30, "every call ended upstream and in the daemon")
        counts = stack.tenant_counts("alice")
        assert counts["completed"] == 0, counts
        assert counts["cancelled"] == 20 * (round_ + 1), counts


def test_a_burst_of_hang_ups_cancels_every_queued_request(stack: Stack):
    # 10,000 callers each wait on a streamed request (64 run on an upstream
    # that never answers, the rest queue in the daemon), then all hang up at
    # once: more cancels than the client's submission lanes hold. Every one
    # must reach the daemon (sent again when the lanes were full), and the
    # gateway's sequences must all come back.
    import asyncio
    import resource
    # A sanitized gateway takes minutes to accept 10,000 callers: fewer there
    # (the outcome is checked the same, the lanes rarely fill).
    n = 1500 if os.environ.get("FAIRSCHED_SANITIZED") else 10000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n + 1000:
        pytest.skip(f"needs {n + 1000} open files; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (n + 1000, hard))
    try:
        # Nothing here may time out while the callers connect, however long a
        # machine takes to open n connections: the 64 running calls wait on
        # the silent upstream until they are hung up, not for the stack's
        # usual 1.5 s (which ended them before the last callers were queued).
        stack.start(upstream_max_sequences=64, max_connections=n + 100,
                    request_timeout_ms=600000, upstream_response_timeout_ms=600000,
                    upstream_idle_timeout_ms=600000, header_timeout_ms=600000,
                    body_timeout_ms=600000,
                    log_level='"info"')
        body = json.dumps({"model": "hang", "prompt": "idle", "stream": True}).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {KEYS['alice'][0]}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()

        async def open_all() -> list:
            conns = []
            for i in range(0, n, 500):
                batch = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", stack.port)
                                               for _ in range(500)))
                for _, w in batch:
                    w.write(head + body)
                await asyncio.gather(*(w.drain() for _, w in batch))
                conns.extend(batch)
            return conns

        loop = asyncio.new_event_loop()
        try:
            conns = loop.run_until_complete(open_all())
            wait_until(lambda: sum(stack.tenant_counts("alice")[k]
                                   for k in ("queued", "in_flight")) == n, 120 * SLOW,
                       "every request queued or running")
            # None of them ended while the others connected.
            counts = stack.tenant_counts("alice")
            assert counts["completed"] == 0 and counts["cancelled"] == 0, counts
            for _, w in conns:
                w.close()
            loop.run_until_complete(asyncio.sleep(0.1))
        finally:
            loop.close()
        wait_until(lambda: sum(stack.tenant_counts("alice")[k]
                               for k in ("queued", "in_flight")) == 0, 30 * SLOW,
                   "every request cancelled")
        assert stack.tenant_counts("alice")["cancelled"] == n
        assert [w["free_sequences"] for w in stack.status()["workers"]] == [64]
        retried = re.findall(r"(\d+) cancels found the submission lanes full",
                             stack.gateway.output())
        print(f"cancels sent again: {retried or 'none'}")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
