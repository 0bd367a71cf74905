"""Config.json with comments, as the emulator ships it (issue 13, item 10)."""

from __future__ import annotations

import pytest

from sodalite.errors import ConfigurationError
from sodalite.model.config import load_config_text, without_comments

SHIPPED_STYLE = """{
  // The emulator's sample configuration: one namespace
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns", // only this name is accepted
        "Queues": [
          {
            "Name": "queue.1",
            "Properties": {
              "DeadLetteringOnMessageExpiration": false,
              "DefaultMessageTimeToLive": "PT1H", // one hour
              /* a block comment,
                 over two lines */
              "LockDuration": "PT1M",
              "MaxDeliveryCount": 3,
              "ForwardTo": "" // no forwarding
            }
          }
        ],
        "Topics": []
      }
    ],
    "Logging": {
      "Type": "File" // or Console
    }
  }
}
"""


def test_the_emulators_config_with_comments_is_accepted() -> None:
    [namespace] = load_config_text(SHIPPED_STYLE)
    assert namespace.name == "sbemulatorns"
    [queue] = namespace.queues
    assert queue.name == "queue.1"
    assert queue.properties.max_delivery_count == 3


def test_slashes_inside_strings_are_not_comments() -> None:
    text = '{"a": "http://x//y /* not */", "b": "quote \\" // c", "c": 1} // end'
    assert without_comments(text) == '{"a": "http://x//y /* not */", "b": "quote \\" // c", "c": 1}       '


def test_an_error_after_a_comment_keeps_its_line_and_column() -> None:
    text = '{\n  // comment\n  "UserConfig": {,\n}'
    with pytest.raises(ConfigurationError, match="line 3, column 18"):
        load_config_text(text)


def test_an_unclosed_block_comment_is_refused_with_its_line() -> None:
    with pytest.raises(ConfigurationError, match="line 2"):
        load_config_text('{\n /* never closed\n"UserConfig": {}}')
