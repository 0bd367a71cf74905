// ServiceBusClient (@azure/service-bus) over plain AMQP with the emulator connection string:
// send, peek, receive in PeekLock and settle, receive and delete.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { messagingClient, receiveAll } from "./env.mjs";

const client = messagingClient();
after(() => client.close());

test("send, peek, receive with PeekLock, complete", async () => {
  const sender = client.createSender("js-msg");
  await sender.sendMessages([
    { body: "hello", messageId: "m-1", subject: "greeting", applicationProperties: { n: 1, s: "x" } },
    { body: { nested: [1, 2] }, messageId: "m-2", contentType: "application/json" },
  ]);
  const batch = await sender.createMessageBatch();
  assert.ok(batch.tryAddMessage({ body: "batched", messageId: "m-3" }));
  await sender.sendMessages(batch);
  await sender.close();

  const peeker = client.createReceiver("js-msg");
  const peeked = await peeker.peekMessages(10);
  await peeker.close();
  assert.deepEqual(peeked.map((m) => m.messageId), ["m-1", "m-2", "m-3"]);
  const sequence = peeked.map((m) => Number(m.sequenceNumber));
  assert.ok(sequence[0] < sequence[1] && sequence[1] < sequence[2], `sequence numbers ${sequence}`);

  const receiver = client.createReceiver("js-msg");
  const got = await receiveAll(receiver, 3);
  assert.deepEqual(got.map((m) => m.body), ["hello", { nested: [1, 2] }, "batched"]);
  const [first] = got;
  assert.deepEqual([first.subject, first.applicationProperties], ["greeting", { n: 1, s: "x" }]);
  assert.equal(first.deliveryCount, 0);
  assert.ok(first.lockToken && first.lockedUntilUtc > new Date(Date.now() - 60000));
  for (const message of got) await receiver.completeMessage(message);
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
  await receiver.close();
  const again = client.createReceiver("js-msg");
  assert.deepEqual(await again.peekMessages(10), []);
  await again.close();
});

test("an abandoned message comes back with its delivery count raised", async () => {
  const sender = client.createSender("js-msg-abandon");
  await sender.sendMessages({ body: "again", messageId: "a-1" });
  await sender.close();
  const receiver = client.createReceiver("js-msg-abandon");
  const [first] = await receiveAll(receiver, 1);
  await receiver.abandonMessage(first);
  const [second] = await receiveAll(receiver, 1);
  assert.deepEqual([second.messageId, second.deliveryCount], ["a-1", 1]);
  await receiver.completeMessage(second);
  await receiver.close();
});

test("receive and delete takes the message off the queue", async () => {
  const sender = client.createSender("js-msg-rad");
  await sender.sendMessages([{ body: "one", messageId: "d-1" }, { body: "two", messageId: "d-2" }]);
  await sender.close();
  const receiver = client.createReceiver("js-msg-rad", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 2);
  assert.deepEqual(got.map((m) => m.body), ["one", "two"]);
  assert.deepEqual(await receiver.peekMessages(5), []);
  await receiver.close();
});

test("a message the Python SDK sent arrives intact", async () => {
  // tests/interop/test_js_sdk.py sent it before starting Node.
  const receiver = client.createReceiver("js-from-python", { receiveMode: "receiveAndDelete" });
  const [message] = await receiveAll(receiver, 1);
  await receiver.close();
  assert.ok(message, "no message from Python");
  // A data section that is not JSON reaches the application as the bytes it holds.
  const body = Buffer.isBuffer(message.body) ? message.body.toString("utf8") : message.body;
  assert.deepEqual([body, message.messageId, message.applicationProperties.origin],
    ["sent by python", "py-1", "python"]);
});
