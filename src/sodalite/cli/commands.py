"""The command line's client commands: send and peek messages, manage entities of a running broker.

``send`` and ``peek`` speak AMQP (``sodalite.amqpclient``); the entity, key, store and message
commands (``queue``, ``topic``, ``subscription``, ``rule``, ``key``, ``store``, ``messages``) are a
client of the control plane's JSON API (``/api/v1``); ``namespace export`` reads the ATOM API, as
ServiceBusAdministrationClient does. Each command exits 0 on
success and 1 with the broker's error (its condition or HTTP status, and its description) on
stderr otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from sodalite.amqpclient import connection_string
from sodalite.cli.failures import exit_code
from sodalite.cli.progress import Progress
from sodalite.errors import ConfigurationError, SodaliteError

if TYPE_CHECKING:  # imported where used, so the parser (and `sodalite --help`) loads none of them
    from sodalite.amqpclient import AmqpClient
    from sodalite.cli.admin_client import AdminClient
    from sodalite.cli.api_client import ApiClient
    from sodalite.model.entities import RuleDescription
    from sodalite.model.json_types import JsonObject, JsonValue

DEFAULT_ADMIN_PORT: Final = 5443
DEFAULT_DATA_DIR: Final = Path("sodalite-data")
DEFAULT_CA_FILE: Final = DEFAULT_DATA_DIR / "admin-cert.pem"
DEFAULT_HTTP_PORT: Final = 5300
ENTITY_KINDS: Final = ("queue", "topic", "subscription", "rule")
_NO_MESSAGES: Final = 204


# --------------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------------


def _connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connection-string", default=None,
                        help=f"the broker and key (default ${connection_string.ENVIRONMENT_VARIABLE}, else the "
                             "local broker's emulator string); UseDevelopmentEmulator=true means plain AMQP, "
                             "otherwise AMQP over TLS")
    parser.add_argument("--ca-file", type=Path, default=None,
                        help="certificate to trust for TLS (default: the one the broker serves, as its "
                             f"--data-dir/{connection_string.ENDPOINTS_FILE} says, else ./{DEFAULT_CA_FILE} "
                             "when it exists, else the system's trust store)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"the local broker's data directory, where it notes its ports and certificate "
                             f"(default ./{DEFAULT_DATA_DIR})")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker (default 30)")


def _admin_options(parser: argparse.ArgumentParser) -> None:
    _connection_options(parser)
    parser.add_argument("--admin-port", type=int, default=None,
                        help="port of the management API (default: the local broker's, as its data directory "
                             f"says, else {DEFAULT_ADMIN_PORT})")
    parser.add_argument("--http", action="store_true", help="the management API is plain HTTP (serve --http-port)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the client commands to ``sodalite``'s sub-command parser."""
    send = commands.add_parser("send", help="send one message to a queue or topic")
    _connection_options(send)
    send.add_argument("entity", help="queue or topic name")
    body = send.add_mutually_exclusive_group()
    body.add_argument("--body", help="the message body as text (default: read standard input)")
    body.add_argument("--body-file", type=Path, help="read the body from this file")
    for option in ("message-id", "session-id", "partition-key", "subject", "correlation-id", "content-type"):
        send.add_argument(f"--{option}")
    send.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                      help="an application property (string); KEY:=JSON for a number, boolean or null")
    send.add_argument("--ttl", help="time to live, ISO 8601 (PT30S, P1D)")
    send.add_argument("--schedule", help="scheduled enqueue time, ISO 8601 (2026-01-01T12:00:00Z)")
    send.set_defaults(handler=_send)

    peek = commands.add_parser("peek", help="show messages without locking or removing them")
    _connection_options(peek)
    peek.add_argument("entity", help="queue name, or topic/subscriptions/subscription")
    peek.add_argument("--count", type=int, default=10, help="how many messages (default 10)")
    peek.add_argument("--from-sequence", type=int, default=0, help="first sequence number to show (default 0)")
    peek.add_argument("--dead-letter", action="store_true", help="peek the dead-letter sub-queue")
    peek.add_argument("--json", action="store_true", help="one JSON object per message")
    peek.set_defaults(handler=_peek)

    namespace = commands.add_parser("namespace", help="the namespace as a whole")
    namespace_actions = namespace.add_subparsers(dest="action", required=True)
    export = namespace_actions.add_parser(
        "export", help="write every queue, topic, subscription and rule as a Config.json `serve --config` loads")
    _admin_options(export)
    export.add_argument("--output", type=Path, default=None, help="write to this file (default: standard output)")
    export.set_defaults(handler=_export)

    store = commands.add_parser("store", help="messaging stores: list them, take one offline or bring it back")
    store_actions = store.add_subparsers(dest="action", required=True)
    for action, text in (("list", "each store and whether it is online"),
                         ("offline", "take a store out of service (an outage, for drills and tests)"),
                         ("online", "bring a store back")):
        sub = store_actions.add_parser(action, help=text)
        _admin_options(sub)
        if action != "list":
            sub.add_argument("name", help="the store's name ('default' is the data directory's)")
        sub.set_defaults(handler=_store_command)

    key = commands.add_parser("key", help="shared access keys")
    key_actions = key.add_subparsers(dest="action", required=True)
    regenerate = key_actions.add_parser("regenerate", help="replace a rule's primary or secondary key; tokens "
                                                           "signed with the old key are refused from then on")
    _admin_options(regenerate)
    regenerate.add_argument("rule", help="the rule's KeyName")
    regenerate.add_argument("--entity", help="a queue's or topic's own rule (default: a namespace rule)")
    regenerate.add_argument("--secondary", action="store_true", help="the secondary key (default: the primary)")
    regenerate.add_argument("--key", help="the new key (default: 32 random bytes, base64)")
    regenerate.set_defaults(handler=_regenerate_key)

    _register_messages(commands)

    for kind in ENTITY_KINDS:
        parser = commands.add_parser(kind, help=f"manage {kind}s through the management API")
        actions = parser.add_subparsers(dest="action", required=True)
        names = _NAMES[kind]
        for action in ("list", "show", "create", "update", "delete"):
            sub = actions.add_parser(action, help=f"{action} {kind}s" if action == "list" else f"{action} a {kind}")
            _admin_options(sub)
            for name in names if action != "list" else names[:-1]:
                sub.add_argument(name)
            if action in ("create", "update"):
                if kind == "rule":
                    _rule_options(sub)
                else:
                    sub.add_argument("--set", action="append", default=[], metavar="PROPERTY=VALUE",
                                     help="a property by its Service Bus name, e.g. LockDuration=PT1M, "
                                          "MaxDeliveryCount=5, RequiresSession=true")
                if kind == "subscription" and action == "create":
                    sub.add_argument("--sql", metavar="SQL_FILTER",
                                     help="the $Default rule's Service Bus SQL filter (default: all messages)")
                    sub.add_argument("--sql-filter", dest="sql", help=argparse.SUPPRESS)  # the earlier name
            sub.set_defaults(handler=_entity_command, kind=kind)


_SUB_QUEUES: Final = ("active", "deferred", "scheduled", "deadletter", "transferdeadletter")


def _register_messages(commands: Any) -> None:
    """``sodalite messages ...``: the control plane's message operations, through its JSON API."""
    messages = commands.add_parser("messages", help="purge, resubmit or move messages, cancel scheduled ones, "
                                                    "list entities with their counts (the JSON API)")
    actions = messages.add_subparsers(dest="action", required=True)
    counts = actions.add_parser("counts", help="every entity with its message counts")
    _admin_options(counts)
    counts.set_defaults(handler=_messages_command)
    purge = actions.add_parser("purge", help="delete every unlocked message of a sub-queue; prints the count")
    _admin_options(purge)
    purge.add_argument("entity", help="queue, or topic/subscriptions/subscription")
    purge.add_argument("--sub-queue", choices=_SUB_QUEUES, default="active")
    purge.set_defaults(handler=_messages_command)
    for action, text in (("resubmit", "send messages (dead-lettered by default) back to their entity, atomically"),
                         ("move", "move messages to another queue, subscription or topic, atomically")):
        sub = actions.add_parser(action, help=text)
        _admin_options(sub)
        sub.add_argument("entity", help="the source: queue, or topic/subscriptions/subscription")
        if action == "move":
            sub.add_argument("--to", required=True,
                             help="the target queue, subscription or topic (a topic fans them out as a send)")
        sub.add_argument("--sub-queue", choices=_SUB_QUEUES, default="deadletter")
        which = sub.add_mutually_exclusive_group(required=True)
        which.add_argument("--sequence", type=int, nargs="+", help="these sequence numbers")
        which.add_argument("--sql", metavar="SQL_FILTER",
                           help="those a Service Bus SQL filter over their properties selects, "
                                "e.g. \"DeadLetterReason = 'MaxDeliveryCountExceeded'\"")
        which.add_argument("--filter", dest="sql", help=argparse.SUPPRESS)  # the earlier name, still accepted
        which.add_argument("--all", action="store_true", help="every message of the sub-queue")
        sub.set_defaults(handler=_messages_command)
    cancel = actions.add_parser("cancel-scheduled", help="cancel scheduled messages by sequence number")
    _admin_options(cancel)
    cancel.add_argument("entity")
    cancel.add_argument("sequence", type=int, nargs="+")
    cancel.set_defaults(handler=_messages_command)


def _rule_options(parser: argparse.ArgumentParser) -> None:
    kinds = parser.add_mutually_exclusive_group()
    kinds.add_argument("--sql", metavar="SQL_FILTER", help="a Service Bus SQL filter expression")
    kinds.add_argument("--true", action="store_true", help="match every message")
    kinds.add_argument("--false", action="store_true", help="match no message")
    kinds.add_argument("--correlation", action="append", metavar="FIELD=VALUE",
                       help="a correlation filter field (CorrelationId, MessageId, To, ReplyTo, Label, SessionId, "
                            "ReplyToSessionId, ContentType) or, for any other name, an application property")
    # dest differs from the sub-command's own "action" (create/update), which it would otherwise overwrite
    parser.add_argument("--action", dest="sql_action", help="a SQL rule action, e.g. SET priority = 'high'")


_NAMES: Final[dict[str, tuple[str, ...]]] = {
    "queue": ("name",),
    "topic": ("name",),
    "subscription": ("topic", "name"),
    "rule": ("topic", "subscription", "name"),
}


def run(args: argparse.Namespace) -> int:
    """Run a client command; print the broker's refusal and return 1 if it refused."""
    from sodalite.amqpclient import ClientError
    from sodalite.cli.admin_client import AdminError
    from sodalite.cli.api_client import ApiError

    handler: Callable[[argparse.Namespace], None] = args.handler

    def work() -> int:
        handler(args)
        return 0

    return exit_code(work, (
        ((ClientError, AdminError, ApiError), 1, lambda exc: f"error: {exc}"),
        ((SodaliteError, ValueError), 1, lambda exc: f"error: {getattr(exc, 'description', exc)}"),
        (OSError, 1, lambda exc: f"error: cannot reach the broker {exc}"),  # "at <url>: <reason>"
    ))


# --------------------------------------------------------------------------------------------------
# Connections
# --------------------------------------------------------------------------------------------------


def _endpoints(args: argparse.Namespace) -> JsonObject:
    return noted_endpoints(Path(args.data_dir))


def noted_endpoints(data_dir: Path) -> JsonObject:
    """What the local broker noted in its data directory (ports, certificate); empty when nothing is there."""
    path = data_dir / connection_string.ENDPOINTS_FILE
    try:
        noted = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return noted if isinstance(noted, dict) else {}


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext:
    ca_file: Path | None = args.ca_file
    if ca_file is None:
        noted = _endpoints(args).get("certificate")
        if isinstance(noted, str) and Path(noted).exists():
            ca_file = Path(noted)
        elif (Path(args.data_dir) / DEFAULT_CA_FILE.name).exists():
            ca_file = Path(args.data_dir) / DEFAULT_CA_FILE.name
    return ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)


def _settings_for(args: argparse.Namespace) -> connection_string.ConnectionSettings:
    """The connection string given, else the local broker's on the AMQP port it noted."""
    settings = connection_string.from_environment(args.connection_string)
    given = args.connection_string or os.environ.get(connection_string.ENVIRONMENT_VARIABLE)
    noted = _endpoints(args).get("amqp_port")
    if not given and isinstance(noted, int):
        settings = replace(settings, port=noted)
    return settings


def _amqp(args: argparse.Namespace) -> AmqpClient:
    from sodalite.amqpclient import AmqpClient

    settings = _settings_for(args)
    return AmqpClient(settings.host, settings.port, settings.key_name, settings.key,
                      tls=_tls_context(args) if settings.tls else None, timeout=args.timeout)


def _admin_port(args: argparse.Namespace) -> int:
    if args.admin_port is not None:
        return int(args.admin_port)
    noted = _endpoints(args).get("http_port" if args.http else "admin_port")
    if isinstance(noted, int):
        return noted
    return DEFAULT_HTTP_PORT if args.http else DEFAULT_ADMIN_PORT


def _admin(args: argparse.Namespace) -> AdminClient:
    from sodalite.cli.admin_client import AdminClient

    settings = _settings_for(args)
    return AdminClient(settings.host, _admin_port(args), settings.key_name, settings.key,
                       context=None if args.http else _tls_context(args), timeout=args.timeout)


# --------------------------------------------------------------------------------------------------
# send and peek
# --------------------------------------------------------------------------------------------------


def _property(text: str) -> tuple[str, JsonValue]:
    """``KEY=VALUE`` (a string) or ``KEY:=JSON`` (a number, boolean or null)."""
    key, separator, value = text.partition("=")
    if not separator or not key.rstrip(":"):
        raise ConfigurationError(f"'{text}': expected KEY=VALUE or KEY:=JSON")
    if not key.endswith(":"):
        return key, value
    try:
        return key[:-1], json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"'{text}': not JSON: {exc.msg}") from None


def _timestamp(text: str) -> datetime.datetime:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(f"--schedule '{text}': not an ISO 8601 time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def _body(args: argparse.Namespace) -> bytes:
    if args.body is not None:
        return str(args.body).encode("utf-8")
    if args.body_file is not None:
        return Path(args.body_file).read_bytes()
    return sys.stdin.buffer.read()


def _send(args: argparse.Namespace) -> None:
    from sodalite.amqpclient.message_codec import OutgoingMessage, encode_message
    from sodalite.model.entities import parse_duration

    message = OutgoingMessage(
        body=_body(args), message_id=args.message_id, session_id=args.session_id,
        partition_key=args.partition_key, subject=args.subject, correlation_id=args.correlation_id,
        content_type=args.content_type,
        time_to_live=parse_duration(args.ttl) if args.ttl else None,
        scheduled_enqueue_time=_timestamp(args.schedule) if args.schedule else None,
        application_properties=dict(_property(p) for p in args.property))
    with _amqp(args) as client:
        client.send(args.entity, [encode_message(message)])
    print(f"sent 1 message to {args.entity}")


def _peek(args: argparse.Namespace) -> None:
    from sodalite.amqp.types import Int, Long
    from sodalite.amqpclient import ClientError
    from sodalite.amqpclient.message_codec import describe_message

    entity = args.entity + ("/$DeadLetterQueue" if args.dead_letter else "")
    shown: list[JsonObject] = []
    with _amqp(args) as client:
        start = args.from_sequence
        while len(shown) < args.count:
            reply = client.management(entity, "com.microsoft:peek-message",
                                      {"from-sequence-number": Long(start),
                                       "message-count": Int(args.count - len(shown))})
            if reply.status == _NO_MESSAGES:
                break
            if reply.status != 200:
                raise ClientError(reply.condition, reply.description or f"peek answered {reply.status}")
            batch = [describe_message(bytes(m["message"])) for m in reply.body["messages"]]
            if not batch:
                break
            shown.extend(batch)
            start = int(batch[-1]["sequence_number"]) + 1
    for message in shown:
        if args.json:
            print(json.dumps(message, default=str))
        else:
            print(_peeked_line(message))
    if not args.json:
        print(f"({len(shown)} message{'s' if len(shown) != 1 else ''})")


def _peeked_line(message: JsonObject) -> str:
    """One peeked message as text; a dead-lettered one with its reason and description."""
    line = (f"#{message.get('sequence_number')} {message.get('enqueued_time')} "
            f"expires={message.get('expires_at') or 'never'} id={message.get('message_id')}")
    properties = message.get("application_properties") or {}
    if isinstance(properties, dict):
        for key, label in (("DeadLetterReason", "reason"), ("DeadLetterErrorDescription", "description")):
            if properties.get(key) is not None:
                line += f" {label}={json.dumps(str(properties[key]))}"
    return f"{line} {json.dumps(message.get('body'), default=str)}"


# --------------------------------------------------------------------------------------------------
# Entities
# --------------------------------------------------------------------------------------------------


def _path(kind: str, args: argparse.Namespace) -> str:
    """The entity's path (a rule's: its subscription's), as the JSON API names it."""
    if kind in ("queue", "topic"):
        return str(args.name)
    return f"{args.topic}/subscriptions/{args.name if kind == 'subscription' else args.subscription}"


def _value(text: str) -> JsonValue:
    """A --set value: JSON when it parses (numbers, true/false, null), else the text itself."""
    try:
        value: JsonValue = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value


def _settings(pairs: Sequence[str]) -> JsonObject:
    settings: JsonObject = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise ConfigurationError(f"--set '{pair}': expected PROPERTY=VALUE")
        settings[key] = _value(value)
    return settings


def _rule(args: argparse.Namespace, name: str) -> RuleDescription:
    from sodalite.model.entities import RuleDescription

    properties: JsonObject
    if args.sql is not None:
        properties = {"FilterType": "Sql", "SqlFilter": {"SqlExpression": args.sql}}
    elif args.false:
        properties = {"FilterType": "False"}
    elif args.correlation:
        fields = {"CorrelationId", "MessageId", "To", "ReplyTo", "Label", "SessionId", "ReplyToSessionId",
                  "ContentType"}
        correlation: JsonObject = {}
        user: JsonObject = {}
        for key, value in (_property(pair) for pair in args.correlation):
            if key in fields:
                correlation[key] = value
            else:
                correlation.setdefault("Properties", user)  # where the first one falls, as the API lists them
                user[key] = value
        properties = {"FilterType": "Correlation", "CorrelationFilter": correlation}
    else:
        properties = {"FilterType": "True"}
    if args.sql_action is not None:
        properties["Action"] = {"SqlExpression": args.sql_action}
    return RuleDescription.from_json({"Name": name, "Properties": properties}, path="rule")


def _entity_record(api: ApiClient, kind: str, path: str) -> JsonObject:
    """The entity of ``kind`` at ``path``, with its properties; a 404 when there is none of that kind."""
    from sodalite.cli.api_client import ApiError

    try:
        record: JsonObject = api.call("GET", api.entity(path))
    except ApiError as exc:
        if exc.status == 404:
            raise ApiError(404, exc.code, f"the {kind} '{path}' does not exist") from None
        raise
    if record["kind"] != kind:
        raise ApiError(404, "MessagingEntityNotFound", f"the {kind} '{path}' does not exist")
    return record


def _own_name(record: JsonObject) -> str:
    path = str(record["path"])
    return path.rpartition("/subscriptions/")[2] if record["kind"] == "subscription" else path


def _entity_command(args: argparse.Namespace) -> None:
    from sodalite.model.entities import DEFAULT_RULE_NAME

    kind, action = args.kind, args.action
    api = _api(args)
    if kind == "rule":
        _rule_command(api, args)
        return
    if action == "list":
        query = f"?kind=subscription&topic={quote(str(args.topic))}" if kind == "subscription" else f"?kind={kind}"
        _print_list(kind, [_summary(kind, record) for record in api.call("GET", "/entities" + query)],
                    as_json=args.json)
        return
    path = _path(kind, args)
    if action == "delete":
        api.call("DELETE", api.entity(path))  # a missing one is a 404, as Service Bus answers
        print(f"deleted {kind} {path}")
        return
    if action == "show":
        _print_one(_shown(_entity_record(api, kind, path)), as_json=args.json)
        return
    if action == "create":
        body: JsonObject = {"kind": kind, "path": path, "properties": _settings(args.set)}
        if kind == "subscription" and args.sql is not None:
            body["rule"] = {"Name": DEFAULT_RULE_NAME,
                            "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": args.sql}}}
        result = api.call("POST", "/entities", body)
    else:
        existing = _entity_record(api, kind, path)
        properties = {**_object(existing.get("properties")), **_settings(args.set)}
        result = api.call("PUT", api.entity(path), {"properties": properties})
    if args.json:
        _print_one(_shown(result), as_json=True)
    else:
        print(f"{'created' if action == 'create' else 'updated'} {kind} {path}")


def _rule_command(api: ApiClient, args: argparse.Namespace) -> None:
    from sodalite.cli.api_client import ApiError

    action = args.action
    subscription = _path("rule", args)
    rules_route = api.entity(subscription) + "/$rules"
    if action == "list":
        try:
            rules: list[JsonObject] = api.call("GET", rules_route)
        except ApiError as exc:
            if exc.status != 404:
                raise
            rules = []  # an unknown subscription has no rules
        _print_list("rule", [_rule_summary(r) for r in rules], as_json=args.json)
        return
    path = f"{subscription}/rules/{args.name}"
    if action == "delete":
        api.call("DELETE", f"{rules_route}/{quote(str(args.name), safe='')}")
        print(f"deleted rule {path}")
        return
    if action == "show":
        try:
            rules = api.call("GET", rules_route)
        except ApiError as exc:
            if exc.status != 404:
                raise
            rules = []
        found = next((r for r in rules if str(r["name"]).lower() == str(args.name).lower()), None)
        if found is None:
            raise ApiError(404, "MessagingEntityNotFound", f"the rule '{path}' does not exist")
        _print_one({"Name": found["name"], **_object(found["rule"])}, as_json=args.json)
        return
    rule = {"rule": _rule(args, args.name).to_json()}
    if action == "create":
        result = api.call("POST", rules_route, rule)
    else:
        result = api.call("PUT", f"{rules_route}/{quote(str(args.name), safe='')}", rule)
    if args.json:
        _print_one({"Name": result["name"], **result["rule"]}, as_json=True)
    else:
        print(f"{'created' if action == 'create' else 'updated'} rule {path}")


def _export(args: argparse.Namespace) -> None:
    from sodalite.cli.export import export_namespace

    document = json.dumps(export_namespace(_admin(args)), indent=2, ensure_ascii=False) + "\n"
    if args.output is None:
        sys.stdout.write(document)
    else:
        Path(args.output).write_text(document, encoding="utf-8")
        print(f"wrote {args.output}")


def _api(args: argparse.Namespace) -> ApiClient:
    from sodalite.cli.api_client import ApiClient

    settings = _settings_for(args)
    return ApiClient(settings.host, _admin_port(args), settings.key_name, settings.key,
                     context=None if args.http else _tls_context(args), timeout=args.timeout)


def _messages_command(args: argparse.Namespace) -> None:
    api = _api(args)
    answer: Any
    if args.action == "counts":
        answer = api.call("GET", "/entities")
        if not args.json:
            _print_table([{"entity": e["path"], "kind": e["kind"], "active": e["counts"]["active"],
                           "dead-letter": e["counts"]["deadLetter"], "scheduled": e["counts"]["scheduled"],
                           "deferred": e["counts"]["deferred"], "availability": e["availability"]} for e in answer],
                         numeric=("active", "dead-letter", "scheduled", "deferred"), empty="(no entities)")
            return
    elif args.action == "purge":
        outcome = _operation_with_progress(api, args.entity, "$purge", {"subQueue": args.sub_queue}, "purged",
                                           quiet=args.json)
        answer = {"purged": outcome["moved"]}
        if not args.json:
            print(f"purged {answer['purged']}")
            return
    elif args.action == "cancel-scheduled":
        answer = api.call("POST", api.entity(args.entity) + "/$cancel-scheduled", {"sequenceNumbers": args.sequence})
        if not args.json:
            print(f"cancelled {answer['cancelled']}")
            return
    else:
        body: JsonObject = {"subQueue": args.sub_queue}
        if args.sequence:
            body["sequenceNumbers"] = args.sequence
        elif args.sql:
            body["filter"] = args.sql
        else:
            body["all"] = True
        if args.action == "move":
            body["target"] = args.to
        answer = _move_with_progress(api, args.entity, body, quiet=args.json)
        if not args.json:
            print(f"moved {answer['moved']} of {answer['selected']}" +
                  (f" ({answer['skipped']} locked or gone, left in place)" if answer["skipped"] else ""))
            return
    print(json.dumps(answer))


MOVE_POLL_S: Final = 0.25


def _move_with_progress(api: ApiClient, entity: str, body: JsonObject, *, quiet: bool) -> JsonObject:
    """A move run in the broker's background, its progress shown (count, rate, time left) while it runs;
    the outcome (selected, moved, skipped) when it has finished."""
    return _operation_with_progress(api, entity, "$move", body, "moved", quiet=quiet)


def _operation_with_progress(api: ApiClient, entity: str, verb: str, body: JsonObject, shown_as: str, *,
                             quiet: bool) -> JsonObject:
    """A move or purge (``verb``) run in the broker's background, its progress shown while it runs; the
    outcome (selected, moved, skipped; a purge's deleted as moved) when it has finished."""
    from sodalite.cli.api_client import ApiError

    operation: JsonObject = api.call("POST", api.entity(entity) + "/" + verb, {**body, "background": True})
    shown = Progress(shown_as, stream=sys.stderr)
    while operation["state"] == "running":
        if not quiet:
            shown.update(_count(operation["done"]), total=_count(operation["total"]))
        time.sleep(MOVE_POLL_S)
        operation = api.call("GET", f"/operations/{quote(str(operation['id']), safe='')}")
    if shown.terminal and not quiet:
        shown.finish("")  # clears the status line; the caller prints the summary on stdout
    if operation["state"] != "succeeded":
        what = verb.lstrip("$")
        raise ApiError(500, f"{what.capitalize()}Failed", str(operation.get("error") or f"the {what} failed"))
    return _object(operation["outcome"])


def _store_command(args: argparse.Namespace) -> None:
    api = _api(args)
    if args.action == "list":
        stores: list[JsonObject] = api.call("GET", "/stores")
    else:
        stores = api.call("POST", f"/stores/{quote(str(args.name), safe='')}/{args.action}")
    rows = [{"name": s["name"], "state": "online" if s["online"] else "offline"} for s in stores]
    if args.json:
        print(json.dumps(rows))
        return
    for row in rows:
        print(f"{row['name']}  {row['state']}")


def _regenerate_key(args: argparse.Namespace) -> None:
    payload: JsonObject = {"keyName": args.rule, "keyType": "SecondaryKey" if args.secondary else "PrimaryKey"}
    if args.entity:
        payload["entity"] = args.entity
    if args.key is not None:
        payload["key"] = args.key
    record = _api(args).call("POST", "/keys/regenerate", payload)
    keys = {name: record.get(name) for name in ("keyName", "primaryKey", "secondaryKey", "primaryConnectionString",
                                                 "secondaryConnectionString")}
    if args.json:
        print(json.dumps(keys))
        return
    for name, value in keys.items():
        if value is not None:
            print(f"{name}: {value}")


def _count(value: JsonValue) -> int:
    """A count the API answers (a JSON number)."""
    return int(value) if isinstance(value, int | float) else 0


def _object(value: JsonValue) -> JsonObject:
    """A JSON object the API nests in its answers (counts, figures, properties); {} where it is absent."""
    return value if isinstance(value, dict) else {}


def _summary(kind: str, record: JsonObject) -> JsonObject:
    counts = _object(record["counts"])
    if kind == "topic":
        figures = _object(record.get("topicFigures"))
        return {"name": _own_name(record), "subscriptions": figures.get("subscriptionCount", 0),
                "scheduled": counts["scheduled"], "size_in_bytes": counts["sizeInBytes"]}
    return {"name": _own_name(record), "active": counts["active"], "dead_letter": counts["deadLetter"],
            "scheduled": counts["scheduled"], "status": record.get("status", "Active")}


def _rule_summary(rule: JsonObject) -> JsonObject:
    properties = _object(_object(rule["rule"])["Properties"])
    sql = _object(properties.get("SqlFilter")).get("SqlExpression")
    return {"name": rule["name"], "filter": sql if properties["FilterType"] == "Sql" else properties["FilterType"]}


def _print_list(kind: str, rows: list[JsonObject], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, default=str))
        return
    _print_table(rows, empty=f"(no {kind}s)")


def _print_table(rows: list[JsonObject], *, numeric: Sequence[str] = (), empty: str) -> None:
    """Rows as columns under upper-case headings, numbers right-aligned."""
    if not rows:
        print(empty)
        return
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(row[c])) for row in rows)) for c in columns]

    def cells(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if c in numeric else v.ljust(w)
                         for c, v, w in zip(columns, values, widths, strict=True)).rstrip()

    print(cells([c.upper() for c in columns]))
    for row in rows:
        print(cells([str(row[c]) for c in columns]))


def _shown(record: JsonObject) -> JsonObject:
    """An entity as ``show`` prints it: its name, its properties, and its runtime figures."""
    counts = _object(record["counts"])
    figures = _object(record.get("topicFigures"))
    return {"Name": _own_name(record), **_object(record.get("properties")),
            "Runtime": {"ActiveMessageCount": counts["active"], "DeadLetterMessageCount": counts["deadLetter"],
                        "ScheduledMessageCount": counts["scheduled"], "SizeInBytes": counts["sizeInBytes"],
                        "SubscriptionCount": figures.get("subscriptionCount", 0)}}


def _print_one(shown: JsonObject, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(shown, default=str))
        return
    for key, value in shown.items():
        print(f"{key}: {json.dumps(value, default=str) if isinstance(value, dict | list) else value}")
