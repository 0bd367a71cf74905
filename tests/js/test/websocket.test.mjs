// ServiceBusClient (@azure/service-bus) over WebSockets: wss://host:port/$servicebus/websocket on the
// broker's HTTPS management port, the `ws` package as the WebSocket. Nothing but the management API
// listens on that port, so what gets through went over the WebSocket.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";
import WebSocket from "ws";
import { adminConnectionString, receiveAll } from "./env.mjs";

const client = new ServiceBusClient(adminConnectionString(), { webSocketOptions: { webSocket: WebSocket } });
after(() => client.close());

test("send, receive with PeekLock and complete over a WebSocket", async () => {
  const sender = client.createSender("js-ws");
  await sender.sendMessages([
    { body: "over wss", messageId: "ws-1", applicationProperties: { via: "websocket" } },
    { body: "x".repeat(100000), messageId: "ws-2" },
  ]);
  await sender.close();
  const receiver = client.createReceiver("js-ws");
  const got = await receiveAll(receiver, 2);
  assert.deepEqual(got.map((m) => m.messageId), ["ws-1", "ws-2"]);
  assert.deepEqual([got[0].body, got[0].applicationProperties.via], ["over wss", "websocket"]);
  assert.equal(got[1].body.length, 100000);
  for (const message of got) await receiver.completeMessage(message);
  assert.deepEqual(await receiver.peekMessages(5), []);
  await receiver.close();
});
