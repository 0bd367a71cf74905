"""The cross-store gate a backup closes (server/store_worker.py ``CrossStoreGate``)."""

from __future__ import annotations

import asyncio

from sodalite.server.store_worker import CrossStoreGate


def test_a_closer_waits_for_the_spans_under_way_and_new_spans_wait_for_it() -> None:
    async def scenario() -> list[str]:
        gate = CrossStoreGate()
        said: list[str] = []
        halfway = asyncio.Event()
        finish = asyncio.Event()

        async def move() -> None:
            async with gate.spanning():
                said.append("append")
                halfway.set()
                await finish.wait()
                said.append("delete")

        async def backup() -> None:
            async with gate.closed():
                said.append("snapshot")
                await asyncio.sleep(0.01)
                said.append("reopened")

        async def later_move() -> None:
            async with gate.spanning():
                said.append("later")

        first = asyncio.create_task(move())
        await halfway.wait()
        closer = asyncio.create_task(backup())
        await asyncio.sleep(0.01)
        assert said == ["append"]  # the backup waits for the move under way
        asyncio.get_running_loop().call_later(0.01, finish.set)
        await asyncio.sleep(0.005)
        waiting = asyncio.create_task(later_move())  # starts while the gate is closing: waits for the backup
        await asyncio.gather(first, closer, waiting)
        return said

    assert asyncio.run(scenario()) == ["append", "delete", "snapshot", "reopened", "later"]


def test_a_span_inside_a_span_does_not_wait_for_a_closing_gate() -> None:
    async def scenario() -> list[str]:
        gate = CrossStoreGate()
        said: list[str] = []
        inside = asyncio.Event()
        go_on = asyncio.Event()

        async def outer() -> None:
            async with gate.spanning():
                inside.set()
                await go_on.wait()
                async with gate.spanning():  # nested (a task it started inherits it too)
                    said.append("inner")
            said.append("outer done")

        async def backup() -> None:
            async with gate.closed():
                said.append("snapshot")

        task = asyncio.create_task(outer())
        await inside.wait()
        closer = asyncio.create_task(backup())
        await asyncio.sleep(0.01)
        go_on.set()
        await asyncio.wait_for(asyncio.gather(task, closer), 5)
        return said

    assert asyncio.run(scenario()) == ["inner", "outer done", "snapshot"]
