package sodalite.jms;

import jakarta.jms.BytesMessage;
import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.JMSException;
import jakarta.jms.JMSSecurityException;
import jakarta.jms.MapMessage;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.QueueBrowser;
import jakarta.jms.Session;
import jakarta.jms.StreamMessage;
import jakarta.jms.TemporaryQueue;
import jakarta.jms.TemporaryTopic;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Enumeration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.qpid.jms.JmsConnectionFactory;

/**
 * JMS 2.0 through Apache Qpid JMS against the broker, as an application written for Service Bus Premium
 * connects: a shared access rule's key name and key as user name and password (SASL PLAIN), no token.
 * One scenario per run: {@code java sodalite.jms.Scenarios <amqp uri> <key name> <key> <scenario>}; it
 * prints {@code PASS <scenario>}, or {@code FAIL <scenario>: <why>} and exits 1. Queues are named
 * {@code jms-<scenario>} and start empty; tests/interop/test_jms.py checks what a scenario leaves behind.
 */
public final class Scenarios {
    private static final long WAIT_MS = 10_000;
    private static final long NOTHING_MS = 1_500;  // how long "nothing more arrives" is waited for

    private final String uri;
    private final String keyName;
    private final String key;

    private Scenarios(String uri, String keyName, String key) {
        this.uri = uri;
        this.keyName = keyName;
        this.key = key;
    }

    interface Scenario {
        void run(Scenarios s) throws Exception;
    }

    public static void main(String[] args) {
        Scenarios s = new Scenarios(args[0], args[1], args[2]);
        String scenario = args[3];
        Map<String, Scenario> scenarios = new TreeMap<>();
        scenarios.put("send-receive", Scenarios::sendReceive);
        scenarios.put("browser", Scenarios::browser);
        scenarios.put("transacted", Scenarios::transacted);
        scenarios.put("client-ack-recover", Scenarios::clientAckRecover);
        scenarios.put("ttl", Scenarios::ttl);
        scenarios.put("delivery-delay", Scenarios::deliveryDelay);
        scenarios.put("wrong-key", Scenarios::wrongKey);
        scenarios.put("topics", Scenarios::topics);
        scenarios.put("temporary", Scenarios::temporary);
        scenarios.put("selectors", Scenarios::selectors);
        scenarios.put("topic-needs-manage", Scenarios::topicNeedsManage);
        scenarios.put("unsubscribe", Scenarios::unsubscribe);
        Scenario run = scenarios.get(scenario);
        if (run == null) {
            System.out.println("FAIL " + scenario + ": no such scenario; known: " + scenarios.keySet());
            System.exit(2);
        }
        try {
            run.run(s);
        } catch (Throwable failure) {
            System.out.println("FAIL " + scenario + ": " + failure);
            failure.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
        System.out.println("PASS " + scenario);
        System.out.flush();
        System.exit(0);
    }

    private static void check(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    private static void equal(Object expected, Object actual, String what) {
        if (expected == null ? actual != null : !expected.equals(actual)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }

    private Connection connect(String user, String password) throws JMSException {
        JmsConnectionFactory factory = new JmsConnectionFactory(user, password, uri);
        Connection connection = factory.createConnection();
        connection.start();
        return connection;
    }

    private Connection connect() throws JMSException {
        return connect(keyName, key);
    }

    private static List<String> texts(MessageConsumer consumer) throws JMSException {
        List<String> got = new ArrayList<>();
        Message m = consumer.receive(WAIT_MS);
        while (m != null) {
            got.add(((TextMessage) m).getText());
            m = consumer.receive(NOTHING_MS);
        }
        return got;
    }

    // ---- scenarios ------------------------------------------------------------------------------------

    /** Each JMS message type and property type, and the JMS headers, come back as sent. */
    private void sendReceive() throws Exception {
        try (Connection connection = connect()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue queue = session.createQueue("jms-send-receive");
            MessageProducer producer = session.createProducer(queue);
            TextMessage text = session.createTextMessage("hello jms");
            text.setStringProperty("s", "a string");
            text.setIntProperty("i", 42);
            text.setLongProperty("l", 1L << 40);
            text.setBooleanProperty("b", true);
            text.setDoubleProperty("d", 2.5);
            text.setFloatProperty("f", 1.25f);
            text.setShortProperty("sh", (short) 7);
            text.setByteProperty("by", (byte) -3);
            text.setJMSCorrelationID("corr-1");
            text.setJMSType("greeting");
            text.setJMSReplyTo(session.createQueue("jms-replies"));
            producer.send(text);
            BytesMessage bytes = session.createBytesMessage();
            bytes.writeBytes(new byte[] {1, 2, 3, (byte) 0xff});
            producer.send(bytes);
            MapMessage map = session.createMapMessage();
            map.setString("name", "value");
            map.setInt("count", 3);
            producer.send(map);
            StreamMessage stream = session.createStreamMessage();
            stream.writeString("first");
            stream.writeLong(99L);
            producer.send(stream);
            producer.send(session.createObjectMessage(new ArrayList<>(List.of("x", "y"))));

            MessageConsumer consumer = session.createConsumer(queue);
            Message got = consumer.receive(WAIT_MS);
            check(got instanceof TextMessage, "a TextMessage, got " + got);
            equal("hello jms", ((TextMessage) got).getText(), "text");
            equal("a string", got.getStringProperty("s"), "string property");
            equal(42, got.getObjectProperty("i"), "int property");
            equal(1L << 40, got.getObjectProperty("l"), "long property");
            equal(true, got.getObjectProperty("b"), "boolean property");
            equal(2.5, got.getObjectProperty("d"), "double property");
            equal(1.25f, got.getObjectProperty("f"), "float property");
            equal((short) 7, got.getObjectProperty("sh"), "short property");
            equal((byte) -3, got.getObjectProperty("by"), "byte property");
            equal("corr-1", got.getJMSCorrelationID(), "correlation id");
            equal("greeting", got.getJMSType(), "JMSType");
            equal("jms-replies", ((Queue) got.getJMSReplyTo()).getQueueName(), "reply-to");
            equal("jms-send-receive", ((Queue) got.getJMSDestination()).getQueueName(), "destination");
            check(got.getJMSMessageID() != null && got.getJMSMessageID().startsWith("ID:"), "message id");
            equal(DeliveryMode.PERSISTENT, got.getJMSDeliveryMode(), "delivery mode");
            check(!got.getJMSRedelivered(), "not redelivered");
            got = consumer.receive(WAIT_MS);
            check(got instanceof BytesMessage, "a BytesMessage, got " + got);
            byte[] body = new byte[(int) ((BytesMessage) got).getBodyLength()];
            ((BytesMessage) got).readBytes(body);
            check(Arrays.equals(new byte[] {1, 2, 3, (byte) 0xff}, body), "bytes body " + Arrays.toString(body));
            got = consumer.receive(WAIT_MS);
            check(got instanceof MapMessage, "a MapMessage, got " + got);
            equal("value", ((MapMessage) got).getString("name"), "map string");
            equal(3, ((MapMessage) got).getInt("count"), "map int");
            got = consumer.receive(WAIT_MS);
            check(got instanceof StreamMessage, "a StreamMessage, got " + got);
            equal("first", ((StreamMessage) got).readString(), "stream string");
            equal(99L, ((StreamMessage) got).readLong(), "stream long");
            got = consumer.receive(WAIT_MS);
            check(got instanceof jakarta.jms.ObjectMessage, "an ObjectMessage, got " + got);
            equal(List.of("x", "y"), ((jakarta.jms.ObjectMessage) got).getObject(), "object body");
            check(consumer.receive(NOTHING_MS) == null, "nothing more");
        }
    }

    /** A browser sees every message, in order, and takes none of them. */
    private void browser() throws Exception {
        try (Connection connection = connect()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue queue = session.createQueue("jms-browser");
            MessageProducer producer = session.createProducer(queue);
            for (int i = 0; i < 5; i++) {
                producer.send(session.createTextMessage("browse-" + i));
            }
            for (int pass = 0; pass < 2; pass++) {
                QueueBrowser browser = session.createBrowser(queue);
                List<String> seen = new ArrayList<>();
                Enumeration<?> e = browser.getEnumeration();
                while (e.hasMoreElements()) {
                    seen.add(((TextMessage) e.nextElement()).getText());
                }
                browser.close();
                equal(List.of("browse-0", "browse-1", "browse-2", "browse-3", "browse-4"), seen, "browsed, pass " + pass);
            }
            MessageConsumer consumer = session.createConsumer(queue);
            equal(5, texts(consumer).size(), "all five still there after browsing");
        }
    }

    /** A transacted session's sends and receives take effect at commit, and are undone by rollback. */
    private void transacted() throws Exception {
        try (Connection connection = connect()) {
            Session tx = connection.createSession(true, Session.SESSION_TRANSACTED);
            Queue queue = tx.createQueue("jms-transacted");
            MessageProducer producer = tx.createProducer(queue);
            producer.send(tx.createTextMessage("rolled-back"));
            tx.rollback();
            producer.send(tx.createTextMessage("committed-1"));
            producer.send(tx.createTextMessage("committed-2"));
            Session plain = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer watcher = plain.createConsumer(plain.createQueue("jms-transacted"));
            check(watcher.receive(NOTHING_MS) == null, "nothing visible before commit");
            watcher.close();
            tx.commit();

            MessageConsumer consumer = tx.createConsumer(queue);
            Message first = consumer.receive(WAIT_MS);
            equal("committed-1", ((TextMessage) first).getText(), "first committed");
            tx.rollback();  // the receive is undone: the message comes back (when its lock lapses, as in Service Bus)
            List<String> again = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 20_000;
            while (again.size() < 2 && System.currentTimeMillis() < deadline) {
                Message m = consumer.receive(1000);
                if (m != null) {
                    again.add(((TextMessage) m).getText());
                    tx.commit();  // each receive commits while its lock is held
                }
            }
            Collections.sort(again);
            equal(List.of("committed-1", "committed-2"), again, "after the rollback");
            consumer.close();
            MessageConsumer after = plain.createConsumer(plain.createQueue("jms-transacted"));
            check(after.receive(NOTHING_MS) == null, "the committed receives took both");
        }
    }

    /** CLIENT_ACKNOWLEDGE: recover() redelivers what was not acknowledged; acknowledge() settles it. */
    private void clientAckRecover() throws Exception {
        try (Connection connection = connect()) {
            Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            Queue queue = session.createQueue("jms-client-ack");
            MessageProducer producer = session.createProducer(queue);
            producer.send(session.createTextMessage("ack-1"));
            producer.send(session.createTextMessage("ack-2"));
            MessageConsumer consumer = session.createConsumer(queue);
            Message first = consumer.receive(WAIT_MS);
            equal("ack-1", ((TextMessage) first).getText(), "first");
            check(!first.getJMSRedelivered(), "first delivery");
            session.recover();
            Message again = consumer.receive(WAIT_MS);
            check(again != null, "redelivered after recover");
            equal("ack-1", ((TextMessage) again).getText(), "the same message again");
            check(again.getJMSRedelivered(), "marked redelivered");
            Message second = consumer.receive(WAIT_MS);
            equal("ack-2", ((TextMessage) second).getText(), "second");
            second.acknowledge();  // acknowledges every message the session received
            consumer.close();
            MessageConsumer after = session.createConsumer(queue);
            check(after.receive(NOTHING_MS) == null, "both acknowledged");
        }
    }

    /** A message whose time to live passes is not delivered; one still alive is, with its expiration. */
    private void ttl() throws Exception {
        try (Connection connection = connect()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue queue = session.createQueue("jms-ttl");
            MessageProducer producer = session.createProducer(queue);
            producer.setTimeToLive(1000);
            producer.send(session.createTextMessage("short-lived"));
            producer.setTimeToLive(600_000);
            long sent = System.currentTimeMillis();
            producer.send(session.createTextMessage("long-lived"));
            Thread.sleep(2500);
            MessageConsumer consumer = session.createConsumer(queue);
            Message got = consumer.receive(WAIT_MS);
            check(got != null, "the live message arrives");
            equal("long-lived", ((TextMessage) got).getText(), "only the live message");
            long expiration = got.getJMSExpiration();
            check(Math.abs(expiration - (sent + 600_000)) < 60_000, "JMSExpiration about sent + TTL: " + expiration);
            check(consumer.receive(NOTHING_MS) == null, "the expired one never arrives");
        }
    }

    /** A message with a delivery delay is a scheduled message: it arrives when its delay has passed. */
    private void deliveryDelay() throws Exception {
        try (Connection connection = connect()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue queue = session.createQueue("jms-delivery-delay");
            MessageProducer producer = session.createProducer(queue);
            producer.setDeliveryDelay(4000);
            long sent = System.currentTimeMillis();
            producer.send(session.createTextMessage("later"));
            producer.setDeliveryDelay(0);
            producer.send(session.createTextMessage("now"));
            MessageConsumer consumer = session.createConsumer(queue);
            Message first = consumer.receive(WAIT_MS);
            equal("now", ((TextMessage) first).getText(), "the undelayed message first");
            Message later = consumer.receive(WAIT_MS);
            long arrived = System.currentTimeMillis();
            check(later != null, "the delayed message arrives");
            equal("later", ((TextMessage) later).getText(), "the delayed message");
            check(arrived - sent >= 3500, "not before its delay: " + (arrived - sent) + " ms");
            check(Math.abs(later.getJMSDeliveryTime() - (sent + 4000)) < 2000,
                  "JMSDeliveryTime " + later.getJMSDeliveryTime() + " about sent + 4000 = " + (sent + 4000));
        }
    }

    /** The four kinds of topic subscription: durable or not, shared or not. */
    private void topics() throws Exception {
        try (Connection connection = new JmsConnectionFactory(keyName, key, uri).createConnection()) {
            connection.setClientID("jms-client");
            connection.start();
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic topic = session.createTopic("jms-topic");
            MessageProducer producer = session.createProducer(topic);

            // Non-durable, not shared: each consumer gets every message.
            MessageConsumer first = session.createConsumer(topic);
            MessageConsumer second = session.createConsumer(topic);
            producer.send(session.createTextMessage("to-both"));
            equal(List.of("to-both"), texts(first), "first non-durable consumer");
            equal(List.of("to-both"), texts(second), "second non-durable consumer");
            first.close();
            second.close();

            // Shared, non-durable: the consumers of one name share its messages.
            MessageConsumer shareA = session.createSharedConsumer(topic, "shared-volatile");
            MessageConsumer shareB = session.createSharedConsumer(topic, "shared-volatile");
            for (int i = 0; i < 4; i++) {
                producer.send(session.createTextMessage("shared-" + i));
            }
            List<String> shared = new ArrayList<>(texts(shareA));
            shared.addAll(texts(shareB));
            Collections.sort(shared);
            equal(List.of("shared-0", "shared-1", "shared-2", "shared-3"), shared, "shared, each message once");
            shareA.close();
            shareB.close();

            // Durable, not shared: what arrives while no consumer is open waits for the next one.
            MessageConsumer durable = session.createDurableConsumer(topic, "durable-one");
            durable.close();
            producer.send(session.createTextMessage("while-away"));
            durable = session.createDurableConsumer(topic, "durable-one");
            equal(List.of("while-away"), texts(durable), "durable consumer, after reopening");
            durable.close();

            // Shared and durable: likewise, and shared.
            MessageConsumer sharedDurable = session.createSharedDurableConsumer(topic, "shared-durable");
            sharedDurable.close();
            producer.send(session.createTextMessage("kept-for-shared"));
            sharedDurable = session.createSharedDurableConsumer(topic, "shared-durable");
            equal(List.of("kept-for-shared"), texts(sharedDurable), "shared durable consumer, after reopening");
            sharedDurable.close();
            producer.send(session.createTextMessage("left-for-later"));  // kept by both durable subscriptions
        }
    }

    private static List<String> browse(Session session, Queue queue, String selector) throws JMSException {
        QueueBrowser browser = session.createBrowser(queue, selector);
        List<String> seen = new ArrayList<>();
        Enumeration<?> e = browser.getEnumeration();
        while (e.hasMoreElements()) {
            seen.add(((TextMessage) e.nextElement()).getText());
        }
        browser.close();
        return seen;
    }

    /** Selectors (Service Bus SQL filters) on browsers, queue consumers and topic consumers. */
    private void selectors() throws Exception {
        try (Connection connection = connect()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue queue = session.createQueue("jms-selectors");
            MessageProducer producer = session.createProducer(queue);
            String[] colors = {"red", "blue", "red", "green"};
            for (int i = 0; i < colors.length; i++) {
                TextMessage m = session.createTextMessage("m" + i + "-" + colors[i]);
                m.setStringProperty("color", colors[i]);
                m.setIntProperty("n", i);
                producer.send(m);
            }
            equal(List.of("m0-red", "m2-red"), browse(session, queue, "color = 'red'"), "browsed red");
            equal(List.of("m2-red", "m3-green"), browse(session, queue, "n >= 2 AND color <> 'blue'"), "browsed n >= 2");
            equal(List.of("m1-blue", "m3-green"), browse(session, queue, "color IN ('blue', 'green')"), "browsed IN");
            MessageConsumer redConsumer = session.createConsumer(queue, "color = 'red'");
            equal(List.of("m0-red", "m2-red"), texts(redConsumer), "a queue consumer's selector");
            redConsumer.close();
            MessageConsumer greenConsumer = session.createConsumer(queue, "n > 2");
            equal(List.of("m3-green"), texts(greenConsumer), "another selector, after the first took its own");
            greenConsumer.close();
            equal(List.of("m1-blue"), texts(session.createConsumer(queue)), "what no selector took");

            Topic topic = session.createTopic("jms-selector-topic");
            MessageConsumer reds = session.createConsumer(topic, "color = 'red'");
            MessageProducer publisher = session.createProducer(topic);
            for (String color : colors) {
                TextMessage m = session.createTextMessage("t-" + color);
                m.setStringProperty("color", color);
                publisher.send(m);
            }
            equal(List.of("t-red", "t-red"), texts(reds), "the topic consumer's selector");
            reds.close();
        }
    }

    /** Temporary queues and topics: request and reply through them; they go with their connection. */
    private void temporary() throws Exception {
        try (Connection connection = connect()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            TemporaryQueue replies = session.createTemporaryQueue();
            check(replies.getQueueName().startsWith("jms-temp-"), "a temporary queue's name: " + replies.getQueueName());
            Queue requests = session.createQueue("jms-requests");
            TextMessage request = session.createTextMessage("ping");
            request.setJMSReplyTo(replies);
            session.createProducer(requests).send(request);
            Message got = session.createConsumer(requests).receive(WAIT_MS);
            check(got != null, "the request arrives");
            Queue replyTo = (Queue) got.getJMSReplyTo();
            equal(replies.getQueueName(), replyTo.getQueueName(), "reply-to names the temporary queue");
            session.createProducer(replyTo).send(session.createTextMessage("pong"));
            MessageConsumer replyConsumer = session.createConsumer(replies);
            equal(List.of("pong"), texts(replyConsumer), "the reply, through the temporary queue");
            replyConsumer.close();
            replies.delete();

            TemporaryTopic events = session.createTemporaryTopic();
            MessageConsumer listener = session.createConsumer(events);
            session.createProducer(events).send(session.createTextMessage("event"));
            equal(List.of("event"), texts(listener), "through the temporary topic");
            session.createTemporaryQueue();  // left for the connection's close to remove
        }
    }

    /** Session.unsubscribe deletes a durable subscription; one that does not exist is an error. */
    private void unsubscribe() throws Exception {
        try (Connection connection = new JmsConnectionFactory(keyName, key, uri).createConnection()) {
            connection.setClientID("jms-unsubscriber");
            connection.start();
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic topic = session.createTopic("jms-selector-topic");
            session.createDurableConsumer(topic, "to-be-removed").close();
            session.unsubscribe("to-be-removed");
            try {
                session.unsubscribe("to-be-removed");
                throw new AssertionError("unsubscribed twice");
            } catch (jakarta.jms.InvalidDestinationException gone) {
                check(true, "gone");
            }
        }
    }

    /** Making a topic consumer's subscription needs Manage: a key with Listen only is refused. */
    private void topicNeedsManage() throws Exception {
        try (Connection connection = connect()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            try {
                session.createConsumer(session.createTopic("jms-topic"));
                throw new AssertionError("a topic consumer was made without Manage");
            } catch (JMSException refused) {
                check(String.valueOf(refused.getMessage()).contains("Manage"), "refused for Manage: " + refused);
            }
        }
    }

    /** A wrong key is refused when the connection is made. */
    private void wrongKey() throws Exception {
        try (Connection connection = connect(keyName, key + "-wrong")) {
            throw new AssertionError("a wrong key connected");
        } catch (JMSSecurityException refused) {
            check(String.valueOf(refused.getMessage()).contains("auth"), "SASL auth outcome: " + refused);
        }
        try (Connection connection = connect("no-such-rule", key)) {
            throw new AssertionError("an unknown key name connected");
        } catch (JMSSecurityException refused) {
            check(true, "refused");
        }
        try (Connection connection = connect()) {  // and the right one works
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            session.createProducer(session.createQueue("jms-wrong-key")).send(session.createTextMessage("ok"));
        }
    }
}
