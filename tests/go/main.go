// Service Bus scenarios written against the official Go SDK (azservicebus), one per run:
// `sodalite-go-interop <connection string> <scenario>`. A scenario checks what the SDK returns and
// prints "PASS <scenario>", or "FAIL <scenario>: <why>" and exits 1. Where it leaves something in the
// broker, tests/interop/test_go_sdk.py checks it with the Python SDK.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

type failure string

func check(ok bool, format string, args ...any) {
	if !ok {
		panic(failure(fmt.Sprintf(format, args...)))
	}
}

func must[T any](value T, err error) T {
	if err != nil {
		panic(failure(err.Error()))
	}
	return value
}

func no(err error) {
	if err != nil {
		panic(failure(err.Error()))
	}
}

func ptr[T any](value T) *T { return &value }

func receive(ctx context.Context, receive func(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error), count int) []*azservicebus.ReceivedMessage {
	var got []*azservicebus.ReceivedMessage
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < count && time.Now().Before(deadline) {
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		batch, err := receive(wait, count-len(got), nil)
		cancel()
		if err != nil && wait.Err() == nil {
			panic(failure(err.Error()))
		}
		got = append(got, batch...)
	}
	return got
}

// messaging: send with properties and in a batch, peek, PeekLock receive, renew, abandon with
// properties to modify, complete; ReceiveAndDelete.
func messaging(ctx context.Context, client *azservicebus.Client) {
	sender := must(client.NewSender("go-msg", nil))
	defer sender.Close(ctx)
	no(sender.SendMessage(ctx, &azservicebus.Message{
		Body: []byte("hello from go"), MessageID: ptr("go-1"), Subject: ptr("greeting"),
		CorrelationID: ptr("corr-1"), ContentType: ptr("text/plain"), TimeToLive: ptr(5 * time.Minute),
		ApplicationProperties: map[string]any{"origin": "go", "count": int64(7)},
	}, nil))
	batch := must(sender.NewMessageBatch(ctx, nil))
	no(batch.AddMessage(&azservicebus.Message{Body: []byte("batch 1"), MessageID: ptr("go-2")}, nil))
	no(batch.AddMessage(&azservicebus.Message{Body: []byte("batch 2"), MessageID: ptr("go-3")}, nil))
	no(sender.SendMessageBatch(ctx, batch, nil))

	receiver := must(client.NewReceiverForQueue("go-msg", nil))
	defer receiver.Close(ctx)
	peeked := must(receiver.PeekMessages(ctx, 10, nil))
	check(len(peeked) == 3, "peeked %d, want 3", len(peeked))
	check(*peeked[0].SequenceNumber == 1, "first sequence number %d", *peeked[0].SequenceNumber)

	got := receive(ctx, receiver.ReceiveMessages, 3)
	check(len(got) == 3, "received %d, want 3", len(got))
	first := got[0]
	check(first.MessageID == "go-1", "message id %q", first.MessageID)
	check(string(first.Body) == "hello from go", "body %q", first.Body)
	check(*first.Subject == "greeting" && *first.CorrelationID == "corr-1" && *first.ContentType == "text/plain",
		"subject, correlation id, content type: %v %v %v", *first.Subject, *first.CorrelationID, *first.ContentType)
	check(first.ApplicationProperties["origin"] == "go", "origin %v", first.ApplicationProperties["origin"])
	check(first.ApplicationProperties["count"] == int64(7), "count %#v", first.ApplicationProperties["count"])
	check(first.DeliveryCount == 1, "delivery count %d (Go adds 1 to the wire's 0)", first.DeliveryCount)
	lockedUntil := *first.LockedUntil
	no(receiver.RenewMessageLock(ctx, first, nil))
	check(!first.LockedUntil.Before(lockedUntil), "renewal moves the lock on: %v -> %v", lockedUntil, *first.LockedUntil)

	no(receiver.AbandonMessage(ctx, first, &azservicebus.AbandonMessageOptions{
		PropertiesToModify: map[string]any{"abandoned": "yes"}}))
	no(receiver.CompleteMessage(ctx, got[1], nil))
	no(receiver.CompleteMessage(ctx, got[2], nil))
	again := receive(ctx, receiver.ReceiveMessages, 1)
	check(len(again) == 1 && again[0].MessageID == "go-1", "the abandoned message comes back")
	check(again[0].DeliveryCount == 2, "delivery count after abandon %d", again[0].DeliveryCount)
	check(again[0].ApplicationProperties["abandoned"] == "yes", "property set by abandon: %v",
		again[0].ApplicationProperties["abandoned"])
	no(receiver.CompleteMessage(ctx, again[0], nil))

	no(sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("gone once read"), MessageID: ptr("go-rad")}, nil))
	rad := must(client.NewReceiverForQueue("go-msg", &azservicebus.ReceiverOptions{
		ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}))
	defer rad.Close(ctx)
	taken := receive(ctx, rad.ReceiveMessages, 1)
	check(len(taken) == 1 && taken[0].MessageID == "go-rad", "received and deleted")
	left := must(receiver.PeekMessages(ctx, 10, nil))
	check(len(left) == 0, "nothing left after ReceiveAndDelete: %d", len(left))
}

// sessions: a named session (not the one next available) with its messages in order and its state,
// then the next session.
func sessions(ctx context.Context, client *azservicebus.Client) {
	sender := must(client.NewSender("go-sessions", nil))
	defer sender.Close(ctx)
	// go-b's message goes first, so the next available session would be go-b: asking for go-a by
	// name must get go-a (Go sends the name as a described filter value).
	no(sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("b0"), MessageID: ptr("b0"), SessionID: ptr("go-b")}, nil))
	for i := 0; i < 3; i++ {
		no(sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint("a", i)),
			MessageID: ptr(fmt.Sprint("a", i)), SessionID: ptr("go-a")}, nil))
	}

	a := must(client.AcceptSessionForQueue(ctx, "go-sessions", "go-a", nil))
	check(a.SessionID() == "go-a", "session id %q", a.SessionID())
	got := receive(ctx, a.ReceiveMessages, 3)
	check(len(got) == 3, "the session's messages: %d", len(got))
	for i, message := range got {
		check(message.MessageID == fmt.Sprint("a", i), "order in the session: %q at %d", message.MessageID, i)
		check(*message.SessionID == "go-a", "message's session id %q", *message.SessionID)
		no(a.CompleteMessage(ctx, message, nil))
	}
	no(a.SetSessionState(ctx, []byte("step-3"), nil))
	state := must(a.GetSessionState(ctx, nil))
	check(string(state) == "step-3", "session state %q", state)
	no(a.RenewSessionLock(ctx, nil))
	check(a.LockedUntil().After(time.Now()), "renewed session lock in the future: %v", a.LockedUntil())
	no(a.Close(ctx))

	next := must(client.AcceptNextSessionForQueue(ctx, "go-sessions", nil))
	defer next.Close(ctx)
	check(next.SessionID() == "go-b", "the next session with messages: %q", next.SessionID())
	b := receive(ctx, next.ReceiveMessages, 1)
	check(len(b) == 1 && b[0].MessageID == "b0", "session b's message")
	no(next.CompleteMessage(ctx, b[0], nil))
}

// scheduleDeferDeadLetter: schedule and cancel, defer and receive by sequence number, dead-letter
// and read the dead-letter queue. Leaves "sched-kept" scheduled.
func scheduleDeferDeadLetter(ctx context.Context, client *azservicebus.Client) {
	sender := must(client.NewSender("go-states", nil))
	defer sender.Close(ctx)
	later := time.Now().Add(time.Hour)
	numbers := must(sender.ScheduleMessages(ctx, []*azservicebus.Message{
		{Body: []byte("later"), MessageID: ptr("sched-cancelled")},
		{Body: []byte("kept"), MessageID: ptr("sched-kept")}}, later, nil))
	check(len(numbers) == 2, "two sequence numbers: %v", numbers)
	must(sender.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("soon"), MessageID: ptr("sched-soon")}},
		time.Now().Add(2*time.Second), nil))
	no(sender.CancelScheduledMessages(ctx, numbers[:1], nil))

	receiver := must(client.NewReceiverForQueue("go-states", nil))
	defer receiver.Close(ctx)
	peeked := must(receiver.PeekMessages(ctx, 10, nil))
	var ids []string
	for _, message := range peeked {
		ids = append(ids, message.MessageID)
	}
	sort.Strings(ids)
	check(fmt.Sprint(ids) == "[sched-kept sched-soon]", "peeked %v", ids)

	soon := receive(ctx, receiver.ReceiveMessages, 1)
	check(len(soon) == 1 && soon[0].MessageID == "sched-soon", "the scheduled message arrives when due")
	deferred := *soon[0].SequenceNumber
	no(receiver.DeferMessage(ctx, soon[0], nil))
	back := must(receiver.ReceiveDeferredMessages(ctx, []int64{deferred}, nil))
	check(len(back) == 1 && back[0].MessageID == "sched-soon", "deferred message by its sequence number")
	no(receiver.DeadLetterMessage(ctx, back[0], &azservicebus.DeadLetterOptions{
		Reason: ptr("go-reason"), ErrorDescription: ptr("go-description"),
		PropertiesToModify: map[string]any{"stage": "parsing"}}))

	deadLetters := must(client.NewReceiverForQueue("go-states", &azservicebus.ReceiverOptions{
		SubQueue: azservicebus.SubQueueDeadLetter}))
	defer deadLetters.Close(ctx)
	dead := receive(ctx, deadLetters.ReceiveMessages, 1)
	check(len(dead) == 1 && dead[0].MessageID == "sched-soon", "the dead-lettered message")
	check(*dead[0].DeadLetterReason == "go-reason", "dead-letter reason %q", *dead[0].DeadLetterReason)
	check(*dead[0].DeadLetterErrorDescription == "go-description", "dead-letter description %q",
		*dead[0].DeadLetterErrorDescription)
	check(dead[0].ApplicationProperties["stage"] == "parsing", "property set by dead-letter: %v",
		dead[0].ApplicationProperties["stage"])
	no(deadLetters.CompleteMessage(ctx, dead[0], nil))
}

// receiveAndDeleteClose: the SDK's own TestReceiverReceiveAndDeleteDoesNotLoseMessages, on `queue`
// with `count` messages: a ReceiveAndDelete receiver at its default credit asks for all of them,
// closes while the broker streams (or the whole connection closes: `whole`), and then takes what it
// had cached. It prints how many it
// received ("RECEIVED n"); the broker's delivery trace accounts for the rest
// (tests/interop/test_rad_loss.py).
func receiveAndDeleteClose(ctx context.Context, client *azservicebus.Client, queue string, count int, whole bool) {
	sender := must(client.NewSender(queue, nil))
	batch := must(sender.NewMessageBatch(ctx, nil))
	for i := 0; i < count; i++ {
		message := &azservicebus.Message{Body: make([]byte, 1024), ApplicationProperties: map[string]any{"Index": i}}
		if err := batch.AddMessage(message, nil); err != nil {
			no(sender.SendMessageBatch(ctx, batch, nil))
			batch = must(sender.NewMessageBatch(ctx, nil))
			no(batch.AddMessage(message, nil))
		}
	}
	no(sender.SendMessageBatch(ctx, batch, nil))
	no(sender.Close(ctx))
	receiver := must(client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{
		ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
	}))
	before := must(receiver.ReceiveMessages(ctx, count, &azservicebus.ReceiveMessagesOptions{
		TimeAfterFirstMessage: time.Millisecond,
	}))
	received := len(before)
	if whole { // the connection goes with the receiver open: what it had cached goes with it
		no(client.Close(ctx))
		fmt.Printf("RECEIVED %d (connection closed)\n", received)
		return
	}
	no(receiver.Close(ctx))
	for {
		cached, err := receiver.ReceiveMessages(ctx, 2, nil)
		if err != nil {
			break // closed: nothing more cached
		}
		received += len(cached)
	}
	fmt.Printf("RECEIVED %d (%d before the close)\n", received, len(before))
}

// deliveryCount: abandon once, then dead-letter: the dead-lettering does not count the delivery it
// ends, so the copy in the dead-letter queue shows the count of the second delivery (Go adds 1 to the
// wire's count: 2). An abandon in the dead-letter queue does not count (as the SDK's own live
// TestMessageSettlementUsingReceiver expects of Service Bus).
func deliveryCount(ctx context.Context, client *azservicebus.Client) {
	sender := must(client.NewSender("go-counts", nil))
	defer sender.Close(ctx)
	no(sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("counted"), MessageID: ptr("go-count")}, nil))
	receiver := must(client.NewReceiverForQueue("go-counts", nil))
	defer receiver.Close(ctx)
	first := receive(ctx, receiver.ReceiveMessages, 1)
	check(len(first) == 1 && first[0].DeliveryCount == 1, "first delivery")
	no(receiver.AbandonMessage(ctx, first[0], nil))
	second := receive(ctx, receiver.ReceiveMessages, 1)
	check(len(second) == 1 && second[0].DeliveryCount == 2, "second delivery: %d", second[0].DeliveryCount)
	no(receiver.DeadLetterMessage(ctx, second[0], &azservicebus.DeadLetterOptions{Reason: ptr("go-counted")}))

	deadLetters := must(client.NewReceiverForQueue("go-counts", &azservicebus.ReceiverOptions{
		SubQueue: azservicebus.SubQueueDeadLetter}))
	defer deadLetters.Close(ctx)
	peeked := must(deadLetters.PeekMessages(ctx, 1, nil))
	check(len(peeked) == 1, "peeked the dead letter")
	check(peeked[0].DeliveryCount == 2, "peeked dead letter's delivery count %d", peeked[0].DeliveryCount)
	dead := receive(ctx, deadLetters.ReceiveMessages, 1)
	check(len(dead) == 1 && dead[0].MessageID == "go-count", "the dead-lettered message")
	check(dead[0].DeliveryCount == 2, "dead letter's delivery count %d, want 2", dead[0].DeliveryCount)
	no(deadLetters.AbandonMessage(ctx, dead[0], nil))
	again := receive(ctx, deadLetters.ReceiveMessages, 1)
	check(len(again) == 1 && again[0].DeliveryCount == 2, "after an abandon in the dead-letter queue: %d",
		again[0].DeliveryCount)
	no(deadLetters.CompleteMessage(ctx, again[0], nil))
}

func main() {
	connection, scenario := os.Args[1], os.Args[2]
	scenarios := map[string]func(context.Context, *azservicebus.Client){
		"rad-close": func(ctx context.Context, client *azservicebus.Client) {
			count, err := strconv.Atoi(os.Args[4])
			no(err)
			receiveAndDeleteClose(ctx, client, os.Args[3], count, false)
		},
		"rad-close-connection": func(ctx context.Context, client *azservicebus.Client) {
			count, err := strconv.Atoi(os.Args[4])
			no(err)
			receiveAndDeleteClose(ctx, client, os.Args[3], count, true)
		},
		"messaging":                  messaging,
		"sessions":                   sessions,
		"schedule-defer-dead-letter": scheduleDeferDeadLetter,
		"error-texts":                errorTexts,
		"missing-entity":             missingEntity,
		"embedded-sas":               embeddedSAS,
		"websocket":                  overWebSocket,
		"delivery-count":             deliveryCount,
		"checker":                    func(context.Context, *azservicebus.Client) { checkerClient(connection) },
	}
	run, known := scenarios[scenario]
	if !known {
		fmt.Printf("FAIL %s: no such scenario\n", scenario)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	defer func() {
		if caught := recover(); caught != nil {
			fmt.Printf("FAIL %s: %v\n", scenario, caught)
			os.Exit(1)
		}
	}()
	client := must(azservicebus.NewClientFromConnectionString(connection, nil))
	run(ctx, client)
	_ = client.Close(ctx) // (closed already by rad-close-connection)
	fmt.Printf("PASS %s\n", scenario)
}
