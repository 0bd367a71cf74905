// What tests/interop/test_js_sdk.py hands the Node tests: the broker it started, through the environment.
import { ServiceBusAdministrationClient, ServiceBusClient } from "@azure/service-bus";

function required(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run these tests through tests/interop/test_js_sdk.py, which starts a broker`);
  }
  return value;
}

// UseDevelopmentEmulator=true: plain AMQP on the broker's AMQP port.
export const connectionString = () => required("SODALITE_CONNECTION_STRING");

// The management API's HTTPS port; Node trusts the broker's certificate through NODE_EXTRA_CA_CERTS.
export const adminConnectionString = () => required("SODALITE_ADMIN_CONNECTION_STRING");

export const adminClient = () => new ServiceBusAdministrationClient(adminConnectionString());

export const messagingClient = (options = {}) => new ServiceBusClient(connectionString(), options);

// Receive until `count` messages have arrived or `rounds` receive calls came back short.
export async function receiveAll(receiver, count, rounds = 5) {
  const got = [];
  for (let i = 0; i < rounds && got.length < count; i++) {
    got.push(...(await receiver.receiveMessages(count - got.length, { maxWaitTimeInMs: 2000 })));
  }
  return got;
}
