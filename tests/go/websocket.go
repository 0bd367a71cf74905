package main

import (
	"context"
	"net"
	"os"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/coder/websocket"
)

// overWebSocket: AMQP over a WebSocket as the Go SDK's own TestNewClientWithWebsockets dials it, asking for
// the subprotocol "amqp" (not the binding's AMQPWSB10), to the broker's plain-HTTP management port
// (SODALITE_WS_URL, ws://.../$servicebus/websocket): a message sent and received over it.
func overWebSocket(ctx context.Context, _ *azservicebus.Client) {
	url := os.Getenv("SODALITE_WS_URL")
	check(url != "", "SODALITE_WS_URL is not set")
	dial := func(ctx context.Context, _ azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
		conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"amqp"}})
		if err != nil {
			return nil, err
		}
		return websocket.NetConn(context.Background(), conn, websocket.MessageBinary), nil
	}
	client := must(azservicebus.NewClientFromConnectionString(os.Args[1],
		&azservicebus.ClientOptions{NewWebSocketConn: dial}))
	defer client.Close(ctx)
	sender := must(client.NewSender("go-texts", nil))
	defer sender.Close(ctx)
	no(sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("over a websocket")}, nil))
	receiver := must(client.NewReceiverForQueue("go-texts", nil))
	defer receiver.Close(ctx)
	got := receive(ctx, receiver.ReceiveMessages, 1)
	check(len(got) == 1 && string(got[0].Body) == "over a websocket", "received %d messages", len(got))
	no(receiver.CompleteMessage(ctx, got[0], nil))
}
