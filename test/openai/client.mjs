// Drives gatewayd with the official openai npm client, as a customer would: the federated key goes in the
// Api-Key header (the client's own Bearer apiKey is a dummy the gateway must ignore). Prints one JSON object
// with what it saw; openai_test.go asserts on it. Exits non-zero on any unexpected error.
import OpenAI from 'openai';

const { GATEWAY_URL, GATEWAY_KEY, MODEL } = process.env;
const client = new OpenAI({
  apiKey: 'dummy-not-used',
  baseURL: `${GATEWAY_URL}/v1`,
  defaultHeaders: { Authorization: `Api-Key ${GATEWAY_KEY}` },
  maxRetries: 0, // a 429 must reach us, not be retried away
});
const messages = [{ role: 'user', content: 'hello from the openai client' }];
const out = {};

const plain = await client.chat.completions.create({ model: MODEL, messages });
out.plain = { content: plain.choices[0].message.content, usage: plain.usage };

const stream = await client.chat.completions.create({ model: MODEL, messages, stream: true });
out.stream = { chunks: 0, content: '', usageChunks: 0 };
for await (const chunk of stream) {
  out.stream.chunks++;
  if (chunk.usage) out.stream.usageChunks++;
  out.stream.content += chunk.choices[0]?.delta?.content ?? '';
}

try {
  await client.chat.completions.create({ model: MODEL, messages });
  out.limited = { status: 200 };
} catch (err) {
  if (!(err instanceof OpenAI.APIError)) throw err;
  out.limited = { status: err.status, error: err.error, retryAfter: err.headers?.get('retry-after') ?? null,
    isRateLimitError: err instanceof OpenAI.RateLimitError };
}
console.log(JSON.stringify(out));
