package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

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

// missingEntity: the put-token for an entity that does not exist is answered 404, which the SDK reports
// as CodeNotFound (an RPC error, status code 404), for a sender, a subscription receiver and a dead-letter
// receiver; the dead-letter queue of a queue that exists is found (its path resolves to the queue).
func missingEntity(ctx context.Context, client *azservicebus.Client) {
	notFound := func(what string, err error) {
		var sbErr *azservicebus.Error
		check(err != nil, "%s: no error", what)
		check(errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeNotFound, "%s: not CodeNotFound: %v", what, err)
		check(strings.Contains(err.Error(), "status code 404"), "%s: not the put-token's 404: %v", what, err)
	}
	sender := must(client.NewSender("go-missing", nil))
	defer sender.Close(ctx)
	notFound("sender", sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("lost")}, nil))

	subscription := must(client.NewReceiverForSubscription("go-missing-topic", "s", nil))
	defer subscription.Close(ctx)
	_, err := subscription.PeekMessages(ctx, 1, nil)
	notFound("subscription receiver", err)

	deadLetters := must(client.NewReceiverForQueue("go-missing", &azservicebus.ReceiverOptions{
		SubQueue: azservicebus.SubQueueDeadLetter}))
	defer deadLetters.Close(ctx)
	_, err = deadLetters.PeekMessages(ctx, 1, nil)
	notFound("dead-letter receiver", err)

	found := must(client.NewReceiverForQueue("go-texts", &azservicebus.ReceiverOptions{
		SubQueue: azservicebus.SubQueueDeadLetter}))
	defer found.Close(ctx)
	_ = must(found.PeekMessages(ctx, 1, nil))
}

// embeddedSAS: a connection string with a SharedAccessSignature as the SDK's
// sas.CreateConnectionStringWithSASUsingExpiry makes it (internal to the SDK, so made here the same way): its
// sr is the namespace as host:port, without a scheme, lower-cased and query-escaped.
func embeddedSAS(ctx context.Context, _ *azservicebus.Client) {
	fields := map[string]string{}
	for _, part := range strings.Split(os.Args[1], ";") {
		if key, value, found := strings.Cut(part, "="); found {
			fields[strings.ToLower(key)] = value
		}
	}
	namespace := strings.TrimSuffix(strings.TrimPrefix(fields["endpoint"], "sb://"), "/")
	expiry := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	audience := strings.ToLower(url.QueryEscape(namespace))
	mac := hmac.New(sha256.New, []byte(fields["sharedaccesskey"]))
	mac.Write([]byte(audience + "\n" + expiry))
	signature := url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	token := fmt.Sprintf("SharedAccessSignature sr=%s&sig=%s&se=%s&skn=%s", audience, signature, expiry,
		fields["sharedaccesskeyname"])
	connection := fmt.Sprintf("Endpoint=sb://%s;SharedAccessSignature=%s;UseDevelopmentEmulator=true", namespace, token)
	client := must(azservicebus.NewClientFromConnectionString(connection, nil))
	defer client.Close(ctx)
	sender := must(client.NewSender("go-texts", nil))
	defer sender.Close(ctx)
	no(sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("signed for host:port")}, nil))
	receiver := must(client.NewReceiverForQueue("go-texts", nil))
	defer receiver.Close(ctx)
	got := receive(ctx, receiver.ReceiveMessages, 1)
	check(len(got) == 1 && string(got[0].Body) == "signed for host:port", "received %d messages", len(got))
	no(receiver.CompleteMessage(ctx, got[0], nil))
}
