"""Rule descriptions on the wire: the maps of a subscription's ``add-rule`` request and the described
values ``enumerate-rules`` answers (AMQP request-response doc, "Rule operations"), with the codes the
SDKs decode (Java ServiceBusConstants, JS core-amqp descriptorCodes, .NET AmqpSqlFilter.Code and kin):
the filters are 0x00000013_7000000N, the rule description and the actions 0x00000137_0000000N.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypedDict

from sodalite.amqp.types import AmqpValue, Described, ULong
from sodalite.errors import ArgumentError, ConfigurationError
from sodalite.model import rules
from sodalite.model.json_types import json_type

RULE_DESCRIPTION = 0x0000013700000004
SQL_FILTER, TRUE_FILTER, FALSE_FILTER, CORRELATION_FILTER = (0x0000001370000006, 0x0000001370000007,
                                                             0x0000001370000008, 0x0000001370000009)
EMPTY_ACTION, SQL_ACTION = 0x0000013700000005, 0x0000013700000006
_CORRELATION_KEYS = ("correlation-id", "message-id", "to", "reply-to", "label", "session-id", "reply-to-session-id",
                     "content-type")

RuleDescriptionMap = TypedDict("RuleDescriptionMap", {
    "sql-filter": AmqpValue,  # map: "expression"
    "correlation-filter": AmqpValue,  # map: the _CORRELATION_KEYS and "properties"
    "sql-rule-action": AmqpValue,  # map: "expression"
}, total=False)


def _str_map(value: AmqpValue) -> dict[str, AmqpValue]:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def rule_description(value: AmqpValue) -> RuleDescriptionMap:
    """The rule description map of an add-rule request (its known keys; anything else is no map)."""
    fields = _str_map(value)
    description = RuleDescriptionMap()
    if "sql-filter" in fields:
        description["sql-filter"] = fields["sql-filter"]
    if "correlation-filter" in fields:
        description["correlation-filter"] = fields["correlation-filter"]
    if "sql-rule-action" in fields:
        description["sql-rule-action"] = fields["sql-rule-action"]
    return description


def _correlation_text(correlation: dict[str, AmqpValue], key: str) -> str | None:
    """One string field of a correlation filter, refused as CorrelationFilter itself refuses it."""
    value = correlation.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"CorrelationFilter.{key.replace('-', '_')}: must be a string, "
                                 f"got {type(value).__name__}")
    return value


def _correlation_properties(correlation: dict[str, AmqpValue]) -> dict[str, rules.ScalarValue]:
    """A correlation filter's application properties, refused as CorrelationFilter itself refuses them."""
    properties: dict[str, rules.ScalarValue] = {}
    for key, value in _str_map(correlation.get("properties")).items():
        if not isinstance(value, bool | int | str | float | datetime | timedelta):
            raise ConfigurationError(f"CorrelationFilter.properties[{key!r}]: must be a string, number or "
                                     f"boolean (or a date-time or duration), got {json_type(value)}")
        properties[key] = value
    return properties


def rule_from_request(name: str, description: RuleDescriptionMap) -> rules.RuleDescription:
    """A RuleDescription from add-rule's map; the filter defaults to TrueFilter as the service's does."""
    sql = _str_map(description.get("sql-filter"))
    correlation = _str_map(description.get("correlation-filter"))
    action = _str_map(description.get("sql-rule-action"))
    filter_: rules.Filter
    if sql:
        expression = sql.get("expression")
        if not isinstance(expression, str):
            raise ArgumentError("sql-filter needs a string 'expression'")
        filter_ = rules.SqlFilter(expression)
    elif correlation:
        text = [_correlation_text(correlation, key) for key in _CORRELATION_KEYS]
        filter_ = rules.CorrelationFilter(text[0], text[1], text[2], text[3], text[4], text[5], text[6], text[7],
                                          _correlation_properties(correlation))
    else:
        filter_ = rules.TrueFilter()
    action_expression = action.get("expression")
    return rules.RuleDescription(name, filter_,
                                 rules.SqlRuleAction(action_expression) if isinstance(action_expression, str) else None)


def rule_to_wire(rule: rules.RuleDescription) -> Described:
    f = rule.filter
    if isinstance(f, rules.SqlFilter):
        filter_ = Described(ULong(SQL_FILTER), [f.expression])
    elif isinstance(f, rules.CorrelationFilter):
        filter_ = Described(ULong(CORRELATION_FILTER), [
            f.correlation_id, f.message_id, f.to, f.reply_to, f.label, f.session_id, f.reply_to_session_id,
            f.content_type, dict(f.properties)])
    elif isinstance(f, rules.FalseFilter):
        filter_ = Described(ULong(FALSE_FILTER), [])
    else:
        filter_ = Described(ULong(TRUE_FILTER), [])
    action = (Described(ULong(SQL_ACTION), [rule.action.expression]) if rule.action is not None
              else Described(ULong(EMPTY_ACTION), []))
    return Described(ULong(RULE_DESCRIPTION), [filter_, action, rule.name])
