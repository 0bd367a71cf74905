"""Prometheus metrics of one broker.

Each broker owns a ``CollectorRegistry`` of its own, never the process-global one, so several
brokers (tests run many in one process) never share or collide on series. Counters are bumped by
one-line hooks where things happen (a send accepted, a message delivered or removed, a connection
opened, a store commit, an error sent to a client). The per-message counters (messages in and
out, deliveries) are plain integers bumped on the event loop, without the lock a Prometheus
``Counter`` takes per increment, and turned into counter families when scraped (the metric names
and labels are those of a ``Counter``). Message counts per entity and the number of
open connections are read from the partition actors and the broker when scraped, so they cannot
drift from the broker's own state. Scrapes run on the event loop, like the actors, so reading
their state needs no lock.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Iterable, Sequence, Sized
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sodalite.server.entity_settings import SubQueue
from sodalite.server.partitioned_actor import EntityActor
from sodalite.server.registry import Entity
from sodalite.server.store_worker import StoreWorker


class Observed(Protocol):
    """What the metrics read of the broker (``broker.Broker``)."""

    @property
    def entities(self) -> dict[str, Entity]: ...

    @property
    def connections(self) -> Sized: ...

    @property
    def workers(self) -> Sequence[StoreWorker]: ...

    @property
    def worker(self) -> StoreWorker: ...

    def entity(self, path: str) -> Entity | None: ...

AnyActor = EntityActor

# How a sub-queue is spelled in an entity label: the SDK's path suffixes (sdk-wire-contract.md 1.2).
SUB_QUEUE_SUFFIX = {
    SubQueue.MAIN: "",
    SubQueue.DEAD_LETTER: "/$DeadLetterQueue",
    SubQueue.TRANSFER_DEAD_LETTER: "/$Transfer/$DeadLetterQueue",
}
CONTENT_TYPE = CONTENT_TYPE_LATEST  # of what render() returns
# A local SQLite commit with fsync takes about a millisecond; a stalled disk takes seconds.
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class BrokerMetrics:
    def __init__(self, broker: Observed) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=True)
        self.messages_in = Tallies("sodalite_messages_in", "Messages accepted from senders (acknowledged sends)",
                                   "entity")
        self.messages_out = Tallies(
            "sodalite_messages_out", "Messages removed by receivers: completed, or received in ReceiveAndDelete",
            "entity")
        self.deliveries = Tallies("sodalite_deliveries", "Messages transferred to receivers, redeliveries included",
                                  "entity")
        self.registry.register(_TalliesCollector((self.messages_in, self.messages_out, self.deliveries)))
        self.connections = Counter("sodalite_connections", "AMQP connections opened (after any TLS handshake)",
                                   registry=self.registry)
        self.commit_seconds = Histogram("sodalite_store_commit_seconds",
                                        "Duration of one messaging-store transaction (a group commit)",
                                        buckets=COMMIT_BUCKETS, registry=self.registry)
        self.errors = Counter("sodalite_errors", "Errors sent to AMQP clients, by AMQP condition", ["condition"],
                              registry=self.registry)
        self.registry.register(_LiveCollector(broker))
        self.watch(broker.worker)

    def watch(self, worker: StoreWorker) -> None:
        worker.on_commit = self.commit_seconds.observe

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def entity_label(self, actor: AnyActor, sub_queue: SubQueue = SubQueue.MAIN) -> str:
        entity = self.broker.entity(actor.ref.entity)
        name = entity.name if entity is not None else actor.ref.entity
        return name + SUB_QUEUE_SUFFIX[sub_queue]

    # ---- hooks ------------------------------------------------------------------------------------

    def connection_opened(self) -> None:
        self.connections.inc()

    def count_in(self, sent: asyncio.Future[None], entity: str, messages: int) -> None:
        """Count ``messages`` sent to ``entity`` once ``sent`` (their commit) succeeds."""
        sent.add_done_callback(lambda f: None if f.cancelled() or f.exception() is not None
                               else self.messages_in.labels(entity).inc(messages))

    def count_out(self, settled: asyncio.Future[None], actor: AnyActor, sub_queue: SubQueue,
                  messages: int = 1) -> None:
        """Count messages removed by a receiver once the removal (``settled``) has committed."""
        label = self.entity_label(actor, sub_queue)
        settled.add_done_callback(lambda f: None if f.cancelled() or f.exception() is not None
                                  else self.messages_out.labels(label).inc(messages))

    def consumer_counters(self, actor: AnyActor, sub_queue: SubQueue) -> tuple[Tally, Tally]:
        """The deliveries and messages-out counters of one entity (sub-queue), labelled once: a
        receiver link keeps them for its life instead of looking the label up per message."""
        label = self.entity_label(actor, sub_queue)
        return self.deliveries.labels(label), self.messages_out.labels(label)

    @staticmethod
    def count_out_to(settled: asyncio.Future[None], messages_out: Tally) -> None:
        """:meth:`count_out` with the counter already labelled (:meth:`consumer_counters`)."""
        settled.add_done_callback(lambda f: None if f.cancelled() or f.exception() is not None
                                  else messages_out.inc())

    def delivered(self, actor: AnyActor, sub_queue: SubQueue, removed: bool) -> None:
        """A transfer to a receiver; ``removed`` when it was received in ReceiveAndDelete (already committed)."""
        label = self.entity_label(actor, sub_queue)
        self.deliveries.labels(label).inc()
        if removed:
            self.messages_out.labels(label).inc()

    def error_sent(self, condition: str) -> None:
        self.errors.labels(condition).inc()


class Tally:
    """One counter's value, bumped on the event loop (one thread: no lock) and read when scraped."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class Tallies:
    """A counter with one label, as :class:`Tally` per label value (``labels`` as on a ``Counter``)."""

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self._by: dict[str, Tally] = {}

    def labels(self, value: str) -> Tally:
        tally = self._by.get(value)
        if tally is None:
            tally = self._by[value] = Tally()
        return tally

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, tally in list(self._by.items()):
            family.add_metric([value], tally.value)
        return family

    def collect(self) -> list[Metric]:
        """As a ``Counter``'s: the family, with ``<name>_total`` samples per label value."""
        return [self.family()]


class _TalliesCollector(Collector):
    def __init__(self, tallies: tuple[Tallies, ...]) -> None:
        self.tallies = tallies

    def collect(self) -> Iterable[Metric]:
        return [tallies.family() for tallies in self.tallies]


class ScrapeTimeCollector(Collector):
    """A collector whose families are built and filled at each scrape (:meth:`collect`); at
    registration, :meth:`describe` names them, empty."""

    def describe(self) -> Iterable[Metric]:
        return self._families()

    @staticmethod
    @abstractmethod
    def _families() -> Sequence[Metric]:
        """The collector's families, empty (each collector names its own)."""


class _LiveCollector(ScrapeTimeCollector):
    """Gauges computed at scrape time from the broker's own state."""

    def __init__(self, broker: Observed) -> None:
        self.broker = broker

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        active, dead_letter, transfer_dead_letter, scheduled, *_ = families
        for entity in list(self.broker.entities.values()):
            counts = entity.actor.counts()
            active.add_metric([entity.name], counts["active"])
            dead_letter.add_metric([entity.name], counts["dead_letter"])
            transfer_dead_letter.add_metric([entity.name], counts["transfer_dead_letter"])
            scheduled.add_metric([entity.name], counts["scheduled"])
        families[4].add_metric([], len(self.broker.connections))
        for worker in self.broker.workers:
            # A store that counts its network round trips (PostgreSQL: one per pipeline sync or
            # single statement, maintenance included) reports them; an embedded store has none.
            round_trips = getattr(worker.store, "round_trips", None)
            if isinstance(round_trips, int):
                families[5].add_metric([worker.name], round_trips)
        return families

    @staticmethod
    def _families() -> list[GaugeMetricFamily | CounterMetricFamily]:
        return [
            GaugeMetricFamily("sodalite_active_messages", "Active messages (locked and deferred included)",
                              labels=["entity"]),
            GaugeMetricFamily("sodalite_dead_letter_messages", "Messages in the dead-letter queue",
                              labels=["entity"]),
            GaugeMetricFamily("sodalite_transfer_dead_letter_messages",
                              "Messages in the transfer dead-letter queue", labels=["entity"]),
            GaugeMetricFamily("sodalite_scheduled_messages", "Scheduled messages not yet enqueued", labels=["entity"]),
            GaugeMetricFamily("sodalite_connections_open", "Open AMQP connections", labels=[]),
            CounterMetricFamily("sodalite_store_round_trips", "Network round trips to the messaging store "
                                "(a pipelined batch or read is one)", labels=["store"]),
        ]
