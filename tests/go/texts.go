package main

import (
	"context"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// errorTexts: the refusals the Go SDK's own live tests compare come in Service Bus's words:
// renewing a lock that is not held (TestReceiverRenewLock), and a receiver without sessions on a
// queue that requires them, for receiving and for peeking (TestSessionReceiver_nonSessionReceiver).
func errorTexts(ctx context.Context, client *azservicebus.Client) {
	sender := must(client.NewSender("go-texts", nil))
	defer sender.Close(ctx)
	no(sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("lock")}, nil))
	receiver := must(client.NewReceiverForQueue("go-texts", nil))
	defer receiver.Close(ctx)
	got := receive(ctx, receiver.ReceiveMessages, 1)
	check(len(got) == 1, "received %d messages, want 1", len(got))
	no(receiver.CompleteMessage(ctx, got[0], nil))
	for i := range got[0].LockToken {
		got[0].LockToken[i] = 0 // a lock no one holds
	}
	err := receiver.RenewMessageLock(ctx, got[0], nil)
	check(err != nil, "renewing a lock no one holds succeeded")
	lockLost := "status code 410 and description: The lock supplied is invalid. Either the lock expired, " +
		"or the message has already been removed from the queue"
	check(strings.Contains(err.Error(), lockLost), "renew refused with %q, want it to contain %q", err, lockLost)

	plain := must(client.NewReceiverForQueue("go-sessions", nil))
	defer plain.Close(ctx)
	sessionsOnly := "It is not possible for an entity that requires sessions to create a non-sessionful message receiver."
	_, err = plain.ReceiveMessages(ctx, 1, nil)
	check(err != nil && strings.Contains(err.Error(), "amqp:not-allowed") && strings.Contains(err.Error(), sessionsOnly),
		"a receiver without sessions on a sessionful queue: %v", err)
	_, err = plain.PeekMessages(ctx, 1, nil)
	check(err != nil && strings.Contains(err.Error(), "amqp:not-allowed") && strings.Contains(err.Error(), sessionsOnly),
		"peeking without sessions on a sessionful queue: %v", err)
}
