// The fault checker's Go client (tests/checker/, docs/reliability.md): `sodalite-go-interop <connection
// string> checker` reads operations from stdin, one JSON object a line, runs each with the official Go
// SDK, and writes to stdout the history lines it makes (what it did, when, with what result, and what it
// received), then {"done": true}. The checker records those lines as it records its Python clients' and
// holds them to the same promises.
//
//	{"op": "send", "queue": q, "messages": [{"uid": u, "session": s, "key": k}, ...]}   (a batch if more than one)
//	{"op": "receive", "queue": q, "mode": "peeklock"|"rad", "count": n, "settle": ["complete", "abandon", ...]}
//
// A receive may also carry "pause": seconds between writing its line and settling (a regression script's
// named point: a fault is injected there).
//
// Results are Jepsen's: "ok" (returned success), "fail" (an error that says it did not happen: lock lost,
// not found), "info" (anything else: it may or may not have happened). Times are wall-clock seconds.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

type checkerMessage struct {
	UID     string  `json:"uid"`
	Session *string `json:"session"`
	Key     *string `json:"key"`
}

type checkerRequest struct {
	Op       string           `json:"op"`
	Queue    string           `json:"queue"`
	Messages []checkerMessage `json:"messages"`
	Mode     string           `json:"mode"`
	Count    int              `json:"count"`
	Settle   []string         `json:"settle"`
	Pause    float64          `json:"pause"`
}

type checkerDelivery struct {
	UID     string  `json:"uid"`
	Seq     int64   `json:"seq"`
	Count   uint32  `json:"count"`
	Session *string `json:"session"`
}

type checkerLine struct {
	Kind       string            `json:"kind"`
	Queue      string            `json:"queue"`
	Start      float64           `json:"start"`
	End        float64           `json:"end"`
	Result     string            `json:"result"`
	UIDs       []string          `json:"uids"`
	Deliveries []checkerDelivery `json:"deliveries"`
	Value      map[string]any    `json:"value"`
	Error      string            `json:"error"`
}

func wallSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func resultOf(err error) (string, string) {
	if err == nil {
		return "ok", ""
	}
	text := err.Error()
	if len(text) > 200 {
		text = text[:200]
	}
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) && (sbErr.Code == azservicebus.CodeLockLost || sbErr.Code == azservicebus.CodeNotFound) {
		return "fail", text
	}
	return "info", text
}

func checkerClient(connection string) {
	client, err := azservicebus.NewClientFromConnectionString(connection, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 100 * time.Millisecond,
			MaxRetryDelay: time.Second},
	})
	if err != nil {
		panic(failure(err.Error()))
	}
	defer client.Close(context.Background())
	out := json.NewEncoder(os.Stdout)
	write := func(line checkerLine) { _ = out.Encode(line) }
	senders := map[string]*azservicebus.Sender{}
	input := bufio.NewScanner(os.Stdin)
	input.Buffer(make([]byte, 1<<20), 1<<20)
	for input.Scan() {
		var request checkerRequest
		if json.Unmarshal(input.Bytes(), &request) != nil {
			continue
		}
		switch request.Op {
		case "send":
			checkerSend(client, senders, request, write)
		case "receive":
			checkerReceive(client, request, write)
		}
		_ = out.Encode(map[string]bool{"done": true})
	}
}

func checkerSend(client *azservicebus.Client, senders map[string]*azservicebus.Sender, request checkerRequest,
	write func(checkerLine)) {
	line := checkerLine{Kind: "send", Queue: request.Queue, Start: wallSeconds()}
	sender, known := senders[request.Queue]
	var err error
	if !known {
		sender, err = client.NewSender(request.Queue, nil)
	}
	if err == nil {
		senders[request.Queue] = sender
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if len(request.Messages) == 1 {
			err = sender.SendMessage(ctx, checkerOutgoing(request.Messages[0]), nil)
		} else {
			var batch *azservicebus.MessageBatch
			batch, err = sender.NewMessageBatch(ctx, nil)
			for _, m := range request.Messages {
				if err == nil {
					err = batch.AddMessage(checkerOutgoing(m), nil)
				}
			}
			if err == nil {
				err = sender.SendMessageBatch(ctx, batch, nil)
			}
		}
		cancel()
		if err != nil { // the sender may be broken (a cut, a kill): a new one next time
			delete(senders, request.Queue)
			_ = sender.Close(context.Background())
		}
	}
	for _, m := range request.Messages {
		line.UIDs = append(line.UIDs, m.UID)
	}
	line.Result, line.Error = resultOf(err)
	line.End = wallSeconds()
	write(line)
}

func checkerOutgoing(m checkerMessage) *azservicebus.Message {
	id := m.UID
	return &azservicebus.Message{Body: []byte(m.UID), MessageID: &id, SessionID: m.Session, PartitionKey: m.Key,
		ApplicationProperties: map[string]any{"uid": m.UID}}
}

func checkerReceive(client *azservicebus.Client, request checkerRequest, write func(checkerLine)) {
	mode := azservicebus.ReceiveModePeekLock
	if request.Mode == "rad" {
		mode = azservicebus.ReceiveModeReceiveAndDelete
	}
	line := checkerLine{Kind: "receive", Queue: request.Queue, Start: wallSeconds(),
		Value: map[string]any{"mode": request.Mode, "credit": request.Count}}
	receiver, err := client.NewReceiverForQueue(request.Queue, &azservicebus.ReceiverOptions{ReceiveMode: mode})
	var messages []*azservicebus.ReceivedMessage
	if err == nil {
		defer receiver.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		messages, err = receiver.ReceiveMessages(ctx, request.Count, nil)
		if err != nil && ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			err = nil // nothing arrived in time: an empty receive
		}
		cancel()
	}
	line.Result, line.Error = resultOf(err)
	for _, m := range messages {
		line.Deliveries = append(line.Deliveries, checkerDelivery{UID: string(checkerBody(m)),
			Seq: *m.SequenceNumber, Count: m.DeliveryCount - 1, Session: m.SessionID})
	}
	line.End = wallSeconds()
	write(line)
	if err != nil || mode == azservicebus.ReceiveModeReceiveAndDelete {
		return
	}
	if request.Pause > 0 {
		time.Sleep(time.Duration(request.Pause * float64(time.Second)))
	}
	for i, m := range messages {
		kind := "leave"
		if i < len(request.Settle) {
			kind = request.Settle[i]
		}
		settle := checkerLine{Kind: kind, Queue: request.Queue, Start: wallSeconds(),
			UIDs: []string{string(checkerBody(m))}, Value: map[string]any{"seq": *m.SequenceNumber}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		switch kind {
		case "complete":
			err = receiver.CompleteMessage(ctx, m, nil)
		case "abandon":
			err = receiver.AbandonMessage(ctx, m, nil)
		case "deadletter":
			err = receiver.DeadLetterMessage(ctx, m, nil)
		default:
			cancel()
			continue
		}
		cancel()
		settle.Result, settle.Error = resultOf(err)
		settle.End = wallSeconds()
		write(settle)
	}
}

func checkerBody(m *azservicebus.ReceivedMessage) []byte { return m.Body }
