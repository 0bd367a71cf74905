"""The namespace's shared access keys: configured, regenerated at runtime, and stored.

Rules:
- The configured rules (Config.json) hold until a key is regenerated; a regenerated key wins over the
  configuration until the operator edits that key there (``model.authorization.apply_overrides``).
- Each regenerated key is one record of its own, of a kind the entity loader skips, at
  ``$authorizationrules/<$namespace or lower-cased path>/<key name>`` ('$' keeps it apart from entity
  names), so two nodes regenerating different keys at once keep both.
- An older release kept them all in one record at ``$authorizationrules`` (``KeyOverrides.to_json``);
  the start splits it into one record per key.
- A queue's or topic's own rules live in its entity record, which carries the regenerated key too.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from sodalite.model.authorization import (
    AuthorizationRule,
    KeyOverride,
    KeyOverrides,
    KeyType,
    apply_overrides,
    regenerated,
)
from sodalite.model.entities import QueueProperties, TopicProperties
from sodalite.store.port import DeleteEntity, EntityRecord, PutEntity

KEY_OVERRIDES_PATH, KEY_OVERRIDES_KIND = "$authorizationrules", "authorization-rules"

Scoped = TypeVar("Scoped", QueueProperties, TopicProperties)


def override_path(scope: str | None, key_name: str) -> str:
    return f"{KEY_OVERRIDES_PATH}/{'$namespace' if scope is None else scope.lower()}/{key_name.casefold()}"


def override_records(overrides: KeyOverrides) -> dict[str, PutEntity]:
    """One record per regenerated key (:func:`override_path` -> its PutEntity)."""
    scoped: list[tuple[str | None, KeyOverride]] = [(None, o) for o in overrides.namespace]
    scoped += [(path, o) for path, items in overrides.entities.items() for o in items]
    return {override_path(scope, o.key_name).lower(): PutEntity(EntityRecord(
        override_path(scope, o.key_name), KEY_OVERRIDES_KIND, {"Entity": scope, "Override": o.to_json()}))
        for scope, o in scoped}


def stored_overrides(records: Sequence[EntityRecord]) -> tuple[KeyOverrides, set[str], bool]:
    """The regenerated keys in ``records``, the lower-cased paths of their per-key records, and whether
    they include the older release's one record for all of them (which the start then splits)."""
    legacy = next((r for r in records if r.kind == KEY_OVERRIDES_KIND
                   and r.path.lower() == KEY_OVERRIDES_PATH.lower()), None)
    overrides = KeyOverrides.from_json(legacy.properties) if legacy is not None else KeyOverrides()
    paths: set[str] = set()
    for record in records:
        if record.kind != KEY_OVERRIDES_KIND or not record.path.lower().startswith(KEY_OVERRIDES_PATH.lower() + "/"):
            continue
        scope = record.properties.get("Entity")
        overrides = overrides.with_override(str(scope) if scope is not None else None,
                                            KeyOverride.from_json(record.properties["Override"]))
        paths.add(record.path.lower())
    return overrides, paths, legacy is not None


class Keys:
    """The namespace's rules in force (``rules``) and the keys regenerated since the configuration."""

    def __init__(self, configured: tuple[AuthorizationRule, ...]) -> None:
        self.configured = configured
        self.rules = configured
        self.overrides = KeyOverrides()

    def load(self, stored: Sequence[EntityRecord]) -> tuple[set[str], bool]:
        """Apply the stored regenerated keys to the configured namespace rules (those the configuration
        has since replaced are forgotten); the paths of their records and whether the older release's
        one record is among them (see :meth:`record_changes`)."""
        self.overrides, paths, legacy = stored_overrides(stored)
        self.rules, kept = apply_overrides(self.configured, self.overrides.namespace)
        self.overrides = KeyOverrides(kept, self.overrides.entities)
        return paths, legacy

    def configured_entity(self, name: str, properties: Scoped) -> Scoped:
        """A configured queue's or topic's properties with the keys regenerated since (see
        apply_overrides); overrides the configuration has since replaced are forgotten."""
        overrides = self.overrides.for_entity(name)
        if not overrides:
            return properties
        rules, kept = apply_overrides(properties.authorization_rules, overrides)
        self.overrides = KeyOverrides(self.overrides.namespace, {**self.overrides.entities, name.lower(): kept})
        return replace(properties, authorization_rules=rules)

    def record_changes(self, stored_paths: set[str], legacy: bool) -> list[PutEntity | DeleteEntity]:
        """After :meth:`load` and :meth:`configured_entity`: the override records that go (replaced by the
        configuration since), and the older release's one record split into one per key."""
        in_force = override_records(self.overrides)
        changes: list[PutEntity | DeleteEntity] = [DeleteEntity(path) for path in sorted(stored_paths - set(in_force))]
        if legacy:
            changes.extend(in_force.values())
            changes.append(DeleteEntity(KEY_OVERRIDES_PATH))
        return changes

    def regenerate(self, rules: Sequence[AuthorizationRule], before: AuthorizationRule, scope: str | None,
                   key_type: KeyType, key: str | None) -> tuple[AuthorizationRule, KeyOverrides, PutEntity]:
        """``before`` (one of ``rules``, of the namespace or of the queue or topic ``scope``) with a new
        primary or secondary key, random unless ``key`` is given: the new rule, the overrides once it is
        stored, and this key's record only (another node may be regenerating another key meanwhile)."""
        new_key = key if key is not None else base64.b64encode(secrets.token_bytes(32)).decode("ascii")
        after = before.with_key(key_type, new_key)
        earlier = next((o for o in (self.overrides.namespace if scope is None else self.overrides.for_entity(scope))
                        if o.key_name.casefold() == before.key_name.casefold()), None)
        override = regenerated(before, after, earlier)
        (record,) = override_records(KeyOverrides().with_override(scope, override)).values()
        return after, self.overrides.with_override(scope, override), record

    def follow(self, stored: Sequence[EntityRecord]) -> bool:
        """Take up the namespace keys another node regenerated (a queue's or topic's own keys are in its
        record); whether they changed. Raises (KeyError, TypeError, AttributeError, SodaliteError) on an
        unreadable record."""
        records = [r for r in stored if r.kind == KEY_OVERRIDES_KIND]
        if not records:
            return False
        overrides, _, _ = stored_overrides(records)

        def state(of: KeyOverrides) -> dict[str, EntityRecord]:  # the same overrides in any order
            return {path: put.entity for path, put in override_records(of).items()}

        if state(overrides) == state(self.overrides):
            return False
        self.overrides = overrides
        self.rules, _ = apply_overrides(self.configured, overrides.namespace)
        return True
