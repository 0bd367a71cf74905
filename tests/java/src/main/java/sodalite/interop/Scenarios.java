package sodalite.interop;

import com.azure.core.util.BinaryData;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClientBuilder;
import com.azure.messaging.servicebus.ServiceBusRuleManagerClient;
import com.azure.messaging.servicebus.administration.models.CorrelationRuleFilter;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import com.azure.messaging.servicebus.administration.models.CreateRuleOptions;
import com.azure.messaging.servicebus.administration.models.FalseRuleFilter;
import com.azure.messaging.servicebus.administration.models.QueueProperties;
import com.azure.messaging.servicebus.administration.models.QueueRuntimeProperties;
import com.azure.messaging.servicebus.administration.models.RuleProperties;
import com.azure.messaging.servicebus.administration.models.SqlRuleAction;
import com.azure.messaging.servicebus.administration.models.SqlRuleFilter;
import com.azure.messaging.servicebus.administration.models.SubscriptionProperties;
import com.azure.messaging.servicebus.administration.models.TopicProperties;
import com.azure.messaging.servicebus.administration.models.TrueRuleFilter;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.ServiceBusSessionReceiverClient;
import com.azure.messaging.servicebus.ServiceBusTransactionContext;
import com.azure.messaging.servicebus.models.AbandonOptions;
import com.azure.messaging.servicebus.models.CompleteOptions;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import com.azure.messaging.servicebus.models.ServiceBusReceiveMode;
import com.azure.messaging.servicebus.models.SubQueue;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * Service Bus scenarios written against the official Java SDK, one per run:
 * {@code java sodalite.interop.Scenarios <connection string> <scenario>}. A scenario checks what the
 * SDK returns and prints {@code PASS <scenario>}, or {@code FAIL <scenario>: <why>} and exits 1. Where it
 * leaves something in the broker, tests/interop/test_java_sdk.py checks it with the Python SDK.
 */
public final class Scenarios {
    private static final Duration WAIT = Duration.ofSeconds(10);

    private Scenarios() {
    }

    public static void main(String[] args) {
        String connection = args[0];
        String scenario = args[1];
        Map<String, Consumer<String>> scenarios = Map.ofEntries(
            Map.entry("messaging", Scenarios::messaging),
            Map.entry("transactions", Scenarios::transactions),
            Map.entry("sessions", Scenarios::sessions),
            Map.entry("schedule-defer-dead-letter", Scenarios::scheduleDeferDeadLetter),
            Map.entry("administration", Scenarios::administration),
            Map.entry("cross-entity-transactions", Scenarios::crossEntityTransactions),
            Map.entry("processor-and-topics", Scenarios::processorAndTopics),
            Map.entry("rule-manager", Scenarios::ruleManager),
            Map.entry("peek-by-sequence-number", Scenarios::peekBySequenceNumber),
            Map.entry("session-state", Scenarios::sessionState),
            Map.entry("administration-on-the-messaging-connection-string",
                Scenarios::administrationOnMessagingConnection));
        Consumer<String> run = scenarios.get(scenario);
        if (run == null) {
            System.out.println("FAIL " + scenario + ": no such scenario; known: " + scenarios.keySet());
            System.exit(2);
        }
        try {
            run.accept(connection);
        } catch (Throwable failure) {
            System.out.println("FAIL " + scenario + ": " + failure);
            failure.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
        System.out.println("PASS " + scenario);
        System.out.flush();
        System.exit(0);  // the SDK's reactor threads would otherwise keep the JVM alive a while
    }

    private static void check(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    private static <T> void equal(T expected, T actual, String what) {
        check(expected == null ? actual == null : expected.equals(actual),
            what + ": expected " + expected + ", got " + actual);
    }

    private static boolean pause(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
            return false;
        }
        return true;
    }

    private static List<ServiceBusReceivedMessage> receive(ServiceBusReceiverClient receiver, int count) {
        List<ServiceBusReceivedMessage> got = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT.toNanos() * 3;
        while (got.size() < count && System.nanoTime() < deadline) {
            receiver.receiveMessages(count - got.size(), WAIT).forEach(got::add);
        }
        return got;
    }

    /** Send with properties, peek, receive in PeekLock, renew, abandon, complete; ReceiveAndDelete. */
    private static void messaging(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
        try (ServiceBusSenderClient sender = builder.sender().queueName("java-msg").buildClient();
             ServiceBusReceiverClient receiver = builder.receiver().queueName("java-msg").buildClient()) {
            ServiceBusMessage message = new ServiceBusMessage(BinaryData.fromString("hello from java"))
                .setMessageId("java-1").setSubject("greeting").setCorrelationId("corr-1")
                .setContentType("text/plain").setTimeToLive(Duration.ofMinutes(5));
            message.getApplicationProperties().put("origin", "java");
            message.getApplicationProperties().put("count", 7L);
            sender.sendMessage(message);
            sender.sendMessages(List.of(new ServiceBusMessage("batch 1").setMessageId("java-2"),
                new ServiceBusMessage("batch 2").setMessageId("java-3")));

            List<ServiceBusReceivedMessage> peeked = new ArrayList<>();
            receiver.peekMessages(10).forEach(peeked::add);
            equal(3, peeked.size(), "peeked");
            equal(1L, peeked.get(0).getSequenceNumber(), "first sequence number");

            List<ServiceBusReceivedMessage> got = receive(receiver, 3);
            equal(3, got.size(), "received");
            ServiceBusReceivedMessage first = got.get(0);
            equal("java-1", first.getMessageId(), "message id");
            equal("hello from java", first.getBody().toString(), "body");
            equal("greeting", first.getSubject(), "subject");
            equal("corr-1", first.getCorrelationId(), "correlation id");
            equal("text/plain", first.getContentType(), "content type");
            equal("java", first.getApplicationProperties().get("origin"), "application property origin");
            equal(7L, first.getApplicationProperties().get("count"), "application property count");
            equal(0L, first.getDeliveryCount(), "delivery count (the wire's, 0 on a first delivery)");
            check(first.getLockToken() != null && !first.getLockToken().isEmpty(), "a lock token");
            OffsetDateTime lockedUntil = first.getLockedUntil();
            OffsetDateTime renewed = receiver.renewMessageLock(first);
            check(!renewed.isBefore(lockedUntil), "renewal moves the lock on: " + lockedUntil + " -> " + renewed);

            receiver.abandon(first, new AbandonOptions().setPropertiesToModify(Map.of("abandoned", "yes")));
            receiver.complete(got.get(1));
            receiver.complete(got.get(2));
            List<ServiceBusReceivedMessage> again = receive(receiver, 1);
            equal(1, again.size(), "the abandoned message comes back");
            equal("java-1", again.get(0).getMessageId(), "abandoned message id");
            equal(1L, again.get(0).getDeliveryCount(), "delivery count after abandon");
            equal("yes", again.get(0).getApplicationProperties().get("abandoned"), "property set by abandon");
            receiver.complete(again.get(0));
        }
        try (ServiceBusSenderClient sender = builder.sender().queueName("java-msg").buildClient();
             ServiceBusReceiverClient receiver = builder.receiver().queueName("java-msg")
                 .receiveMode(ServiceBusReceiveMode.RECEIVE_AND_DELETE).buildClient()) {
            sender.sendMessage(new ServiceBusMessage("gone once read").setMessageId("java-rad"));
            List<ServiceBusReceivedMessage> got = receive(receiver, 1);
            equal(1, got.size(), "received and deleted");
            equal("java-rad", got.get(0).getMessageId(), "message id");
            List<ServiceBusReceivedMessage> peeked = new ArrayList<>();
            receiver.peekMessages(10).forEach(peeked::add);
            equal(0, peeked.size(), "nothing left after ReceiveAndDelete");
        }
    }

    /**
     * Transactions (the Python SDK has none): a send rolled back is never seen, a send committed is; a
     * complete rolled back leaves the message with the broker (the SDK will not settle that delivery
     * again: it comes back when its lock lapses, java-tx locks for 5 s); a complete and a send in one
     * transaction. Leaves two messages in java-tx-out for the Python side to find.
     */
    private static void transactions(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
        try (ServiceBusSenderClient sender = builder.sender().queueName("java-tx").buildClient();
             ServiceBusReceiverClient receiver = builder.receiver().queueName("java-tx").buildClient()) {
            ServiceBusTransactionContext rolledBack = sender.createTransaction();
            sender.sendMessage(new ServiceBusMessage("never").setMessageId("tx-rolled-back"), rolledBack);
            sender.rollbackTransaction(rolledBack);
            ServiceBusTransactionContext committed = sender.createTransaction();
            sender.sendMessage(new ServiceBusMessage("in").setMessageId("tx-in"), committed);
            sender.commitTransaction(committed);

            List<ServiceBusReceivedMessage> got = receive(receiver, 1);
            equal(1, got.size(), "the committed send arrives");
            equal("tx-in", got.get(0).getMessageId(), "message id");
            List<ServiceBusReceivedMessage> more = new ArrayList<>();
            receiver.receiveMessages(1, Duration.ofSeconds(2)).forEach(more::add);
            equal(0, more.size(), "the rolled-back send never arrives");

            ServiceBusTransactionContext undo = receiver.createTransaction();
            receiver.complete(got.get(0), new CompleteOptions().setTransactionContext(undo));
            receiver.rollbackTransaction(undo);
            List<ServiceBusReceivedMessage> peeked = new ArrayList<>();
            receiver.peekMessages(10).forEach(peeked::add);
            equal(1, peeked.size(), "a rolled-back complete leaves the message");

            List<ServiceBusReceivedMessage> again = receive(receiver, 1);
            equal(1, again.size(), "the message comes back once its lock lapses");
            equal("tx-in", again.get(0).getMessageId(), "message id");
            equal(1L, again.get(0).getDeliveryCount(), "delivery count after the lapsed lock");

            ServiceBusTransactionContext forward = receiver.createTransaction();
            receiver.complete(again.get(0), new CompleteOptions().setTransactionContext(forward));
            sender.sendMessage(new ServiceBusMessage("out").setMessageId("tx-forwarded"), forward);
            receiver.commitTransaction(forward);
            List<ServiceBusReceivedMessage> forwarded = receive(receiver, 1);
            equal(1, forwarded.size(), "the send of the committed transaction");
            equal("tx-forwarded", forwarded.get(0).getMessageId(), "forwarded message id");
            receiver.complete(forwarded.get(0));
            peeked.clear();
            receiver.peekMessages(10).forEach(peeked::add);
            equal(0, peeked.size(), "nothing left: the completes committed");
        }
        try (ServiceBusSenderClient out = builder.sender().queueName("java-tx-out").buildClient()) {
            ServiceBusTransactionContext committed = out.createTransaction();
            out.sendMessage(new ServiceBusMessage("for python").setMessageId("java-tx-1"), committed);
            out.sendMessage(new ServiceBusMessage("for python too").setMessageId("java-tx-2"), committed);
            ServiceBusTransactionContext rolledBack = out.createTransaction();
            out.sendMessage(new ServiceBusMessage("never").setMessageId("java-tx-never"), rolledBack);
            out.commitTransaction(committed);
            out.rollbackTransaction(rolledBack);
        }
    }

    /** Sessions: the next session, its messages in order, its state set and read back. */
    private static void sessions(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
        try (ServiceBusSenderClient sender = builder.sender().queueName("java-sessions").buildClient()) {
            for (int i = 0; i < 3; i++) {
                sender.sendMessage(new ServiceBusMessage("a" + i).setSessionId("java-a").setMessageId("a" + i));
            }
            sender.sendMessage(new ServiceBusMessage("b0").setSessionId("java-b").setMessageId("b0"));
        }
        ServiceBusSessionReceiverClient sessions = builder.sessionReceiver().queueName("java-sessions").buildClient();
        try (ServiceBusReceiverClient a = sessions.acceptSession("java-a")) {
            equal("java-a", a.getSessionId(), "session id");
            List<ServiceBusReceivedMessage> got = receive(a, 3);
            equal(3, got.size(), "the session's messages");
            for (int i = 0; i < 3; i++) {
                equal("a" + i, got.get(i).getMessageId(), "order in the session");
                equal("java-a", got.get(i).getSessionId(), "message's session id");
                a.complete(got.get(i));
            }
            a.setSessionState("step-3".getBytes(StandardCharsets.UTF_8));
            equal("step-3", new String(a.getSessionState(), StandardCharsets.UTF_8), "session state");
            OffsetDateTime renewed = a.renewSessionLock();
            check(renewed.isAfter(OffsetDateTime.now()), "renewed session lock in the future: " + renewed);
        }
        try (ServiceBusReceiverClient next = sessions.acceptNextSession()) {
            equal("java-b", next.getSessionId(), "the next session with messages");
            List<ServiceBusReceivedMessage> got = receive(next, 1);
            equal(1, got.size(), "session b's message");
            equal("b0", got.get(0).getMessageId(), "message id");
            next.complete(got.get(0));
        } finally {
            sessions.close();
        }
    }

    /** Schedule and cancel, defer and receive by sequence number, dead-letter and read the DLQ. */
    private static void scheduleDeferDeadLetter(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
        try (ServiceBusSenderClient sender = builder.sender().queueName("java-states").buildClient();
             ServiceBusReceiverClient receiver = builder.receiver().queueName("java-states").buildClient();
             ServiceBusReceiverClient deadLetters = builder.receiver().queueName("java-states")
                 .subQueue(SubQueue.DEAD_LETTER_QUEUE).buildClient()) {
            long cancelled = sender.scheduleMessage(new ServiceBusMessage("later").setMessageId("sched-cancelled"),
                OffsetDateTime.now().plusHours(1));
            sender.scheduleMessage(new ServiceBusMessage("soon").setMessageId("sched-soon"),
                OffsetDateTime.now().plusSeconds(2));
            long kept = sender.scheduleMessage(new ServiceBusMessage("kept").setMessageId("sched-kept"),
                OffsetDateTime.now().plusHours(1));
            sender.cancelScheduledMessage(cancelled);
            List<ServiceBusReceivedMessage> peeked = new ArrayList<>();
            receiver.peekMessages(10).forEach(peeked::add);
            check(peeked.stream().noneMatch(m -> m.getSequenceNumber() == cancelled), "the cancelled one is gone");
            check(peeked.stream().anyMatch(m -> m.getSequenceNumber() == kept), "the other scheduled one is peeked");

            List<ServiceBusReceivedMessage> soon = receive(receiver, 1);
            equal(1, soon.size(), "the scheduled message arrives when due");
            equal("sched-soon", soon.get(0).getMessageId(), "message id");
            long deferred = soon.get(0).getSequenceNumber();
            receiver.defer(soon.get(0));
            ServiceBusReceivedMessage back = receiver.receiveDeferredMessage(deferred);
            equal("sched-soon", back.getMessageId(), "deferred message by its sequence number");
            receiver.deadLetter(back, new DeadLetterOptions().setDeadLetterReason("java-reason")
                .setDeadLetterErrorDescription("java-description").setPropertiesToModify(Map.of("stage", "parsing")));

            List<ServiceBusReceivedMessage> dead = receive(deadLetters, 1);
            equal(1, dead.size(), "the dead-lettered message");
            equal("sched-soon", dead.get(0).getMessageId(), "dead-lettered message id");
            equal("java-reason", dead.get(0).getDeadLetterReason(), "dead-letter reason");
            equal("java-description", dead.get(0).getDeadLetterErrorDescription(), "dead-letter description");
            equal("parsing", dead.get(0).getApplicationProperties().get("stage"), "property set by dead-letter");
            deadLetters.complete(dead.get(0));
        }
    }

    /**
     * The administration client for this broker. The SDK always dials https on port 443; with
     * {@code -Dsodalite.admin.endpoint=<scheme://host:port>} a pipeline policy sends each request there.
     */
    private static ServiceBusAdministrationClient administrationClient(String connection) {
        ServiceBusAdministrationClientBuilder builder = new ServiceBusAdministrationClientBuilder()
            .connectionString(connection);
        String endpoint = System.getProperty("sodalite.admin.endpoint");
        if (endpoint != null) {
            URI target = URI.create(endpoint);
            builder.addPolicy((context, next) -> {
                URI asked = URI.create(context.getHttpRequest().getUrl().toString());
                context.getHttpRequest().setUrl(target.getScheme() + "://" + target.getAuthority()
                    + asked.getRawPath() + (asked.getRawQuery() == null ? "" : "?" + asked.getRawQuery()));
                return next.process();
            });
        }
        return builder.buildClient();
    }

    /** The administration client: a queue created, read, listed and deleted. */
    private static void administration(String connection) {
        ServiceBusAdministrationClient admin = administrationClient(connection);
        QueueProperties made = admin.createQueue("java-made", new CreateQueueOptions()
            .setMaxDeliveryCount(4).setLockDuration(Duration.ofSeconds(20)));
        equal("java-made", made.getName(), "created queue's name");
        QueueProperties read = admin.getQueue("java-made");
        equal(4, read.getMaxDeliveryCount(), "max delivery count");
        equal(Duration.ofSeconds(20), read.getLockDuration(), "lock duration");
        List<String> names = new ArrayList<>();
        admin.listQueues().forEach(q -> names.add(q.getName()));
        check(names.contains("java-made") && names.contains("java-msg"), "listed: " + names);
        check(admin.getQueueExists("java-made"), "exists");
        admin.deleteQueue("java-made");
        check(!admin.getQueueExists("java-made"), "deleted");
    }

    /**
     * Cross-entity transactions (send-via): with {@code enableCrossEntityTransactions} every link goes
     * through the first entity the client touches; a message received from java-via-in is completed and
     * copies sent to java-via-out and java-via-out-2 in one transaction. A rolled-back one changes nothing.
     */
    private static void crossEntityTransactions(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection)
            .enableCrossEntityTransactions();
        try (ServiceBusReceiverClient receiver = builder.receiver().queueName("java-via-in").buildClient();
             ServiceBusSenderClient in = builder.sender().queueName("java-via-in").buildClient();
             ServiceBusSenderClient out = builder.sender().queueName("java-via-out").buildClient();
             ServiceBusSenderClient out2 = builder.sender().queueName("java-via-out-2").buildClient()) {
            in.sendMessages(List.of(new ServiceBusMessage("one").setMessageId("via-1"),
                new ServiceBusMessage("two").setMessageId("via-2")));
            List<ServiceBusReceivedMessage> got = receive(receiver, 2);
            equal(2, got.size(), "received");

            ServiceBusTransactionContext undo = receiver.createTransaction();
            receiver.complete(got.get(0), new CompleteOptions().setTransactionContext(undo));
            out.sendMessage(new ServiceBusMessage("never").setMessageId("via-never"), undo);
            receiver.rollbackTransaction(undo);

            ServiceBusTransactionContext forward = receiver.createTransaction();
            receiver.complete(got.get(1), new CompleteOptions().setTransactionContext(forward));
            out.sendMessage(new ServiceBusMessage("forwarded").setMessageId("via-forwarded"), forward);
            out2.sendMessage(new ServiceBusMessage("forwarded too").setMessageId("via-forwarded-2"), forward);
            receiver.commitTransaction(forward);
        }
    }

    /**
     * The processor client (how most Java consumers receive): 20 messages handled concurrently and
     * completed by the processor; one handler failure abandons its message, which comes back. Then a
     * topic: a SQL rule created through the administration client on one subscription filters what it
     * gets, the other subscription gets everything. Needs -Dsodalite.admin.endpoint (see administration).
     */
    private static void processorAndTopics(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
        try (ServiceBusSenderClient sender = builder.sender().queueName("java-processed").buildClient()) {
            List<ServiceBusMessage> batch = new ArrayList<>();
            for (int i = 0; i < 20; i++) {
                batch.add(new ServiceBusMessage("work " + i).setMessageId("work-" + i));
            }
            sender.sendMessages(batch);
        }
        Set<String> done = ConcurrentHashMap.newKeySet();
        Set<String> failedOnce = ConcurrentHashMap.newKeySet();
        List<Throwable> errors = new ArrayList<>();
        CountDownLatch all = new CountDownLatch(20);
        ServiceBusProcessorClient processor = builder.processor().queueName("java-processed").maxConcurrentCalls(4)
            .processMessage(context -> {
                String id = context.getMessage().getMessageId();
                if (id.equals("work-7") && failedOnce.add(id)) {
                    throw new IllegalStateException("the handler fails work-7 once");
                }
                if (done.add(id)) {
                    all.countDown();
                }
            })
            .processError(context -> {
                if (!(context.getException().getCause() instanceof IllegalStateException)
                        && !(context.getException() instanceof IllegalStateException)) {
                    synchronized (errors) {
                        errors.add(context.getException());
                    }
                }
            })
            .buildProcessorClient();
        processor.start();
        try (ServiceBusReceiverClient receiver = builder.receiver().queueName("java-processed").buildClient()) {
            check(all.await(60, TimeUnit.SECONDS), "the processor handled " + done.size() + " of 20");
            // The processor completes a message after its handler returns: wait for the last completes
            // (peek sees locked messages too) before closing it, which would leave one in flight locked.
            List<ServiceBusReceivedMessage> left = new ArrayList<>();
            long deadline = System.nanoTime() + WAIT.toNanos() * 3;
            do {
                left.clear();
                receiver.peekMessages(30).forEach(left::add);
            } while (!left.isEmpty() && System.nanoTime() < deadline && pause(200));
            equal(0, left.size(), "the processor completed every message");
        } catch (InterruptedException interrupted) {
            throw new AssertionError("interrupted", interrupted);
        } finally {
            processor.close();
        }
        check(failedOnce.contains("work-7"), "the failing handler ran");
        check(errors.isEmpty(), "processor errors: " + errors);

        ServiceBusAdministrationClient admin = administrationClient(connection);
        admin.deleteRule("java-topic", "java-red", "$Default");
        admin.createRule("java-topic", "red-only", "java-red",  // topic, rule, subscription
            new CreateRuleOptions(new SqlRuleFilter("color = 'red' AND size > 2")));
        try (ServiceBusSenderClient topic = builder.sender().topicName("java-topic").buildClient()) {
            ServiceBusMessage red = new ServiceBusMessage("big red").setMessageId("red-big");
            red.getApplicationProperties().put("color", "red");
            red.getApplicationProperties().put("size", 5);
            ServiceBusMessage small = new ServiceBusMessage("small red").setMessageId("red-small");
            small.getApplicationProperties().put("color", "red");
            small.getApplicationProperties().put("size", 1);
            ServiceBusMessage blue = new ServiceBusMessage("blue").setMessageId("blue");
            blue.getApplicationProperties().put("color", "blue");
            blue.getApplicationProperties().put("size", 9);
            topic.sendMessages(List.of(red, small, blue));
        }
        try (ServiceBusReceiverClient reds = builder.receiver().topicName("java-topic").subscriptionName("java-red")
                 .buildClient();
             ServiceBusReceiverClient everything = builder.receiver().topicName("java-topic")
                 .subscriptionName("java-all").buildClient()) {
            List<ServiceBusReceivedMessage> red = receive(reds, 1);
            equal(1, red.size(), "the filtered subscription's messages");
            equal("red-big", red.get(0).getMessageId(), "the one the rule lets through");
            reds.complete(red.get(0));
            List<ServiceBusReceivedMessage> more = new ArrayList<>();
            reds.receiveMessages(5, Duration.ofSeconds(2)).forEach(more::add);
            equal(0, more.size(), "nothing else passes the rule");
            List<ServiceBusReceivedMessage> all3 = receive(everything, 3);
            equal(3, all3.size(), "the unfiltered subscription gets all three");
            for (ServiceBusReceivedMessage message : all3) {
                everything.complete(message);
            }
        }
    }

    private static Map<String, RuleProperties> rules(ServiceBusRuleManagerClient manager) {
        Map<String, RuleProperties> found = new HashMap<>();
        manager.listRules().forEach(rule -> found.put(rule.getName(), rule));
        return found;
    }

    /**
     * The rule manager (enumerate-rules, add-rule, remove-rule over $management): the default rule is
     * listed with its true filter; SQL rules with and without an action, a correlation rule and a false
     * filter are created and listed back as sent; deleting one leaves the others. The subscription then
     * filters by what is left.
     */
    private static void ruleManager(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
        try (ServiceBusRuleManagerClient manager = builder.ruleManager().topicName("java-rules")
                 .subscriptionName("java-rules-sub").buildClient()) {
            Map<String, RuleProperties> listed = rules(manager);
            // "never" (a FalseFilter) was made through the administration API by the test before this ran.
            equal(Set.of("$Default", "never"), listed.keySet(), "the subscription's rules");
            check(listed.get("$Default").getFilter() instanceof TrueRuleFilter,
                "the default rule's filter: " + listed.get("$Default").getFilter());
            // The SDK decodes the empty rule action's code as no action.
            equal(null, listed.get("$Default").getAction(), "the default rule's action");

            manager.createRule("red", new CreateRuleOptions(new SqlRuleFilter("color = 'red'"))
                .setAction(new SqlRuleAction("SET seen = 'yes'")));
            manager.createRule("big", new CreateRuleOptions(new SqlRuleFilter("size > 10")));
            CorrelationRuleFilter correlation = new CorrelationRuleFilter().setCorrelationId("order-1")
                .setLabel("created");
            correlation.getProperties().put("region", "eu");
            manager.createRule("orders", new CreateRuleOptions(correlation));
            manager.deleteRule("$Default");

            listed = rules(manager);
            equal(Set.of("red", "big", "orders", "never"), listed.keySet(), "rules after creating and deleting");
            RuleProperties red = listed.get("red");
            check(red.getFilter() instanceof SqlRuleFilter, "red's filter: " + red.getFilter());
            equal("color = 'red'", ((SqlRuleFilter) red.getFilter()).getSqlExpression(), "red's expression");
            check(red.getAction() instanceof SqlRuleAction, "red's action: " + red.getAction());
            equal("SET seen = 'yes'", ((SqlRuleAction) red.getAction()).getSqlExpression(), "red's action expression");
            equal(null, listed.get("big").getAction(), "big's action (empty)");
            check(listed.get("orders").getFilter() instanceof CorrelationRuleFilter,
                "orders' filter: " + listed.get("orders").getFilter());
            CorrelationRuleFilter orders = (CorrelationRuleFilter) listed.get("orders").getFilter();
            equal("order-1", orders.getCorrelationId(), "correlation id");
            equal("created", orders.getLabel(), "subject");
            equal("eu", orders.getProperties().get("region"), "correlation property");
            check(listed.get("never").getFilter() instanceof FalseRuleFilter,
                "never's filter: " + listed.get("never").getFilter());
            manager.deleteRule("never");
            equal(Set.of("red", "big", "orders"), rules(manager).keySet(), "rules after deleting one more");
        }
        try (ServiceBusSenderClient topic = builder.sender().topicName("java-rules").buildClient()) {
            ServiceBusMessage red = new ServiceBusMessage("red").setMessageId("rule-red");
            red.getApplicationProperties().put("color", "red");
            ServiceBusMessage blue = new ServiceBusMessage("blue").setMessageId("rule-blue");
            blue.getApplicationProperties().put("color", "blue");
            blue.getApplicationProperties().put("size", 1);
            topic.sendMessages(List.of(red, blue));
        }
        try (ServiceBusReceiverClient receiver = builder.receiver().topicName("java-rules")
                 .subscriptionName("java-rules-sub").buildClient()) {
            List<ServiceBusReceivedMessage> got = receive(receiver, 1);
            equal(1, got.size(), "what the rules let through");
            equal("rule-red", got.get(0).getMessageId(), "the red message");
            equal("yes", got.get(0).getApplicationProperties().get("seen"), "the action's property");
            receiver.complete(got.get(0));
            List<ServiceBusReceivedMessage> more = new ArrayList<>();
            receiver.receiveMessages(5, Duration.ofSeconds(2)).forEach(more::add);
            equal(0, more.size(), "the blue one matches no rule");
        }
    }

    /** Peek one message by its sequence number, and a page from a sequence number on. */
    private static void peekBySequenceNumber(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
        try (ServiceBusSenderClient sender = builder.sender().queueName("java-peek").buildClient();
             ServiceBusReceiverClient receiver = builder.receiver().queueName("java-peek").buildClient()) {
            List<ServiceBusMessage> batch = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                batch.add(new ServiceBusMessage("peek " + i).setMessageId("peek-" + i));
            }
            sender.sendMessages(batch);
            List<ServiceBusReceivedMessage> all = new ArrayList<>();
            receiver.peekMessages(10).forEach(all::add);
            equal(5, all.size(), "peeked");
            long third = all.get(2).getSequenceNumber();
            ServiceBusReceivedMessage one = receiver.peekMessage(third);
            equal("peek-2", one.getMessageId(), "peeked by its sequence number");
            equal(third, one.getSequenceNumber(), "its sequence number");
            List<ServiceBusReceivedMessage> page = new ArrayList<>();
            receiver.peekMessages(2, third).forEach(page::add);
            equal(2, page.size(), "a page from a sequence number");
            equal("peek-2", page.get(0).getMessageId(), "the page's first");
            equal("peek-3", page.get(1).getMessageId(), "the page's second");
            page.clear();
            receiver.peekMessages(10, all.get(4).getSequenceNumber() + 1).forEach(page::add);
            equal(0, page.size(), "nothing after the last");
            List<ServiceBusReceivedMessage> got = receive(receiver, 5);
            equal(5, got.size(), "received");
            got.forEach(receiver::complete);
        }
    }

    /** Session state: set, read, cleared by null and by a zero-length array (read back as null). */
    private static void sessionState(String connection) {
        ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
        ServiceBusSessionReceiverClient sessions = builder.sessionReceiver().queueName("java-sessions").buildClient();
        try (ServiceBusReceiverClient session = sessions.acceptSession("java-state")) {
            equal(null, session.getSessionState(), "a new session's state");
            session.setSessionState("one".getBytes(StandardCharsets.UTF_8));
            equal("one", new String(session.getSessionState(), StandardCharsets.UTF_8), "the state set");
            session.setSessionState(null);
            equal(null, session.getSessionState(), "the state after setting null");
            session.setSessionState("two".getBytes(StandardCharsets.UTF_8));
            session.setSessionState(new byte[0]);
            equal(null, session.getSessionState(), "the state after setting a zero-length array");
        } finally {
            sessions.close();
        }
    }

    /**
     * The administration client built from the messaging connection string (the one the SDK's
     * messaging clients use), with the pipeline policy of {@link #administrationClient}: a queue's
     * properties and runtime properties as Service Bus gives them, a topic, a subscription and a rule.
     */
    private static void administrationOnMessagingConnection(String connection) {
        ServiceBusAdministrationClient admin = administrationClient(connection);
        QueueProperties queue = admin.getQueue("java-msg");
        equal("java-msg", queue.getName(), "queue name");
        equal(1024L, queue.getMaxSizeInMegabytes(), "max size");
        equal(256L, queue.getMaxMessageSizeInKilobytes(), "max message size on a Standard namespace");
        QueueRuntimeProperties runtime = admin.getQueueRuntimeProperties("java-peek");
        check(runtime.getCreatedAt() != null, "created at");
        TopicProperties topic = admin.createTopic("java-made-topic");
        equal("java-made-topic", topic.getName(), "created topic");
        SubscriptionProperties subscription = admin.createSubscription("java-made-topic", "java-made-sub");
        equal("java-made-sub", subscription.getSubscriptionName(), "created subscription");
        admin.createRule("java-made-topic", "only-red", "java-made-sub",
            new CreateRuleOptions(new SqlRuleFilter("color = 'red'")));
        List<String> names = new ArrayList<>();
        admin.listRules("java-made-topic", "java-made-sub").forEach(rule -> names.add(rule.getName()));
        names.sort(null);
        equal(List.of("$Default", "only-red"), names, "rules listed");
        admin.deleteTopic("java-made-topic");
        check(!admin.getTopicExists("java-made-topic"), "the topic is gone");
    }
}
