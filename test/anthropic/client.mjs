// Drives gatewayd's /v1/messages with the official @anthropic-ai/sdk npm client, as a customer's tool would with
// only a base URL and a key: the federated key as apiKey (x-api-key) and as authToken (Authorization: Bearer).
// Prints one JSON object with what it saw; anthropic_test.go asserts on it. Exits non-zero on any unexpected error.
import Anthropic from '@anthropic-ai/sdk';

const { GATEWAY_URL, GATEWAY_KEY, MODEL } = process.env;
const common = { baseURL: GATEWAY_URL, maxRetries: 0 };
const byKey = new Anthropic({ ...common, apiKey: GATEWAY_KEY, authToken: null });
const byToken = new Anthropic({ ...common, apiKey: null, authToken: GATEWAY_KEY });
const params = { model: MODEL, max_tokens: 64, system: 'Be brief.', messages: [{ role: 'user', content: 'hello from the anthropic client' }] };
const out = {};

const plain = await byKey.messages.create(params);
out.plain = { type: plain.type, text: plain.content[0]?.text ?? '', stopReason: plain.stop_reason, usage: plain.usage };

const bearer = await byToken.messages.create(params);
out.bearer = { text: bearer.content[0]?.text ?? '' };

const stream = byToken.messages.stream(params);
let text = '';
const events = [];
stream.on('text', (delta) => { text += delta; });
stream.on('streamEvent', (e) => { events.push(e.type); });
const final = await stream.finalMessage();
out.stream = { text, events, finalText: final.content[0]?.text ?? '', stopReason: final.stop_reason, usage: final.usage };

try {
  await byKey.messages.create({ ...params, model: 'nope/nope' });
  out.missing = { status: 200 };
} catch (err) {
  if (!(err instanceof Anthropic.APIError)) throw err;
  out.missing = { status: err.status, type: err.error?.error?.type ?? null, notFound: err instanceof Anthropic.NotFoundError };
}
console.log(JSON.stringify(out));
