"""The management API's refusals without Manage, in Service Bus's words (admin.keys.missing_manage)."""

from __future__ import annotations

import pytest

from sodalite.admin.keys import SUBCODE_PREFIX, missing_manage
from sodalite.errors import Unauthorized


@pytest.mark.parametrize(("method", "path", "words"), [
    ("GET", "/q", "Manage,EntityRead claims required for this operation."),
    ("GET", "/$Resources/Queues", "Manage,EntityRead claims required for this operation."),
    ("GET", "/t/Subscriptions/s/Rules/r", "Manage,EntityRead claims required for this operation."),
    ("PUT", "/q", "Authorization failed for specified action: Manage,EntityWrite."),
    ("DELETE", "/q", "Authorization failed for specified action: Manage,EntityDelete."),
    ("get", "/t/subscriptions/s", f"{SUBCODE_PREFIX}40100: Unauthorized : Unauthorized access for 'GetSubscription' "
                                  "operation"),
    ("GET", "/t/subscriptions/", f"{SUBCODE_PREFIX}40100: Unauthorized : Unauthorized access for "
                                 "'EnumerateSubscriptions' operation"),
    ("PUT", "/a/b/subscriptions/s", f"{SUBCODE_PREFIX}40100: Unauthorized : Unauthorized access for "
                                    "'CreateOrUpdateSubscription' operation"),
    ("DELETE", "t/subscriptions/s", f"{SUBCODE_PREFIX}40100: Unauthorized : Unauthorized access for "
                                    "'DeleteSubscription' operation"),
    ("POST", "/$authorizationrules/k/regeneratekeys",
     "Unauthorized access. 'Manage' claim(s) are required to perform this operation."),
])
def test_missing_manage_words(method: str, path: str, words: str) -> None:
    refused = missing_manage(method, path)
    assert isinstance(refused, Unauthorized) and refused.http_status == 401
    assert refused.description == words
