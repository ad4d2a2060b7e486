//! One generation: prompt → tokens → context → sampled tokens, each handed out as it comes.
//! Runs on its own thread; the only way in from outside is the cancel flag, read before every
//! token.

use crate::config::ConstraintEngine;
use crate::constraint::{regex_grammar, schema_grammar};
use crate::model::{unavailable, LoadedModel};
use enforce_core::{runner::FinishReason, Message, Reply, RunnerError, StreamEvent, Usage};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::DecodeError;
use serde_json::Value;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Prompt tokens decoded per llama.cpp call.
const BATCH: usize = 512;

/// What constrains the tokens an answer may have.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Grammar {
    /// A GBNF grammar with a `root` rule.
    Gbnf(String),
    /// A JSON Schema, compiled by the configured engine.
    Schema(Value),
    /// A regex the whole answer matches (llguidance).
    Regex(String),
}

/// The sampling settings of one request: the configuration with the request's params laid
/// over it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sampling {
    pub(crate) threads: u32,
    pub(crate) temperature: f32,
    pub(crate) top_k: u32,
    pub(crate) top_p: f32,
    pub(crate) min_p: f32,
    /// `None`: llama.cpp picks a random seed.
    pub(crate) seed: Option<u64>,
    pub(crate) max_tokens: u32,
    pub(crate) context_size: u32,
    pub(crate) grammar: Option<Grammar>,
    /// What compiles a JSON Schema.
    pub(crate) engine: ConstraintEngine,
}

impl Sampling {
    /// The seed as llama.cpp's sampler takes it. `u32::MAX` means "random" to llama.cpp, so
    /// seeds wrap below it.
    fn seed(&self) -> u32 {
        match self.seed {
            Some(seed) => (seed % u64::from(u32::MAX)) as u32,
            None => u32::MAX,
        }
    }

    /// The samplers: llama-server's filters, temperature and a seeded draw (greedy at
    /// temperature 0), and the grammar apart from them (see [`Samplers::sample`]).
    fn samplers(&self, model: &LoadedModel) -> Result<Samplers, RunnerError> {
        let mut chain = Vec::with_capacity(5);
        if self.temperature <= 0.0 {
            chain.push(LlamaSampler::greedy());
        } else {
            if self.top_k > 0 {
                chain.push(LlamaSampler::top_k(
                    i32::try_from(self.top_k).unwrap_or(i32::MAX),
                ));
            }
            if self.top_p < 1.0 {
                chain.push(LlamaSampler::top_p(self.top_p, 1));
            }
            if self.min_p > 0.0 {
                chain.push(LlamaSampler::min_p(self.min_p, 1));
            }
            chain.push(LlamaSampler::temp(self.temperature));
            chain.push(LlamaSampler::dist(self.seed()));
        }
        let grammar = match &self.grammar {
            Some(grammar) => Some(grammar_sampler(model, grammar, self.engine)?),
            None => None,
        };
        Ok(Samplers {
            chain: LlamaSampler::chain_simple(chain),
            grammar,
        })
    }
}

/// The sampler chain and the grammar that constrains it.
struct Samplers {
    chain: LlamaSampler,
    grammar: Option<LlamaSampler>,
}

impl Samplers {
    /// The next token after the logits at `idx`. With a grammar, the token the chain draws
    /// from all logits is kept when the grammar allows it, and only otherwise is the grammar
    /// applied to the whole vocabulary and the token drawn again, as llama.cpp's own sampler
    /// (`common_sampler_sample`) does: checking one token is cheap, masking 50,000 to 150,000
    /// every token is what made grammar-constrained answers slow. At temperature 0 it is the
    /// same token either way.
    fn sample(&mut self, ctx: &LlamaContext<'_>, idx: i32) -> LlamaToken {
        let token = self.chain.sample(ctx, idx);
        let Some(grammar) = self.grammar.as_mut() else {
            return token;
        };
        let mut single =
            LlamaTokenDataArray::new(vec![LlamaTokenData::new(token, 1.0, 0.0)], false);
        grammar.apply(&mut single);
        let allowed = single
            .data
            .first()
            .is_some_and(|d| d.logit() != f32::NEG_INFINITY);
        if !allowed {
            let mut all = ctx.token_data_array_ith(idx);
            grammar.apply(&mut all);
            self.chain.apply(&mut all);
            match all.selected_token() {
                Some(token) => {
                    grammar.accept(token);
                    return token;
                }
                // Nothing left to draw from: the token the grammar refused ends here, not
                // in the grammar's state (llama.cpp aborts on a refused token there).
                None => return token,
            }
        }
        grammar.accept(token);
        token
    }
}

fn grammar_sampler(
    model: &LoadedModel,
    grammar: &Grammar,
    engine: ConstraintEngine,
) -> Result<LlamaSampler, RunnerError> {
    match grammar {
        Grammar::Gbnf(text) => gbnf_sampler(model, text),
        Grammar::Schema(schema) => {
            if engine == ConstraintEngine::Llguidance {
                // A schema llguidance rejects is compiled to GBNF, as `plan_schema` says in
                // the decode notes.
                if let Ok(sampler) = model.llguidance_sampler(schema_grammar(schema)) {
                    return Ok(sampler);
                }
            }
            // What the grammar loosens is the validators' to check; `enforce config explain`
            // lists it for a profile's own schema.
            gbnf_sampler(model, &crate::json_schema_to_gbnf(schema).gbnf)
        }
        Grammar::Regex(regex) => model
            .llguidance_sampler(regex_grammar(regex))
            .map_err(|e| unavailable(format!("the regex cannot constrain decoding: {e}"))),
    }
}

fn gbnf_sampler(model: &LoadedModel, gbnf: &str) -> Result<LlamaSampler, RunnerError> {
    LlamaSampler::grammar(&model.model, gbnf, "root").map_err(|e| {
        unavailable(format!(
            "the grammar cannot be used ({e}); it needs a `root` rule in llama.cpp's GBNF"
        ))
    })
}

/// Where a generation sends what it produces. `false` from `send` means nobody listens any
/// more.
pub(crate) trait Sink {
    fn send(&mut self, event: StreamEvent) -> bool;
}

/// Text pieces of tokens, handed out as whole UTF-8 characters (a character may span tokens).
#[derive(Debug, Default)]
struct Utf8Pieces {
    pending: Vec<u8>,
}

impl Utf8Pieces {
    /// Adds a token's bytes and returns the text that is complete now.
    fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let complete = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // Bytes that can never become valid are given out as U+FFFD now.
            Err(e) if e.error_len().is_some() => self.pending.len(),
            Err(e) => e.valid_up_to(),
        };
        let rest = self.pending.split_off(complete);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }

    /// What is left at the end (an unfinished character, as U+FFFD).
    fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

/// Generates the answer to `messages`. Returns `None` when cancelled (nobody waits for a
/// reply then).
pub(crate) fn generate(
    model: &LoadedModel,
    messages: &[Message],
    sampling: &Sampling,
    cancel: &AtomicBool,
    generated_total: &AtomicU64,
    sink: &mut dyn Sink,
) -> Result<Option<Reply>, RunnerError> {
    let started = Instant::now();
    let (tokens, limit) = prompt_tokens(model, messages, sampling)?;
    let prompt_tokens = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
    let mut decoding = Decoding::start(model, sampling, prompt_tokens, limit)?;
    let mut sampler = sampling.samplers(model)?;
    if !decoding.read_prompt(&tokens, cancel)? {
        return Ok(None);
    }
    let usage = |generated: u32| Usage {
        input_tokens: u64::from(prompt_tokens),
        output_tokens: u64::from(generated),
    };
    let max_tokens = sampling.max_tokens;
    let sampled = decoding.answer(
        model,
        &mut sampler,
        max_tokens,
        cancel,
        generated_total,
        |event| {
            sink.send(match event {
                Sampled::Text(text) => StreamEvent::Text(text),
                Sampled::Token { generated } => StreamEvent::Spent {
                    usage: Some(usage(generated)),
                    cost_usd: None,
                },
            })
        },
    )?;
    Ok(sampled.map(|answer| Reply {
        text: answer.text,
        usage: Some(usage(answer.generated)),
        duration: Some(started.elapsed()),
        finish_reason: Some(answer.finish),
        seed: sampling.seed,
        ..Reply::default()
    }))
}

/// The tokens of `messages` in the model's chat template, and the context limit they are
/// held to: a prompt that leaves no room for an answer is refused.
fn prompt_tokens(
    model: &LoadedModel,
    messages: &[Message],
    sampling: &Sampling,
) -> Result<(Vec<LlamaToken>, u32), RunnerError> {
    if messages.is_empty() {
        return Err(unavailable("the request has no messages"));
    }
    let prompt = model.prompt(messages)?;
    let tokens = model.model.vocab().tokenize(prompt.as_bytes(), true, true);
    let limit = sampling.context_size.min(model.trained_context().max(1));
    let prompt_tokens = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
    if tokens.is_empty() {
        return Err(unavailable("the prompt is empty"));
    }
    if prompt_tokens >= limit {
        return Err(unavailable(format!(
            "the prompt is {prompt_tokens} tokens, but the context of {} holds {limit} \
             (context_size {}, the model was trained for {}): shorten the conversation",
            model.path.display(),
            sampling.context_size,
            model.trained_context()
        )));
    }
    Ok((tokens, limit))
}

/// What sampling hands on as it goes: new text (whole characters), or that one more token
/// was generated (`generated` so far, the text included).
enum Sampled {
    Text(String),
    Token { generated: u32 },
}

/// A sampled answer.
struct Answer {
    text: String,
    generated: u32,
    finish: FinishReason,
}

/// One generation's llama.cpp context and batch, and the next position in the context.
struct Decoding<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    batch_size: usize,
    position: i32,
    /// How many tokens the context holds: prompt and answer together never count more.
    context_tokens: u32,
}

impl<'m> Decoding<'m> {
    /// A context that holds this prompt and its longest answer, no more: a smaller KV cache
    /// is faster to allocate.
    fn start(
        model: &'m LoadedModel,
        sampling: &Sampling,
        prompt_tokens: u32,
        limit: u32,
    ) -> Result<Self, RunnerError> {
        let wanted = prompt_tokens.saturating_add(sampling.max_tokens).min(limit);
        let threads = i32::try_from(sampling.threads).unwrap_or(1);
        let batch_size = BATCH.min(wanted as usize);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(wanted))
            .with_n_batch(batch_size as u32)
            .with_n_ubatch(batch_size as u32)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let ctx = model.context(params)?;
        // llama.cpp may round the context up; the limit is what was asked for.
        let context_tokens = wanted.min(ctx.n_ctx());
        Ok(Decoding {
            ctx,
            batch: LlamaBatch::new(batch_size, 1),
            batch_size,
            position: 0,
            context_tokens,
        })
    }

    /// Reads the prompt, in batches; only its last token's logits are needed. `false` when
    /// cancelled.
    fn read_prompt(
        &mut self,
        tokens: &[LlamaToken],
        cancel: &AtomicBool,
    ) -> Result<bool, RunnerError> {
        for chunk in tokens.chunks(self.batch_size) {
            if cancel.load(Ordering::Relaxed) {
                return Ok(false);
            }
            self.batch.clear();
            for token in chunk {
                let last = self.position as usize == tokens.len() - 1;
                self.batch
                    .add(*token, self.position, &[0], last)
                    .map_err(|e| process(format!("batch: {e}")))?;
                self.position += 1;
            }
            self.ctx.decode(&mut self.batch).map_err(decode_error)?;
        }
        Ok(true)
    }

    /// Feeds the token just sampled back in, so the next one follows it.
    fn feed(&mut self, token: LlamaToken) -> Result<(), RunnerError> {
        self.batch.clear();
        self.batch
            .add(token, self.position, &[0], true)
            .map_err(|e| process(format!("batch: {e}")))?;
        self.position += 1;
        self.ctx.decode(&mut self.batch).map_err(decode_error)
    }

    /// Samples the answer token by token, handing text and each token on to `send` as they
    /// come (and counting every token sampled in `generated_total`), until the end of
    /// generation, `max_tokens` or a full context. `None` when cancelled or when `send` says
    /// nobody reads any more.
    fn answer(
        &mut self,
        model: &LoadedModel,
        sampler: &mut Samplers,
        max_tokens: u32,
        cancel: &AtomicBool,
        generated_total: &AtomicU64,
        mut send: impl FnMut(Sampled) -> bool,
    ) -> Result<Option<Answer>, RunnerError> {
        let vocab = model.model.vocab();
        let mut text = String::new();
        let mut pieces = Utf8Pieces::default();
        let mut generated: u32 = 0;
        let mut piece = Vec::with_capacity(16);
        let finish = loop {
            if cancel.load(Ordering::Relaxed) {
                return Ok(None);
            }
            // A token sampled now would need slot `position`: with the context full, the
            // answer ends here, so prompt and answer never count more than the context holds.
            if self.position as u32 >= self.context_tokens {
                break FinishReason::Length;
            }
            let token = sampler.sample(&self.ctx, self.batch.n_tokens() - 1);
            generated += 1;
            generated_total.fetch_add(1, Ordering::Relaxed);
            if vocab.is_eog(token) {
                break FinishReason::Stop;
            }
            piece.clear();
            vocab.token_to_piece_into(token, &mut piece, false, None);
            let new_text = pieces.push(&piece);
            if !new_text.is_empty() {
                text.push_str(&new_text);
                if !send(Sampled::Text(new_text)) {
                    return Ok(None);
                }
            }
            if !send(Sampled::Token { generated }) {
                return Ok(None);
            }
            if generated >= max_tokens {
                break FinishReason::Length;
            }
            self.feed(token)?;
        };
        let rest = pieces.finish();
        if !rest.is_empty() {
            text.push_str(&rest);
            if !send(Sampled::Text(rest)) {
                return Ok(None);
            }
        }
        Ok(Some(Answer {
            text,
            generated,
            finish,
        }))
    }
}

fn process(message: String) -> RunnerError {
    RunnerError::Process {
        message,
        exit_code: None,
    }
}

fn decode_error(e: DecodeError) -> RunnerError {
    match e {
        DecodeError::NoKvCacheSlot => unavailable("llama.cpp's context is full (no KV cache slot)"),
        other => process(format!("llama.cpp decode failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_split_across_tokens_come_out_whole() {
        let mut p = Utf8Pieces::default();
        let euro = "€".as_bytes();
        assert_eq!(p.push(b"a"), "a");
        assert_eq!(p.push(&euro[..1]), "");
        assert_eq!(p.push(&euro[1..]), "€");
        assert_eq!(p.push(&[0xff, b'b']), "\u{fffd}b");
        assert_eq!(p.push(&euro[..2]), "");
        assert_eq!(p.finish(), "\u{fffd}");
        assert_eq!(p.finish(), "");
    }

    #[test]
    fn seeds_wrap_below_the_random_seed() {
        let mut s = Sampling {
            threads: 1,
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: Some(7),
            max_tokens: 1,
            context_size: 64,
            grammar: None,
            engine: ConstraintEngine::Gbnf,
        };
        assert_eq!(s.seed(), 7);
        s.seed = Some(u64::from(u32::MAX));
        assert_eq!(s.seed(), 0);
        s.seed = None;
        assert_eq!(s.seed(), u32::MAX);
    }
}
