"""The asyncio API: AsyncClient (client role) and AsyncWorker (worker role).

AsyncClient registers the client's completion descriptor in the running
event loop (``loop.add_reader``): one reader polls every completion and
hands each to its request — no thread per request, no busy loop. Many tasks
share one client:

    client = await AsyncClient.connect("/run/fairsched/fairsched.sock", name="frontend")
    acme = await client.open_tenant("acme")
    request = client.submit(acme, "chat", prompt, max_output_tokens=256, stream=True)
    async for chunk in request:        # the output tokens, in order, as generated
        send(chunk.tokens)
    final = await request.completion() # status, usage

Cancelling the task that awaits a request (``await request`` /
``request.completion()`` / ``async for``) cancels the request at the daemon;
its final completion (CANCELLED) still arrives, and awaiting the request
again returns it. Wrap the await in ``asyncio.shield`` to stop waiting
without cancelling.

An AsyncClient belongs to the event loop it was connected in; call it from
that loop's thread only.

This module is the asyncio API's home; its classes are defined in
_aio_client.py (AsyncClient), _aio_request.py (Request), _aio_retry.py
(RetryingStream), _aio_worker.py (AsyncWorker) and _aio_base.py
(Connecting).
"""

from __future__ import annotations

from ._aio_base import Connecting as Connecting
from ._aio_client import DEFAULT_STREAM_BUFFER_TOKENS as DEFAULT_STREAM_BUFFER_TOKENS
from ._aio_client import AsyncClient as AsyncClient
from ._aio_request import Request as Request
from ._aio_retry import RetryingStream as RetryingStream
from ._aio_retry import _Retries as _Retries
from ._aio_worker import AsyncWorker as AsyncWorker

# The package's names the asyncio API uses, importable from here too
# (``from fairsched.aio import Completion``).
from ._common import DEFAULT_SOCKET as DEFAULT_SOCKET
from ._common import POLL_BATCH as POLL_BATCH
from ._common import U32 as U32
from ._common import check_int as check_int
from ._common import off_loop as off_loop
from ._common import raise_error as raise_error
from ._common import seconds_to_ns as seconds_to_ns
from ._types import Completion as Completion
from ._types import Status as Status
from ._types import Tenant as Tenant
from ._types import WorkerStats as WorkerStats
from ._types import WorkItem as WorkItem
from .client import Client as Client
from .client import Params as Params
from .client import Prompt as Prompt
from .errors import FairschedError as FairschedError
from .errors import InvalidArgument as InvalidArgument
from .errors import NotConnected as NotConnected
from .errors import RingFull as RingFull
from .errors import TimedOut as TimedOut
from .retry import RetryBudget as RetryBudget
from .retry import RetryOutcome as RetryOutcome
from .retry import RetryPolicy as RetryPolicy
from .retry import RetryStop as RetryStop
from .retry import retry_delay as retry_delay
from .worker import Worker as Worker
