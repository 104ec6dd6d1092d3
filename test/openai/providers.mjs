// Drives GEMINI and BEDROCK targets through gatewayd with the official openai npm client: for each slug of MODELS
// a plain call, a streamed call with the usage chunk, and (where EMBED names the slug) embeddings, which the client
// asks for as base64 by default and decodes itself. Prints one JSON object by slug; providers_test.go asserts on it.
import OpenAI from 'openai';

const { GATEWAY_URL, GATEWAY_KEY, MODELS, EMBED } = process.env;
const client = new OpenAI({
  apiKey: 'dummy-not-used',
  baseURL: `${GATEWAY_URL}/v1`,
  defaultHeaders: { Authorization: `Api-Key ${GATEWAY_KEY}` },
  maxRetries: 0,
});
const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hello from the openai client' }];
const out = {};
for (const model of MODELS.split(',')) {
  const seen = {};
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 20 });
  seen.plain = { content: plain.choices[0].message.content, finish: plain.choices[0].finish_reason, usage: plain.usage };
  const stream = await client.chat.completions.create({ model, messages, stream: true, stream_options: { include_usage: true } });
  seen.stream = { content: '', finish: null, usage: null };
  for await (const chunk of stream) {
    if (chunk.usage) seen.stream.usage = chunk.usage;
    seen.stream.content += chunk.choices[0]?.delta?.content ?? '';
    seen.stream.finish = chunk.choices[0]?.finish_reason ?? seen.stream.finish;
  }
  if (model === EMBED) {
    const e = await client.embeddings.create({ model, input: ['one', 'two'] });
    seen.embeddings = e.data.map((d) => d.embedding);
  }
  out[model] = seen;
}
console.log(JSON.stringify(out));
