"""The producer side of celery_shop, as a command: ``call <task> <json args>`` prints the task's result as
JSON; ``queues`` prints every queue's lock duration and counts, read through the management API."""

from __future__ import annotations

import json
import sys

from celery_shop import app


def call(task: str, args: list[object]) -> None:
    result = app.send_task(f"celery_shop.{task}", args=args)
    print(json.dumps({"id": result.id, "result": result.get(timeout=120)}))


def queues() -> None:
    with app.connection_for_write() as connection:
        admin = connection.default_channel.queue_mgmt_service
        counts = {}
        for queue in admin.list_queues():
            runtime = admin.get_queue_runtime_properties(queue.name)
            counts[queue.name] = {"lock_seconds": queue.lock_duration.total_seconds(),
                                  "active": runtime.active_message_count,
                                  "dead_letter": runtime.dead_letter_message_count}
    print(json.dumps(counts))


if __name__ == "__main__":
    if sys.argv[1] == "call":
        call(sys.argv[2], json.loads(sys.argv[3]))
    else:
        queues()
