"""The OpenAPI 3.1 document of the JSON API (``GET /api/v1/openapi.json``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_SUB_QUEUES = ["active", "deferred", "scheduled", "deadletter", "transferdeadletter"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Mapping[str, object]) -> dict[str, object]:
    return {"content": {"application/json": {"schema": schema}}}


def _op(summary: str, right: str, response: Mapping[str, object] | None = None,
        body: Mapping[str, object] | None = None, params: Sequence[Mapping[str, object]] | None = None,
        status: str = "200") -> dict[str, object]:
    op: dict[str, object] = {
        "summary": summary,
        "description": f"Needs {right}.",
        "responses": {
            status: {"description": "OK", **(_json(response) if response else {})},
            "400": {"description": "Bad request", **_json(_ref("Error"))},
            "401": {"description": "No, bad or expired credentials", **_json(_ref("Error"))},
            "403": {"description": "The credentials lack the right, or a cross-origin change",
                    **_json(_ref("Error"))},
            "404": {"description": "Unknown entity", **_json(_ref("Error"))},
        },
    }
    if body is not None:
        op["requestBody"] = {"required": True, **_json(body)}
    if params:
        op["parameters"] = params
    return op


_PATH = {"name": "path", "in": "path", "required": True, "schema": {"type": "string"},
         "description": "queue, topic, or <topic>/subscriptions/<name>"}
_SUB = {"name": "subQueue", "in": "query", "schema": {"type": "string", "enum": _SUB_QUEUES}}


def document(max_peek: int, max_body: int) -> dict[str, object]:
    entity = "/api/v1/entities/{path}"
    obj: dict[str, object] = {"type": "object"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sodalite control plane", "version": "1",
                 "description": "Entities, messages, keys and stores of one Sodalite namespace. Authorize with "
                                "'Authorization: Bearer <SAS token>' or the console's session cookie (changes "
                                f"then need the X-CSRF-Token header). Request bodies are at most {max_body} bytes."},
        "components": {
            "securitySchemes": {
                "sas": {"type": "http", "scheme": "bearer", "bearerFormat": "SharedAccessSignature"},
                "session": {"type": "apiKey", "in": "cookie", "name": "sodalite_session"},
            },
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"}, "condition": {"type": "string"},
                    "status": {"type": "integer"}, "trackingId": {"type": "string"}}}}},
                "Counts": {"type": "object", "properties": {k: {"type": "integer"} for k in (
                    "active", "deadLetter", "scheduled", "deferred", "transfer", "transferDeadLetter",
                    "sizeInBytes")}},
                "Entity": {"type": "object", "properties": {
                    "path": {"type": "string"}, "kind": {"type": "string", "enum": ["queue", "topic", "subscription"]},
                    "counts": _ref("Counts"), "availability": {"type": "string"},
                    "topic": {"type": ["string", "null"]}, "status": {"type": "string"},
                    "properties": {"type": ["object", "null"], "description": "detail views only"},
                    "times": obj, "topicFigures": {"type": ["object", "null"]},
                    "messagesIn": {"type": "integer"}, "messagesOut": {"type": "integer"}}},
                "Message": {"type": "object", "properties": {
                    "sequenceNumber": {"type": "integer"}, "subQueue": {"type": "string"},
                    "state": {"type": "string"}, "messageId": {"type": ["string", "null"]},
                    "enqueuedTime": {"type": "integer"}, "deliveryCount": {"type": "integer"},
                    "size": {"type": "integer"}, "sessionId": {"type": ["string", "null"]},
                    "contentType": {"type": ["string", "null"]},
                    "deadLetterReason": {"type": ["string", "null"]},
                    "applicationProperties": obj, "body": {"type": "string", "contentEncoding": "base64"}}},
                "Send": {"type": "object", "properties": {
                    "body": {"description": "text, or any JSON value sent as its text"},
                    "bodyBase64": {"type": "string"}, "contentType": {"type": "string"},
                    "messageId": {"type": "string"}, "sessionId": {"type": "string"},
                    "partitionKey": {"type": "string"}, "subject": {"type": "string"},
                    "correlationId": {"type": "string"}, "timeToLiveMs": {"type": "integer"},
                    "scheduledEnqueueTimeMs": {"type": "integer"}, "applicationProperties": obj}},
                "Move": {"type": "object", "properties": {
                    "subQueue": {"type": "string", "enum": _SUB_QUEUES},
                    "sequenceNumbers": {"type": "array", "items": {"type": "integer"}},
                    "filter": {"type": "string", "description": "a Service Bus SQL filter over properties"},
                    "all": {"type": "boolean"},
                    "dryRun": {"type": "boolean", "description": "count what would move; change nothing"},
                    "background": {"type": "boolean",
                                   "description": "answer 202 with an operation to follow at /api/v1/operations/{id}"},
                    "target": {"type": "string", "description": "a queue, subscription or topic (a topic fans each "
                                                          "message out as a send); default: the source (resubmit)"}}},
                "MoveOutcome": {"type": "object", "properties": {
                    "selected": {"type": "integer"}, "moved": {"type": "integer"}, "skipped": {"type": "integer"}}},
            },
        },
        "security": [{"sas": []}, {"session": []}],
        "paths": {
            "/api/v1/login": {"post": _op("Log in with a key name and key (sets the session cookie)", "a valid key",
                                          obj, {"type": "object", "properties": {
                                              "keyName": {"type": "string"}, "key": {"type": "string"}}})},
            "/api/v1/logout": {"post": _op("Log out", "nothing")},
            "/api/v1/namespace": {"get": _op("The namespace, every entity with its counts, and the stores",
                                             "Manage", obj)},
            "/api/v1/entities": {
                "get": _op("Every entity with its counts (or those of a kind, or a topic's subscriptions)", "Manage",
                           {"type": "array", "items": _ref("Entity")}, params=[
                               {"name": "kind", "in": "query", "schema": {
                                   "type": "string", "enum": ["queue", "topic", "subscription"]}},
                               {"name": "topic", "in": "query", "schema": {"type": "string"}}]),
                "post": _op("Create a queue, topic or subscription", "Manage", _ref("Entity"), {
                    "type": "object", "required": ["kind", "path"], "properties": {
                        "kind": {"type": "string"}, "path": {"type": "string"},
                        "properties": {"type": "object", "description": "Config.json property names"},
                        "rule": obj}}, status="201")},
            entity: {"get": _op("One entity, with its properties", "Manage", _ref("Entity"), params=[_PATH]),
                     "put": _op("Update an entity's properties", "Manage", _ref("Entity"),
                                {"type": "object", "properties": {"properties": obj}}, [_PATH]),
                     "delete": _op("Delete an entity", "Manage", params=[_PATH])},
            entity + "/$messages": {"get": _op(f"Peek up to {max_peek} messages from a sequence number", "Listen",
                                               obj, params=[_PATH, _SUB,
                                                            {"name": "fromSequenceNumber", "in": "query",
                                                             "schema": {"type": "integer"}},
                                                            {"name": "count", "in": "query",
                                                             "schema": {"type": "integer", "maximum": max_peek}}])},
            entity + "/$messages/{seq}": {"get": _op("One message", "Listen", _ref("Message"), params=[
                _PATH, _SUB, {"name": "seq", "in": "path", "required": True, "schema": {"type": "integer"}}])},
            entity + "/$send": {"post": _op("Send a message", "Send", obj, _ref("Send"), [_PATH], "201")},
            entity + "/$purge": {"post": _op("Delete every unlocked message of a sub-queue; the count returned",
                                             "Listen", obj, {"type": "object", "properties": {
                                                 "subQueue": {"type": "string", "enum": _SUB_QUEUES}}}, [_PATH])},
            entity + "/$move": {"post": _op("Resubmit or move messages (selected, filtered, or all), atomically",
                                            "Listen on the source and Send on the target", _ref("MoveOutcome"),
                                            _ref("Move"), [_PATH])},
            entity + "/$cancel-scheduled": {"post": _op("Cancel scheduled messages", "Send", obj, {
                "type": "object", "properties": {"sequenceNumbers": {"type": "array", "items": {"type": "integer"}}}},
                [_PATH])},
            entity + "/$rules": {"get": _op("A subscription's rules", "Manage", obj, params=[_PATH]),
                                 "post": _op("Add a rule (Config.json shape)", "Manage", obj, obj, [_PATH], "201")},
            entity + "/$rules/{rule}": {"put": _op("Replace a rule", "Manage", obj, obj, [_PATH]),
                                        "delete": _op("Delete a rule", "Manage", params=[_PATH])},
            "/api/v1/operations/{id}": {"get": _op("A background move's progress and outcome",
                                                   "Listen on its source", obj)},
            "/api/v1/keys": {"get": _op("Shared access rules and their keys", "Manage", obj)},
            "/api/v1/keys/regenerate": {"post": _op("Regenerate a rule's primary or secondary key", "Manage", obj, {
                "type": "object", "properties": {"entity": {"type": "string"}, "keyName": {"type": "string"},
                                                 "keyType": {"type": "string",
                                                             "enum": ["PrimaryKey", "SecondaryKey"]},
                                                 "key": {"type": "string",
                                                         "description": "the new key (default: 32 random bytes)"}}})},
            "/api/v1/stores": {"get": _op("Messaging stores and whether each is online", "Manage", obj)},
            "/api/v1/stores/{name}/{state}": {"post": _op("Take a store offline or bring it online", "Manage", obj)},
            "/api/v1/backup": {"post": _op("Copy every SQLite store and the configuration into a new directory "
                                           "({destination}: an absolute path on the broker's machine), as of one "
                                           "point in time, while serving", "Manage", obj)},
            "/api/v1/geo": {"get": _op("Geo-replication: each site's role, database position and the secondary's "
                                       "replication lag", "Manage", obj)},
            "/api/v1/geo/promote": {"post": _op("Promote a site: planned (waits until everything is replicated) "
                                                "or forced (at once; the loss bound is reported)", "Manage", obj, {
                "type": "object", "required": ["site", "mode"], "properties": {
                    "site": {"type": "string"}, "mode": {"type": "string", "enum": ["planned", "forced"]}}})},
        },
    }
