"""The client side of the benchmarks: the official SDK (sync and aio) and pika, doing the same work.

Each function times its phase from its first message to its last with a :class:`harness.Meter`
(broker CPU over the same span) and returns per-operation latencies in seconds. Handler setup and
teardown stay outside the measured span: the SDK spends about 50 ms per frame while it opens a link.

- SDK send: messages of ``size`` bytes in batches (``create_message_batch``, as large as the broker
  allows, about 250 messages of 1 KB); one latency sample per batch.
- SDK receive + complete, sync: ``receivers`` threads, each with its own client and PeekLock receiver,
  each completing one message at a time (the sync SDK waits for every settlement's echo).
- SDK receive + complete, aio: one receiver; each received batch is completed concurrently.
- Several broker nodes (one queue on a shared database): the receive functions take a list of
  connection strings, receivers spread over them round robin (aio: one receiver per node), all
  counting towards the same total.
- pika: a quorum queue; publisher confirms, a batch of ``batch`` messages published and then waited
  for (as the SDK waits for a batch's disposition); ``receivers`` consumer threads with manual acks and
  a prefetch of ``prefetch``. AMQP 0-9-1 acks are not confirmed, so there is no per-ack latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from harness import Meter

STALL_SECONDS = 60.0  # a phase that makes no progress this long fails instead of hanging


class Stalled(RuntimeError):
    pass


# ---- official SDK -------------------------------------------------------------------------------


def _sdk_batches(sender: Any, count: int, body: bytes, make: Callable[[int], ServiceBusMessage] | None) -> list[Any]:
    batches, remaining, i = [], count, 0
    while remaining:
        batch = sender.create_message_batch()
        while remaining:
            try:
                batch.add_message(make(i) if make else ServiceBusMessage(body))
            except ValueError:
                break
            remaining -= 1
            i += 1
        batches.append(batch)
    return batches


def sdk_send(meter: Meter, connection_string: str, queue: str, count: int, size: int = 1024) -> list[float]:
    body = b"x" * size
    latencies: list[float] = []
    with ServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_sender(queue) as sender:
        batches = _sdk_batches(sender, count, body, None)
        meter.start()
        for batch in batches:
            t = time.perf_counter()
            sender.send_messages(batch)
            latencies.append(time.perf_counter() - t)
        meter.stop()
    return latencies


def _fill_worker(connection_string: str, queue: str, count: int, size: int, sent: Any) -> None:
    body = b"x" * size
    with ServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_sender(queue) as sender:
        for start in range(0, count, 2000):
            take = min(2000, count - start)
            for batch in _sdk_batches(sender, take, body, None):
                sender.send_messages(batch)
            with sent.get_lock():
                sent.value += take


def sdk_fill(connection_string: str, queue: str, count: int, size: int = 1024, senders: int = 2,
             progress: Callable[[int], None] | None = None) -> None:
    """Batch-send ``count`` messages from ``senders`` processes (the SDK's client work is CPU-bound)."""
    ctx = multiprocessing.get_context("spawn")
    sent = ctx.Value("q", 0)
    share = [count // senders + (1 if i < count % senders else 0) for i in range(senders)]
    procs = [ctx.Process(target=_fill_worker, args=(connection_string, queue, n, size, sent), daemon=True)
             for n in share]
    for p in procs:
        p.start()
    try:
        while any(p.is_alive() for p in procs):
            time.sleep(0.5)
            if progress:
                progress(int(sent.value))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
    if sent.value != count or any(p.exitcode for p in procs):
        raise RuntimeError(f"the fill stopped after {sent.value} of {count} messages")


def sdk_aio_send(meter: Meter, connection_string: str, queue: str, count: int, size: int = 1024) -> list[float]:
    return asyncio.run(_aio_send(meter, connection_string, queue, count, size))


async def _aio_send(meter: Meter, connection_string: str, queue: str, count: int, size: int) -> list[float]:
    body = b"x" * size
    latencies: list[float] = []
    async with AsyncServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_sender(queue) as sender:
        batches, remaining = [], count
        while remaining:
            batch = await sender.create_message_batch()
            while remaining:
                try:
                    batch.add_message(ServiceBusMessage(body))
                except ValueError:
                    break
                remaining -= 1
            batches.append(batch)
        meter.start()
        for batch in batches:
            t = time.perf_counter()
            await sender.send_messages(batch)
            latencies.append(time.perf_counter() - t)
        meter.stop()
    return latencies


def sdk_receive_threads(meter: Meter | None, connection_string: str | Sequence[str], queue: str, count: int,
                        receivers: int = 4, prefetch: int = 100, on_message: Callable[[Any], None] | None = None,
                        first: list[float] | None = None) -> list[float]:
    """``receivers`` sync receivers in threads, PeekLock, completing one message at a time (spread
    round robin over the nodes when ``connection_string`` is a list)."""
    nodes = [connection_string] if isinstance(connection_string, str) else list(connection_string)
    lock = threading.Lock()
    done = [0]
    finished = threading.Event()
    latencies: list[float] = []
    errors: list[BaseException] = []
    ready = threading.Barrier(receivers + 1)
    last_progress = [time.monotonic()]

    def run(connection_string: str) -> None:
        try:
            with ServiceBusClient.from_connection_string(connection_string) as client, \
                    client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                                              prefetch_count=prefetch) as receiver:
                ready.wait(120)
                while not finished.is_set():
                    batch = receiver.receive_messages(max_message_count=prefetch, max_wait_time=1)
                    if not batch and time.monotonic() - last_progress[0] > STALL_SECONDS:
                        raise Stalled(f"only {done[0]} of {count} messages came back")
                    for m in batch:
                        if first is not None and not first:
                            first.append(time.perf_counter())
                        if on_message:
                            on_message(m)
                        t = time.perf_counter()
                        receiver.complete_message(m)
                        lat = time.perf_counter() - t
                        with lock:
                            latencies.append(lat)
                            done[0] += 1
                            last_progress[0] = time.monotonic()
                            if done[0] >= count:
                                finished.set()
        except BaseException as exc:
            errors.append(exc)
            finished.set()
            ready.abort()

    threads = [threading.Thread(target=run, args=(nodes[i % len(nodes)],), daemon=True) for i in range(receivers)]
    for t in threads:
        t.start()
    try:
        ready.wait(120)
    except threading.BrokenBarrierError:
        pass
    if meter:
        meter.start()
    finished.wait()
    if meter:
        meter.stop()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return latencies


def sdk_aio_receive(meter: Meter, connection_string: str | Sequence[str], queue: str, count: int,
                    prefetch: int = 300) -> list[float]:
    """One aio receiver (one per node when ``connection_string`` is a list, sharing ``prefetch``)."""
    nodes = [connection_string] if isinstance(connection_string, str) else list(connection_string)
    return asyncio.run(_aio_receive(meter, nodes, queue, count, max(1, prefetch // len(nodes))))


async def _aio_receive(meter: Meter, nodes: list[str], queue: str, count: int, prefetch: int) -> list[float]:
    latencies: list[float] = []

    async def complete(receiver: Any, message: Any) -> None:
        t = time.perf_counter()
        await receiver.complete_message(message)
        latencies.append(time.perf_counter() - t)

    done = [0]
    last = [time.monotonic()]

    async def run(receiver: Any) -> None:
        while done[0] < count:
            batch = await receiver.receive_messages(max_message_count=prefetch, max_wait_time=1)
            if not batch:
                if time.monotonic() - last[0] > STALL_SECONDS:
                    raise Stalled(f"only {done[0]} of {count} messages came back")
                continue
            last[0] = time.monotonic()
            await asyncio.gather(*(complete(receiver, m) for m in batch))
            done[0] += len(batch)

    async with contextlib.AsyncExitStack() as stack:
        receivers = []
        for connection_string in nodes:
            client = await stack.enter_async_context(AsyncServiceBusClient.from_connection_string(connection_string))
            receivers.append(await stack.enter_async_context(client.get_queue_receiver(queue, prefetch_count=prefetch)))
        meter.start()
        last[0] = time.monotonic()
        await asyncio.gather(*(run(r) for r in receivers))
        meter.stop()
    return latencies


# ---- RabbitMQ (pika) ---------------------------------------------------------------------------


def pika_publish(meter: Meter | None, params: Any, queue: str, count: int, size: int = 1024, batch: int = 250,
                 headers: Callable[[], dict[str, Any]] | None = None) -> list[float]:
    """Publish ``count`` persistent messages with publisher confirms, ``batch`` at a time."""
    import pika

    body = b"x" * size
    latencies: list[float] = []
    state: dict[str, Any] = {"published": 0, "confirmed": 0, "t": 0.0, "error": None}
    props = pika.BasicProperties(delivery_mode=2)

    def publish_batch(ch: Any) -> None:
        k = min(batch, count - state["published"])
        state["t"] = time.perf_counter()
        for _ in range(k):
            p = pika.BasicProperties(delivery_mode=2, headers=headers()) if headers else props
            ch.basic_publish("", queue, body, p)
        state["published"] += k

    def on_confirm(frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            state["error"] = RuntimeError("RabbitMQ nacked a publish")
            conn.close()
            return
        state["confirmed"] = method.delivery_tag if method.multiple else state["confirmed"] + 1
        if state["confirmed"] >= state["published"]:
            latencies.append(time.perf_counter() - state["t"])
            if state["published"] < count:
                publish_batch(frame_channel[0])
            else:
                if meter:
                    meter.stop()
                conn.close()

    frame_channel: list[Any] = []

    def on_channel(ch: Any) -> None:
        frame_channel.append(ch)

        def confirmed_mode(_frame: Any) -> None:
            if meter:
                meter.start()
            publish_batch(ch)

        ch.confirm_delivery(on_confirm, callback=confirmed_mode)

    def on_open(c: Any) -> None:
        c.channel(on_open_callback=on_channel)

    def on_error(_c: Any, exc: Any) -> None:
        state["error"] = RuntimeError(f"pika: {exc}")
        conn.ioloop.stop()

    conn = pika.SelectConnection(params, on_open_callback=on_open, on_open_error_callback=on_error,
                                 on_close_callback=lambda _c, _r: conn.ioloop.stop())
    conn.ioloop.start()
    if state["error"]:
        raise state["error"]
    return latencies


def pika_fill(params: Any, queue: str, count: int, size: int = 1024, publishers: int = 2,
              progress: Callable[[int], None] | None = None) -> None:
    share = [count // publishers + (1 if i < count % publishers else 0) for i in range(publishers)]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            step = 20_000
            for start in range(0, n, step):
                pika_publish(None, params, queue, min(step, n - start), size, batch=1000)
                if progress:
                    progress(min(step, n - start))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in share]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def pika_consume_threads(meter: Meter | None, params: Any, queue: str, count: int, receivers: int = 4,
                         prefetch: int = 100, on_message: Callable[[Any, float], None] | None = None,
                         first: list[float] | None = None) -> None:
    """``receivers`` consumer threads, manual ack of each message."""
    import pika

    lock = threading.Lock()
    done = [0]
    finished = threading.Event()
    errors: list[BaseException] = []
    ready = threading.Barrier(receivers + 1)
    last_progress = [time.monotonic()]

    def run() -> None:
        try:
            conn = pika.BlockingConnection(params)
            ch = conn.channel()
            ch.basic_qos(prefetch_count=prefetch)

            def handle(channel: Any, method: Any, properties: Any, _body: bytes) -> None:
                now = time.time()
                if first is not None and not first:
                    first.append(time.perf_counter())
                if on_message:
                    on_message(properties, now)
                channel.basic_ack(method.delivery_tag)
                with lock:
                    done[0] += 1
                    last_progress[0] = time.monotonic()
                    if done[0] >= count:
                        finished.set()

            ready.wait(120)
            ch.basic_consume(queue, handle, auto_ack=False)
            while not finished.is_set():
                conn.process_data_events(time_limit=0.2)
                if time.monotonic() - last_progress[0] > STALL_SECONDS:
                    raise Stalled(f"only {done[0]} of {count} messages came back")
            conn.close()
        except BaseException as exc:
            errors.append(exc)
            finished.set()
            ready.abort()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(receivers)]
    for t in threads:
        t.start()
    try:
        ready.wait(120)
    except threading.BrokenBarrierError:
        pass
    if meter:
        meter.start()
    finished.wait()
    if meter:
        meter.stop()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]


# ---- official SDK, one process per client --------------------------------------------------------


def _client_process(role: str, mode: str, connection_string: str, queue: str, share: int, count: int, size: int,
                    prefetch: int, ready: Any, go: Any, done: Any, finished: Any, out: Any) -> None:
    """One SDK client in a process of its own: ``role`` send (``share`` messages in batches) or receive
    (PeekLock, completing until ``count`` messages are done over every process); ``mode`` sync or aio.
    Puts (latencies, CPU seconds of this process over its measured span, error or None) on ``out``."""
    try:
        if mode == "sync":
            latencies, cpu = _sync_client(role, connection_string, queue, share, count, size, prefetch, ready, go,
                                          done, finished)
        else:
            latencies, cpu = asyncio.run(_aio_client(role, connection_string, queue, share, count, size, prefetch,
                                                     ready, go, done, finished))
        out.put((latencies, cpu, None))
    except BaseException as exc:
        out.put(([], 0.0, f"{role} client ({mode}): {type(exc).__name__}: {exc}"))
        ready.release()
        finished.set()


def _count_done(done: Any, finished: Any, k: int, count: int) -> None:
    with done.get_lock():
        done.value += k
        if done.value >= count:
            finished.set()


class _StallWatch:
    """Raises :class:`Stalled` once the shared count made no progress for STALL_SECONDS."""

    def __init__(self, done: Any, count: int) -> None:
        self.done, self.count = done, count
        self.seen, self.at = -1, time.monotonic()

    def check(self) -> None:
        value = int(self.done.value)
        if value != self.seen:
            self.seen, self.at = value, time.monotonic()
        elif time.monotonic() - self.at > STALL_SECONDS:
            raise Stalled(f"only {value} of {self.count} messages came back")


def _sync_client(role: str, connection_string: str, queue: str, share: int, count: int, size: int, prefetch: int,
                 ready: Any, go: Any, done: Any, finished: Any) -> tuple[list[float], float]:
    latencies: list[float] = []
    with ServiceBusClient.from_connection_string(connection_string) as client:
        if role == "send":
            with client.get_queue_sender(queue) as sender:
                batches = _sdk_batches(sender, share, b"x" * size, None)
                ready.release()
                go.wait()
                cpu0 = time.process_time()
                for batch in batches:
                    t = time.perf_counter()
                    sender.send_messages(batch)
                    latencies.append(time.perf_counter() - t)
                _count_done(done, finished, share, count)
                return latencies, time.process_time() - cpu0
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                                       prefetch_count=prefetch) as receiver:
            ready.release()
            go.wait()
            cpu0 = time.process_time()
            watch = _StallWatch(done, count)
            while not finished.is_set():
                batch = receiver.receive_messages(max_message_count=prefetch, max_wait_time=1)
                if not batch:
                    watch.check()
                for m in batch:
                    t = time.perf_counter()
                    receiver.complete_message(m)
                    latencies.append(time.perf_counter() - t)
                    _count_done(done, finished, 1, count)
            return latencies, time.process_time() - cpu0


async def _aio_client(role: str, connection_string: str, queue: str, share: int, count: int, size: int,
                      prefetch: int, ready: Any, go: Any, done: Any, finished: Any) -> tuple[list[float], float]:
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    async with AsyncServiceBusClient.from_connection_string(connection_string) as client:
        if role == "send":
            async with client.get_queue_sender(queue) as sender:
                batches, remaining = [], share
                while remaining:
                    batch = await sender.create_message_batch()
                    while remaining:
                        try:
                            batch.add_message(ServiceBusMessage(b"x" * size))
                        except ValueError:
                            break
                        remaining -= 1
                    batches.append(batch)
                ready.release()
                await loop.run_in_executor(None, go.wait)
                cpu0 = time.process_time()
                for batch in batches:
                    t = time.perf_counter()
                    await sender.send_messages(batch)
                    latencies.append(time.perf_counter() - t)
                _count_done(done, finished, share, count)
                return latencies, time.process_time() - cpu0

        async def complete(receiver: Any, message: Any) -> None:
            t = time.perf_counter()
            await receiver.complete_message(message)
            latencies.append(time.perf_counter() - t)

        async with client.get_queue_receiver(queue, prefetch_count=prefetch) as receiver:
            ready.release()
            await loop.run_in_executor(None, go.wait)
            cpu0 = time.process_time()
            watch = _StallWatch(done, count)
            while not finished.is_set():
                got = await receiver.receive_messages(max_message_count=prefetch, max_wait_time=1)
                if not got:
                    watch.check()
                    continue
                await asyncio.gather(*(complete(receiver, m) for m in got))
                _count_done(done, finished, len(got), count)
            return latencies, time.process_time() - cpu0


def sdk_processes(meter: Meter, connection_string: str, queue: str, count: int, role: str, mode: str,
                  processes: int = 4, size: int = 1024, prefetch: int = 300) -> tuple[list[float], float]:
    """``processes`` SDK clients, each a process of its own (the SDK's client work is CPU-bound and
    holds its process's GIL): senders each sending a share of ``count`` in batches, or PeekLock
    receivers each completing until ``count`` messages are done over all of them (sync: one message
    at a time; aio: each received batch concurrently). The meter spans from the moment every client
    is connected to the last message; returns the latencies and the clients' CPU seconds summed."""
    ctx = multiprocessing.get_context("spawn")
    ready, go, finished = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    done, out = ctx.Value("q", 0), ctx.Queue()
    shares = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
    procs = [ctx.Process(target=_client_process, daemon=True,
                         args=(role, mode, connection_string, queue, share, count, size, prefetch, ready, go, done,
                               finished, out))
             for share in shares]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=180):
                raise Stalled("an SDK client process did not connect within 180 s")
        meter.start()
        go.set()
        while not finished.wait(0.5):
            if not any(p.is_alive() for p in procs):
                break
        meter.stop()
        results = [out.get(timeout=120) for _ in procs]
    finally:
        finished.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(10)
    errors = [error for _, _, error in results if error]
    if errors:
        raise RuntimeError("; ".join(errors))
    if done.value < count:
        raise Stalled(f"only {done.value} of {count} messages were done")
    return [lat for latencies, _, _ in results for lat in latencies], sum(cpu for _, cpu, _ in results)
