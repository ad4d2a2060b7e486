// llama.cpp through node-llama-cpp, timed the way enforce-bench times the local runner: the
// context is made inside the timing (the runner makes one per request), the prompt is read,
// then tokens are sampled greedily until an end-of-generation token or MAX_TOKENS samples.
// Usage: node llama.mjs MODEL.gguf PROMPT_FILE THREADS MAX_TOKENS [GBNF_FILE]
// Prints one JSON line: prompt tokens, answer tokens (the end-of-generation token not
// counted), seconds to the first answer token, seconds from the first answer token to the last,
// and the CPU seconds of this process over the same span.
import {getLlama, LlamaGrammar, LlamaGrammarEvaluationState} from "node-llama-cpp";
import {readFileSync} from "node:fs";

const [modelPath, promptFile, threadsArg, maxArg, grammarFile] = process.argv.slice(2);
const threads = Number(threadsArg);
const maxTokens = Number(maxArg);
const llama = await getLlama({
    gpu: false,
    build: "never",
    skipDownload: true,
    maxThreads: threads,
    logLevel: "error",
});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
// The prompt is already in the model's chat template: special tokens are tokens here.
const tokens = model.tokenize(readFileSync(promptFile, "utf8"), true);
const grammar = grammarFile
    ? new LlamaGrammar(llama, {grammar: readFileSync(grammarFile, "utf8")})
    : undefined;

const started = process.hrtime.bigint();
const context = await model.createContext({
    contextSize: tokens.length + maxTokens,
    batchSize: Math.min(512, tokens.length + maxTokens),
    threads: {ideal: threads, min: threads},
    sequences: 1,
});
const sequence = context.getSequence();
const grammarEvaluationState = grammar
    ? new LlamaGrammarEvaluationState({model, grammar})
    : undefined;
let first, last, firstCpu, lastCpu;
let sampled = 0;
let answer = 0;
for await (const token of sequence.evaluate(tokens, {temperature: 0, grammarEvaluationState})) {
    const now = process.hrtime.bigint();
    sampled += 1;
    if (model.isEogToken(token)) break;
    answer += 1;
    const cpu = process.cpuUsage();
    first ??= now;
    firstCpu ??= cpu;
    last = now;
    lastCpu = cpu;
    if (sampled >= maxTokens) break;
}
const seconds = (from, to) => Number(to - from) / 1e9;
const cpuSeconds = (from, to) => (to.user + to.system - from.user - from.system) / 1e6;
console.log(JSON.stringify({
    prompt_tokens: tokens.length,
    tokens: answer,
    first_s: first === undefined ? 0 : seconds(started, first),
    rest_s: first === undefined ? 0 : seconds(first, last),
    rest_cpu_s: first === undefined ? null : cpuSeconds(firstCpu, lastCpu),
}));
await context.dispose();
await model.dispose();
