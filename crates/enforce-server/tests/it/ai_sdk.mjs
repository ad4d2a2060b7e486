// Drives the real Vercel AI SDK (`ai` + `@ai-sdk/openai`) against enforce's proxy and prints
// one JSON line per case: what the SDK made of the answer, or the error it gave. Both OpenAI
// models of the provider run every case: the default `openai(model)` (the Responses API) and
// `openai.chat(model)` (chat completions). Every case names itself in its question, so the
// server side can count how often each one reached the model. The SDK's own retry setting is
// left at its default: an unresolved answer must not be asked for again by the client.
// The Rust test (ai_sdk.rs) starts the server and runs this with the SDK installed under target/.
//
// Usage: node ai_sdk.mjs NODE_MODULES_PREFIX BASE_URL MODEL

import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [prefix, baseUrl, modelName] = process.argv.slice(2);
const from = createRequire(pathToFileURL(`${prefix}/package.json`));
const load = (name) => import(pathToFileURL(from.resolve(name)).href);
const { generateText, streamText, generateObject, streamObject, tool, stepCountIs } =
  await load("ai");
const { createOpenAI } = await load("@ai-sdk/openai");
const { z } = await load("zod");

const openai = createOpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "sk-test" });
const Person = z.object({ name: z.string(), age: z.number().int() });
const weather = {
  get_weather: tool({
    description: "The weather in a city",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => `12 C in ${city}`,
  }),
};

function describe(error) {
  return {
    ok: false,
    error: error?.constructor?.name,
    name: error?.name,
    status: error?.statusCode,
    retryable: error?.isRetryable,
    message: String(error?.message ?? JSON.stringify(error)),
  };
}

async function runCase(name, run) {
  let result;
  try {
    result = { ok: true, ...(await run(`(${name})`)) };
  } catch (error) {
    result = describe(error);
  }
  result.case = name;
  console.log(JSON.stringify(result));
}

/** Reads a `streamText` to its end: the text deltas, the reasoning, the parts' types and the
 * first error. */
async function readStream(result) {
  const deltas = [];
  const kinds = [];
  let reasoning = "";
  let error;
  for await (const part of result.fullStream) {
    kinds.push(part.type);
    if (part.type === "text-delta") deltas.push(part.text);
    if (part.type === "reasoning-delta") reasoning += part.text;
    if (part.type === "error" && error === undefined) error = part.error;
  }
  return { deltas, kinds, reasoning, error };
}

for (const [api, model, draft] of [
  ["responses", openai(modelName), openai("draft")],
  ["chat", openai.chat(modelName), openai.chat("draft")],
]) {
  await runCase(`${api}_generate_text`, async (tag) => {
    const r = await generateText({ model, prompt: `Say hello ${tag}` });
    return {
      text: r.text,
      finishReason: r.finishReason,
      usage: [r.usage.inputTokens, r.usage.outputTokens],
      enforceStatus: r.response.headers?.["x-enforce-status"],
    };
  });
  await runCase(`${api}_stream_text`, async (tag) => {
    const r = streamText({ model, prompt: `Say hello ${tag}` });
    const { deltas, error } = await readStream(r);
    if (error !== undefined) return describe(error);
    const usage = await r.usage;
    return {
      deltas,
      text: await r.text,
      finishReason: await r.finishReason,
      usage: [usage.inputTokens, usage.outputTokens],
    };
  });
  await runCase(`${api}_stream_draft`, async (tag) => {
    // The model "draft" streams every attempt as reasoning; the first one breaks the contract.
    const r = streamText({ model: draft, prompt: `Mend the answer ${tag}` });
    const { deltas, kinds, reasoning, error } = await readStream(r);
    if (error !== undefined) return describe(error);
    return { deltas, kinds: [...new Set(kinds)], reasoning, text: await r.text };
  });
  await runCase(`${api}_stream_draft_unresolved`, async (tag) => {
    const r = streamText({ model: draft, prompt: `Break the contract ${tag}` });
    const { deltas, reasoning, error } = await readStream(r);
    if (error !== undefined) return { ...describe(error), deltas, reasoning };
    return { text: deltas.join("") };
  });
  await runCase(`${api}_tool`, async (tag) => {
    const r = await generateText({
      model,
      tools: weather,
      stopWhen: stepCountIs(2),
      prompt: `What is the weather in Oslo? ${tag}`,
    });
    const calls = r.steps[0].toolCalls.map((c) => ({ name: c.toolName, input: c.input }));
    return { calls, text: r.text, steps: r.steps.length, firstFinish: r.steps[0].finishReason };
  });
  await runCase(`${api}_stream_tool`, async (tag) => {
    const r = streamText({
      model,
      tools: weather,
      stopWhen: stepCountIs(2),
      prompt: `What is the weather in Oslo? ${tag}`,
    });
    const { error } = await readStream(r);
    if (error !== undefined) return describe(error);
    const steps = await r.steps;
    const calls = steps[0].toolCalls.map((c) => ({ name: c.toolName, input: c.input }));
    return { calls, text: await r.text, steps: steps.length, firstFinish: steps[0].finishReason };
  });
  await runCase(`${api}_generate_object`, async (tag) => {
    const r = await generateObject({ model, schema: Person, prompt: `Who is Ada? ${tag}` });
    return { object: r.object, finishReason: r.finishReason };
  });
  await runCase(`${api}_stream_object`, async (tag) => {
    const r = streamObject({ model, schema: Person, prompt: `Who is Ada? ${tag}` });
    const partials = [];
    for await (const partial of r.partialObjectStream) partials.push(partial);
    return { object: await r.object, partials: partials.length };
  });
  await runCase(`${api}_text_unresolved`, async (tag) => {
    const r = await generateText({ model, prompt: `Break the contract ${tag}` });
    return { text: r.text };
  });
  await runCase(`${api}_stream_unresolved`, async (tag) => {
    const r = streamText({ model, prompt: `Break the contract ${tag}` });
    const { deltas, error } = await readStream(r);
    if (error !== undefined) return { ...describe(error), deltas };
    return { text: deltas.join("") };
  });
  await runCase(`${api}_object_unresolved`, async (tag) => {
    const r = await generateObject({ model, schema: Person, prompt: `Break: who is Ada? ${tag}` });
    return { object: r.object };
  });
}
