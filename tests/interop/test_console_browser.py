"""The web console in a real browser (headless Chromium driven by Selenium) against `scripts/serve`.

One broker and one browser for the module. The story a Service Bus Explorer user lives: log in,
create a queue, send from the console and see the message, dead-letter it with the SDK, resubmit
it from the console, receive it with the SDK, purge, delete. Screenshots of the namespace page and
the message browser are taken on the way (into docs/console/ with SODALITE_CONSOLE_SCREENSHOTS=1).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageState, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from test_console_resubmit_kill9 import call

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# The screenshots go to docs/console/ only when asked (SODALITE_CONSOLE_SCREENSHOTS=1), so a test
# run leaves the worktree as it found it; otherwise into a temporary directory.
DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
WAIT = 30  # seconds: a generous bound, never a timing claim
QUEUE = "browser-orders"

pytestmark = pytest.mark.skipif(not Path(CHROMEDRIVER).exists() or not Path(CHROMIUM).exists(),
                                reason="chromium and chromium-driver are not installed (scripts/test installs them)")


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("console-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", [{"Name": "existing", "Properties": {}}]))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    profile = tempfile.mkdtemp(prefix="sodalite-chromium-")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver: WebDriver, condition: object, message: str = "") -> object:
    waiting = WebDriverWait(driver, WAIT, ignored_exceptions=(StaleElementReferenceException, NoSuchElementException))
    return waiting.until(condition, message)  # type: ignore[arg-type]


def text_of(driver: WebDriver, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def fill(driver: WebDriver, element_id: str, value: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def accept_confirmation(driver: WebDriver) -> str:
    """Accept the page's confirm() and return what it said."""
    def alert_present(d: WebDriver) -> object:
        try:
            return d.switch_to.alert
        except NoAlertPresentException:
            return False

    alert = wait_for(driver, alert_present, "no confirmation was asked")
    said = str(alert.text)  # type: ignore[attr-defined]
    alert.accept()  # type: ignore[attr-defined]
    return said


def count_cell(driver: WebDriver, path: str, key: str) -> str:
    return text_of(driver, f'tr[data-path="{path}"] td[data-count="{key}"]')


def test_the_console_story_from_login_to_delete(console_broker: BrokerProcess, browser: WebDriver,
                                                 tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{console_broker.http_port}"
    driver = browser
    shots = DOCS_SHOTS if os.environ.get("SODALITE_CONSOLE_SCREENSHOTS") == "1" else tmp_path
    shots.mkdir(parents=True, exist_ok=True)

    # Log in: a wrong key is refused in the page, the right one opens the namespace.
    driver.get(base + "/console/")
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-key"), "no login form")
    fill(driver, "login-key-name", KEY_NAME)
    fill(driver, "login-key", "not-the-key")
    driver.find_element(By.ID, "login-submit").click()
    wait_for(driver, lambda d: "signature" in text_of(d, "#error"), "a wrong key was not refused in the page")
    fill(driver, "login-key", KEY)
    driver.find_element(By.ID, "login-submit").click()
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-path="existing"]'), "no namespace page")
    cookies = {c["name"]: c for c in driver.get_cookies()}
    assert cookies["sodalite_session"]["httpOnly"] is True
    assert cookies["sodalite_session"]["sameSite"] == "Strict"

    # A bad entity name: the broker's error, shown in the page.
    fill(driver, "create-path", "bad name!")
    driver.find_element(By.ID, "create-submit").click()
    wait_for(driver, lambda d: text_of(d, "#error") != "", "no error shown for a bad name")

    # Create a queue.
    fill(driver, "create-path", QUEUE)
    fill(driver, "create-properties", '{"MaxDeliveryCount": 5}')
    driver.find_element(By.ID, "create-submit").click()
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-path="{QUEUE}"]'), "queue not listed")

    # Counts refresh without a reload: a message sent with the SDK shows up on the open page.
    driver.execute_script("window.__sameDocument = 42;")
    with ServiceBusClient.from_connection_string(console_broker.connection_string) as client, \
            client.get_queue_sender("existing") as sender:
        sender.send_messages(ServiceBusMessage("counted"))
    wait_for(driver, lambda d: (count_cell(d, "existing", "active") == "1"
                                and count_cell(d, "existing", "inRate") != "0.0"),
             "the count and the rate did not refresh")
    assert driver.execute_script("return window.__sameDocument;") == 42  # no reload happened
    assert driver.save_screenshot(str(shots / "namespace.png"))

    # Send a message from the console, then see it in the browser.
    driver.find_element(By.LINK_TEXT, QUEUE).click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "send-body"), "no entity page")
    assert driver.find_elements(By.CSS_SELECTOR, "#rates svg polyline")  # the in/out chart
    fill(driver, "send-body", json.dumps({"order": 17, "items": ["sodalite", "quartz"]}))
    fill(driver, "send-content-type", "application/json")
    fill(driver, "send-message-id", "order-17")
    fill(driver, "send-properties", '{"color": "red", "priority": 2}')
    driver.find_element(By.ID, "send-submit").click()
    wait_for(driver, lambda d: "Sent a message" in text_of(d, "#notice"), "the send was not confirmed")
    driver.find_element(By.ID, "browse-peek").click()
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#messages tr"), "the message is not listed")
    row = driver.find_element(By.CSS_SELECTOR, "#messages tr")
    assert "order-17" in row.text
    row.find_elements(By.TAG_NAME, "td")[2].click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "message-body"), "the message did not open")
    assert json.loads(text_of(driver, "#message-body")) == {"order": 17, "items": ["sodalite", "quartz"]}
    Select(driver.find_element(By.ID, "body-mode")).select_by_value("json")
    assert '"order": 17' in text_of(driver, "#message-body")  # pretty-printed
    assert '"red"' in text_of(driver, "#application-properties")
    assert driver.save_screenshot(str(shots / "message-browser.png"))
    Select(driver.find_element(By.ID, "body-mode")).select_by_value("hex")
    assert text_of(driver, "#message-body").startswith("00000000  7b 22")

    # Dead-letter it with the SDK.
    with ServiceBusClient.from_connection_string(console_broker.connection_string) as client:
        with client.get_queue_receiver(QUEUE, max_wait_time=10) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert [m.message_id for m in received] == ["order-17"]
            receiver.dead_letter_message(received[0], reason="Poison", error_description="tested")

    # Resubmit it from the console: the confirmation states the count.
    Select(driver.find_element(By.ID, "browse-sub-queue")).select_by_value("deadletter")
    driver.find_element(By.ID, "browse-peek").click()
    wait_for(driver, lambda d: "Poison" in text_of(d, "#messages"), "the dead-lettered message is not listed")
    driver.find_element(By.CSS_SELECTOR, "#messages input.pick").click()
    driver.find_element(By.ID, "move-selected").click()
    said = accept_confirmation(driver)
    assert said.startswith("Resubmit 1 message(s)")  # back to its own entity: a resubmit, not a move
    wait_for(driver, lambda d: "Resubmitted 1 of 1" in text_of(d, "#notice"), "the resubmit was not confirmed")

    # Receive it with the SDK: same MessageId and properties, delivery count reset, reason gone.
    with ServiceBusClient.from_connection_string(console_broker.connection_string) as client:
        with client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                       max_wait_time=2) as dead:
            assert dead.peek_messages(max_message_count=10) == []
        with client.get_queue_receiver(QUEUE, max_wait_time=10) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert len(received) == 1
            message = received[0]
            assert message.message_id == "order-17"
            assert json.loads(b"".join(message.body)) == {"order": 17, "items": ["sodalite", "quartz"]}
            assert message.application_properties == {b"color": b"red", b"priority": 2}
            assert message.delivery_count == 0
            assert message.dead_letter_reason is None
            receiver.complete_message(message)
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage("purge me 1"), ServiceBusMessage("purge me 2")])

    # Purge: the confirmation states the count, the page reports what was deleted.
    Select(driver.find_element(By.ID, "browse-sub-queue")).select_by_value("active")
    driver.find_element(By.ID, "purge").click()
    said = accept_confirmation(driver)
    assert said.startswith("Purge 2 message(s)")
    wait_for(driver, lambda d: "Purged 2" in text_of(d, "#notice"), "the purge was not confirmed")

    # Delete the queue; the namespace page no longer lists it.
    driver.find_element(By.ID, "entity-delete").click()
    assert QUEUE in accept_confirmation(driver)
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-path="existing"]'), "not back home")
    wait_for(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, f'tr[data-path="{QUEUE}"]'), "still listed")
    with ServiceBusClient.from_connection_string(console_broker.connection_string, retry_total=0) as client, \
            pytest.raises(ServiceBusAuthenticationError):  # its put-token is answered 404: it does not exist
        with client.get_queue_receiver(QUEUE, max_wait_time=2) as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=2)


def test_an_expired_or_ended_login_returns_to_the_login_form(console_broker: BrokerProcess,
                                                             browser: WebDriver) -> None:
    base = f"http://127.0.0.1:{console_broker.http_port}"
    driver = browser
    driver.get(base + "/console/")
    if driver.find_elements(By.ID, "logout") and driver.find_element(By.ID, "logout").is_displayed():
        driver.find_element(By.ID, "logout").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-key"), "no login form after logging out")
    driver.delete_all_cookies()
    driver.get(base + "/console/#/keys")
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-key"), "a page opened without a login")


def log_in(driver: WebDriver, base: str) -> None:
    driver.get(base + "/console/")
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-key") or d.find_elements(By.ID, "entity-table"),
             "neither the login form nor the namespace page")
    if driver.find_elements(By.ID, "login-key"):
        fill(driver, "login-key-name", KEY_NAME)
        fill(driver, "login-key", KEY)
        driver.find_element(By.ID, "login-submit").click()
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-path="existing"]'), "no namespace page")


def test_topics_subscriptions_rules_keys_and_stores_from_the_console(console_broker: BrokerProcess,
                                                                     browser: WebDriver) -> None:
    base = f"http://127.0.0.1:{console_broker.http_port}"
    driver = browser
    log_in(driver, base)
    for kind, path in (("topic", "browser-events"), ("subscription", "browser-events/subscriptions/reds")):
        Select(driver.find_element(By.ID, "create-kind")).select_by_value(kind)
        fill(driver, "create-path", path)
        driver.find_element(By.ID, "create-submit").click()
        wait_for(driver, lambda d, p=path: d.find_elements(By.CSS_SELECTOR, f'tr[data-path="{p}"]'), f"{path} missing")

    driver.get(base + "/console/#/entity/" + "browser-events%2Fsubscriptions%2Freds")
    wait_for(driver, lambda d: d.find_elements(By.ID, "rule-add"), "no rules panel")
    assert not driver.find_elements(By.ID, "send-body")  # one sends to the topic, not to a subscription
    fill(driver, "rule-name", "broken")
    fill(driver, "rule-filter", "color = = 'red'")
    driver.find_element(By.ID, "rule-add").click()
    wait_for(driver, lambda d: "color" in text_of(d, "#error") or "position" in text_of(d, "#error").lower(),
             "the filter's syntax error is not shown")
    fill(driver, "rule-name", "reds")
    fill(driver, "rule-filter", "color = 'red'")
    driver.find_element(By.ID, "rule-add").click()
    wait_for(driver, lambda d: "reds" in text_of(d, "#rules") and "color = 'red'" in text_of(d, "#rules"),
             "the rule is not listed")

    # Delete the $Default rule (which takes everything); then only red messages reach the subscription.
    driver.find_element(By.XPATH, "//div[@id='rules']//tr[td[text()='$Default']]//button").click()
    assert "$Default" in accept_confirmation(driver)
    wait_for(driver, lambda d: "$Default" not in text_of(d, "#rules") and "reds" in text_of(d, "#rules"),
             "the $Default rule is still listed")
    with ServiceBusClient.from_connection_string(console_broker.connection_string) as client, \
            client.get_topic_sender("browser-events") as sender:
        sender.send_messages([ServiceBusMessage("red one", application_properties={"color": "red"}),
                              ServiceBusMessage("blue one", application_properties={"color": "blue"})])
    driver.find_element(By.ID, "browse-peek").click()
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#messages tr")) == 1,
             "the red message is not listed alone")
    driver.find_element(By.CSS_SELECTOR, "#messages tr td:nth-child(3)").click()
    wait_for(driver, lambda d: text_of(d, "#message-body") == "red one", "the red message did not open")

    driver.get(base + "/console/#/keys")
    wait_for(driver, lambda d: KEY_NAME in text_of(d, "main"), "no keys page")
    secondary = f'tr[data-key-name="{KEY_NAME}"][data-scope=""] td.secondary-key'
    for reveal in driver.find_elements(By.CSS_SELECTOR, secondary + " button.reveal"):  # none without a key yet
        reveal.click()
    before = text_of(driver, secondary)
    driver.find_element(By.XPATH, "//button[text()='Regenerate secondary']").click()
    assert "SecondaryKey" in accept_confirmation(driver)
    wait_for(driver, lambda d: "Regenerated the SecondaryKey" in text_of(d, "#notice"), "no regeneration")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, secondary + " button.reveal"), "no keys page")
    driver.find_element(By.CSS_SELECTOR, secondary + " button.reveal").click()
    wait_for(driver, lambda d: text_of(d, secondary + " code") not in (before.removesuffix(" Hide"), "••••••••••••"),
             "the key did not change on the page")

    driver.get(base + "/console/#/stores")
    wait_for(driver, lambda d: "default" in text_of(d, "main") and "online" in text_of(d, "main"), "no stores page")


def log_out(driver: WebDriver, base: str) -> None:
    driver.get(base + "/console/")
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-key") or d.find_elements(By.ID, "entity-table"),
             "neither the login form nor the namespace page")
    if driver.find_elements(By.ID, "entity-table"):
        driver.find_element(By.ID, "logout").click()
        wait_for(driver, lambda d: d.find_elements(By.ID, "login-key"), "no login form after logging out")


def test_serve_prints_the_console_url_and_the_login_page_shows_no_navigation(console_broker: BrokerProcess,
                                                                            browser: WebDriver,
                                                                            tmp_path: Path) -> None:
    printed = [line for line in console_broker.output if line.startswith("Console: ")]
    assert printed == [f"Console: http://localhost:{console_broker.http_port}/console/\n"], console_broker.output
    driver = browser
    log_out(driver, f"http://127.0.0.1:{console_broker.http_port}")
    driver.get(printed[0].removeprefix("Console: ").strip())
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-key"), "the printed URL opens no login form")
    assert not driver.find_element(By.ID, "nav").is_displayed()
    assert not driver.find_element(By.ID, "logout").is_displayed()
    assert driver.save_screenshot(str(tmp_path / "login.png"))
    fill(driver, "login-key-name", KEY_NAME)
    fill(driver, "login-key", KEY)
    driver.find_element(By.ID, "login-submit").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "entity-table"), "no namespace page")
    assert driver.find_element(By.ID, "logout").is_displayed()


def test_a_new_notice_replaces_the_previous_one(console_broker: BrokerProcess, browser: WebDriver) -> None:
    base = f"http://127.0.0.1:{console_broker.http_port}"
    driver = browser
    log_in(driver, base)
    driver.get(base + "/console/#/entity/existing")
    wait_for(driver, lambda d: d.find_elements(By.ID, "send-body"), "no entity page")
    fill(driver, "send-body", "one")
    driver.find_element(By.ID, "send-submit").click()
    wait_for(driver, lambda d: "Sent a message" in text_of(d, "#notice"), "the send was not confirmed")
    driver.find_element(By.ID, "move-selected").click()  # nothing selected: an error
    wait_for(driver, lambda d: "Select messages first" in text_of(d, "#error"), "no error shown")
    assert not driver.find_element(By.ID, "notice").is_displayed()  # the success is gone
    fill(driver, "send-body", "two")
    driver.find_element(By.ID, "send-submit").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "notice").is_displayed(), "the second send was not confirmed")
    assert not driver.find_element(By.ID, "error").is_displayed()  # the error is gone
    with ServiceBusClient.from_connection_string(console_broker.connection_string) as client, \
            client.get_queue_receiver("existing", max_wait_time=5) as receiver:
        for message in receiver.receive_messages(max_message_count=10, max_wait_time=5):
            receiver.complete_message(message)


def test_a_topic_lists_its_subscriptions_and_rules_read_as_filters_and_actions(console_broker: BrokerProcess,
                                                                               browser: WebDriver,
                                                                               tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{console_broker.http_port}"
    driver = browser
    shots = DOCS_SHOTS if os.environ.get("SODALITE_CONSOLE_SCREENSHOTS") == "1" else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    call(console_broker, "POST", "/entities", {"kind": "topic", "path": "shop"})
    for name in ("audit", "big-orders"):
        call(console_broker, "POST", "/entities", {"kind": "subscription", "path": f"shop/subscriptions/{name}"})
    with ServiceBusClient.from_connection_string(console_broker.connection_string) as client, \
            client.get_topic_sender("shop") as sender:
        sender.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
    log_in(driver, base)

    driver.get(base + "/console/#/entity/shop")
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#subscription-rows tr[data-path]")) == 2,
             "the topic's page does not list its subscriptions")
    for name in ("audit", "big-orders"):
        row = f'#subscription-rows tr[data-path="shop/subscriptions/{name}"]'
        wait_for(driver, lambda d, r=row: text_of(d, r + ' td[data-count="active"]') == "2", f"{name}'s count")
    assert driver.save_screenshot(str(shots / "topic.png"))

    # A subscription's rules: filters and actions as text, a correlation filter added from the form.
    driver.find_element(By.LINK_TEXT, "big-orders").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "rule-add"), "no rules panel")
    rules = text_of(driver, "#rules")
    assert "$Default" in rules and "True filter" in rules and "every message" in rules
    assert "FilterType" not in rules and "{" not in rules  # not raw JSON
    fill(driver, "rule-name", "big-red")
    Select(driver.find_element(By.ID, "rule-filter-type")).select_by_value("Correlation")
    assert not driver.find_element(By.ID, "rule-filter").is_displayed()
    fill(driver, "rule-correlation-subject", "big")
    fill(driver, "rule-correlation-properties", "color=red\npriority:=2")
    fill(driver, "rule-action", "SET sys.To = 'warehouse'")
    driver.find_element(By.ID, "rule-add").click()
    row = 'tr[data-rule="big-red"]'
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the correlation rule is not listed")
    assert text_of(driver, row + " td.filter-kind") == "Correlation filter"
    assert text_of(driver, row + " td.filter") == "Subject = 'big' AND color = 'red' AND priority = 2"
    assert text_of(driver, row + " td.action") == "SET sys.To = 'warehouse'"
    assert text_of(driver, 'tr[data-rule="$Default"] td.action') == "none"
    assert "Added rule big-red" in text_of(driver, "#notice")
    assert driver.save_screenshot(str(shots / "rules.png"))
    stored = {r["name"]: r["rule"]["Properties"] for r in
              call(console_broker, "GET", "/entities/shop/subscriptions/big-orders/$rules")}
    assert stored["big-red"]["FilterType"] == "Correlation"
    assert stored["big-red"]["CorrelationFilter"]["Label"] == "big"
    assert stored["big-red"]["CorrelationFilter"]["Properties"] == {"color": "red", "priority": 2}


def test_dead_letters_show_as_dead_lettered_and_a_new_sub_queue_loads_at_once(console_broker: BrokerProcess,
                                                                                browser: WebDriver) -> None:
    base = f"http://127.0.0.1:{console_broker.http_port}"
    driver = browser
    call(console_broker, "POST", "/entities", {"kind": "queue", "path": "poisoned"})
    with ServiceBusClient.from_connection_string(console_broker.connection_string) as client:
        with client.get_queue_sender("poisoned") as sender:
            sender.send_messages(ServiceBusMessage("bad", message_id="bad-1"))
        with client.get_queue_receiver("poisoned", max_wait_time=10) as receiver:
            for message in receiver.receive_messages(max_message_count=1, max_wait_time=10):
                receiver.dead_letter_message(message, reason="Poison")
        # What the SDK reads keeps its three values: a dead-lettered message's state is Active.
        with client.get_queue_receiver("poisoned", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            peeked = dead.peek_messages(max_message_count=1)
            assert [m.state for m in peeked] == [ServiceBusMessageState.ACTIVE]
    log_in(driver, base)
    driver.get(base + "/console/#/entity/poisoned")
    wait_for(driver, lambda d: d.find_elements(By.ID, "browse-sub-queue"), "no message browser")
    driver.find_element(By.ID, "browse-peek").click()
    wait_for(driver, lambda d: "no messages" in text_of(d, "#page-info"), "the active sub-queue is not empty")
    Select(driver.find_element(By.ID, "browse-sub-queue")).select_by_value("deadletter")  # no Peek pressed
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#messages tr"), "the dead letters did not load")
    assert text_of(driver, "#messages tr td.state") == "Dead-lettered"
    driver.find_element(By.CSS_SELECTOR, "#messages tr td:nth-child(3)").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "system-properties"), "the message did not open")
    assert "State Dead-lettered" in text_of(driver, "#system-properties")
    Select(driver.find_element(By.ID, "browse-sub-queue")).select_by_value("active")
    wait_for(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, "#messages tr"), "the list did not reload")


def test_access_keys_are_masked_until_shown(console_broker: BrokerProcess, browser: WebDriver,
                                            tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{console_broker.http_port}"
    driver = browser
    log_in(driver, base)
    driver.get(base + "/console/#/keys")
    primary = f'tr[data-key-name="{KEY_NAME}"][data-scope=""] td.primary-key'
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, primary), "no keys page")
    page = text_of(driver, "main")
    keys = [k for rule in call(console_broker, "GET", "/keys") for k in (rule["primaryKey"], rule["secondaryKey"]) if k]
    assert keys and not [k for k in keys if k in page]  # no key is on the page
    driver.find_element(By.CSS_SELECTOR, primary + " button.reveal").click()
    wait_for(driver, lambda d: KEY in text_of(d, primary), "the key is not shown when asked")
    assert driver.save_screenshot(str(tmp_path / "keys.png"))
    driver.find_element(By.CSS_SELECTOR, primary + " button.reveal").click()
    wait_for(driver, lambda d: KEY not in text_of(d, primary), "the key is not hidden again")
