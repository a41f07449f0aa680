#!/usr/bin/env python3
"""An OpenAI-style streaming HTTP frontend on plain asyncio, in front of fairsched.

Each API key maps to a tenant; the frontend submits on the tenant's behalf,
streams the tokens back as server-sent events as the engine produces them,
answers rejections with the status and retry headers the library gives
(429 + retry-after, 503, ...), and cancels the request when the caller hangs
up. One AsyncClient serves every connection.

    python3 examples/python_frontend.py --socket /run/fairsched/fairsched.sock \
        --key sk-acme=acme --key sk-globex=globex:paid --port 8080
    curl -N -H 'Authorization: Bearer sk-acme' -d '{"prompt": [1, 2, 3], "max_tokens": 16, "stream": true}' \
        http://127.0.0.1:8080/v1/completions

Prompts are token ids: tokenizing is the engine's business, not the scheduler's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Optional, Sequence

import fairsched
from fairsched import AsyncClient, Completion, Status

Json = dict[str, Any]
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
           404: "Not Found", 429: "Too Many Requests", 499: "Client Closed Request",
           500: "Internal Server Error", 503: "Service Unavailable", 504: "Gateway Timeout"}


class Frontend:
    def __init__(self, client: AsyncClient, endpoint: str, keys: dict[str, tuple[str, Optional[str]]]):
        self.client = client
        self.endpoint = endpoint
        self.keys = keys  # API key -> (tenant, tier)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip()
                       for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if (method, path) != ("POST", "/v1/completions"):
                return await self.answer(writer, 404, {"error": "POST /v1/completions only"})
            key = headers.get("authorization", "").removeprefix("Bearer ").strip()
            if key not in self.keys:
                return await self.answer(writer, 401, {"error": "unknown API key"})
            await self.complete(writer, *self.keys[key], json.loads(body))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the caller went away
        except (ValueError, KeyError, TypeError) as e:
            await self.answer(writer, 400, {"error": f"bad request: {e}"})
        finally:
            writer.close()

    async def complete(self, writer: asyncio.StreamWriter, tenant_name: str, tier: Optional[str],
                       body: Json) -> None:
        try:
            tenant = await self.client.open_tenant(tenant_name, tier)
            request = self.client.submit(
                tenant, self.endpoint, body["prompt"], max_output_tokens=int(body["max_tokens"]),
                stream=True, params=json.dumps(body.get("params", {})))
        except fairsched.FairschedError as e:  # no completion will come: answer now
            return await self.answer(writer, fairsched.http_status_for_error(e), {"error": str(e)})
        try:
            if body.get("stream"):
                await self.stream(writer, request)
            else:
                tokens = [t async for t in request.tokens()]
                final = await request
                await self.answer(writer, final.http_status(), result(final, tokens),
                                  final.http_headers())
        finally:
            request.cancel()  # the caller hung up (or we failed): free the engine; no-op when done

    async def stream(self, writer: asyncio.StreamWriter, request: fairsched.Request) -> None:
        first = await anext(request, None)
        if first is None:  # ended before any token: a rejection (or an empty answer)
            final = await request
            if final.status != Status.OK:
                return await self.answer(writer, final.http_status(), result(final, []),
                                         final.http_headers())
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n")
        if first is not None:
            await event(writer, {"tokens": first.tokens})
            async for chunk in request:
                await event(writer, {"tokens": chunk.tokens})
        final = await request
        await event(writer, result(final, None))
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()

    async def answer(self, writer: asyncio.StreamWriter, status: int, doc: Json,
                     headers: Sequence[tuple[str, str]] = ()) -> None:
        data = json.dumps(doc).encode()
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}",
                "Content-Type: application/json", f"Content-Length: {len(data)}",
                "Connection: close"] + [f"{k}: {v}" for k, v in headers]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        await writer.drain()


async def event(writer: asyncio.StreamWriter, doc: Json) -> None:
    writer.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
    await writer.drain()  # raises ConnectionError when the caller is gone


def result(final: Completion, tokens: Optional[list[int]]) -> Json:
    doc: Json = {"status": final.status.name,
                 "usage": {"prompt_tokens": final.input_tokens,
                           "completion_tokens": final.output_tokens},
                 "time_to_first_token_s": final.time_to_first_token}
    if tokens is not None:
        doc["tokens"] = tokens
    if final.retry_after:
        doc["retry_after_s"] = final.retry_after
    return doc


async def main() -> int:
    p = argparse.ArgumentParser(description="An OpenAI-style streaming frontend over fairsched")
    p.add_argument("--socket", default=fairsched.DEFAULT_SOCKET)
    p.add_argument("--endpoint", default="chat")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--key", action="append", default=[], metavar="KEY=TENANT[:TIER]")
    args = p.parse_args()
    keys = {}
    for spec in args.key:
        key, _, tenant = spec.partition("=")
        name, _, tier = tenant.partition(":")
        keys[key] = (name, tier or None)
    client = await AsyncClient.connect(args.socket, name="python-frontend", reconnect=True)
    frontend = Frontend(client, args.endpoint, keys)
    server = await asyncio.start_server(frontend.handle, args.host, args.port)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except KeyboardInterrupt:
        pass
