//! The parts of a chat completion body the runner reads ([`CompletionBody`], read by serde),
//! and the same read in one pass over the bytes ([`read`]) for the shape nearly every server
//! sends (text or null content, no tool calls, no error). serde's reading went through a
//! visitor per object and a call per key: the largest piece of the proxy's own work per
//! request, and a good part of the code it runs through. Anything else (tool calls, content
//! parts, an error, a repeated or escaped key, a value of another type, anything serde would
//! refuse) gives `None`, and serde reads the body as before: this reading is only ever the same
//! answer sooner.

use serde::de::IgnoredAny;
use serde_json::Value;
use std::borrow::Cow;

/// The parts of a chat completion the runner reads, typed: the rest of the body is skipped
/// without being built (a `Value` of the whole body cost the proxy's hot path twice as much).
/// The common shape is read by [`read`] without serde's visitors.
#[derive(serde::Deserialize)]
pub(crate) struct CompletionBody<'a> {
    #[serde(default)]
    pub error: Option<serde::de::IgnoredAny>,
    #[serde(default, borrow)]
    pub object: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    pub choices: Option<Vec<ChoiceBody<'a>>>,
    #[serde(default)]
    pub usage: Option<UsageBody>,
}

#[derive(serde::Deserialize)]
pub(crate) struct ChoiceBody<'a> {
    #[serde(default, borrow)]
    pub message: Option<MessageBody<'a>>,
    #[serde(default, borrow)]
    pub finish_reason: Option<std::borrow::Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
pub(crate) struct MessageBody<'a> {
    /// Text, or null; content given as parts makes the typed reading fail, and the body is
    /// read as any JSON instead (`openai::parse_completion_value`).
    #[serde(default, borrow)]
    pub content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    pub tool_calls: Option<Value>,
}

#[derive(serde::Deserialize)]
pub(crate) struct UsageBody {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
}

/// `body` read as [`CompletionBody`], or `None` where serde must read it.
pub(crate) fn read(body: &str) -> Option<CompletionBody<'_>> {
    let mut scanner = Scanner {
        text: body,
        bytes: body.as_bytes(),
        at: 0,
    };
    let completion = scanner.completion()?;
    scanner.whitespace();
    (scanner.at == scanner.bytes.len()).then_some(completion)
}

/// The text of a string token (quotes included) with its escapes resolved; a `\\u` escape (and
/// anything unexpected) by serde_json itself, which knows surrogate pairs.
fn unescape(token: &str) -> Option<String> {
    let by_serde = || serde_json::from_str::<String>(token).ok();
    let mut rest = unquoted(token)?;
    let mut text = String::with_capacity(rest.len());
    while let Some(at) = rest.bytes().position(|b| b == b'\\') {
        text.push_str(rest.get(..at)?);
        text.push(match rest.as_bytes().get(at + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'n' => '\n',
            b't' => '\t',
            b'r' => '\r',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            _ => return by_serde(),
        });
        rest = rest.get(at + 2..)?;
    }
    text.push_str(rest);
    Some(text)
}

/// The bytes that end a run of plain string text: a control character, `"` and `\\`.
const SPECIAL: [bool; 256] = {
    let mut special = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        special[byte] = true;
        byte += 1;
    }
    special[b'"' as usize] = true;
    special[b'\\' as usize] = true;
    special
};

/// A string token without its quotes.
fn unquoted(token: &str) -> Option<&str> {
    token.strip_prefix('"')?.strip_suffix('"')
}

/// Nesting this deep goes to serde (whose own limit, 128, is above it).
const MAX_DEPTH: usize = 100;

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Takes `byte` after any whitespace.
    fn take(&mut self, byte: u8) -> Option<()> {
        self.whitespace();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Takes `word` (`true`, `false`, `null`) if it comes next.
    fn literal(&mut self, word: &str) -> Option<()> {
        self.bytes
            .get(self.at..)?
            .starts_with(word.as_bytes())
            .then(|| self.at += word.len())
    }

    /// Takes a `null` if one comes next.
    fn null(&mut self) -> bool {
        self.whitespace();
        self.literal("null").is_some()
    }

    /// `None` for `null`, else what `read` reads.
    fn optional<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.null() {
            Some(None)
        } else {
            read(self).map(Some)
        }
    }

    /// An object: `entry` reads each value, given its key, and must take it whole.
    fn object(&mut self, mut entry: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.take(b'{')?;
        self.whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.whitespace();
            let key = self.plain_string()?;
            self.take(b':')?;
            self.whitespace();
            entry(self, key)?;
            self.whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array: `element` reads each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.take(b'[')?;
        self.whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.whitespace();
            element(self)?;
            self.whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string token, quotes included, and whether it has escapes; `None` for a control
    /// character in it or no closing quote.
    fn string_token(&mut self) -> Option<(&'a str, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at;
        let mut end = start + 1;
        let mut escaped = false;
        loop {
            // Byte by byte: the strings of a completion are mostly keys of a few bytes, where
            // a walk costs less than setting up a word-at-a-time search.
            while !SPECIAL[usize::from(*self.bytes.get(end)?)] {
                end += 1;
            }
            match *self.bytes.get(end)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    end += 2;
                }
                // A control character.
                _ => return None,
            }
        }
        self.at = end + 1;
        Some((self.text.get(start..=end)?, escaped))
    }

    /// A string without escapes (a key), without its quotes.
    fn plain_string(&mut self) -> Option<&'a str> {
        match self.string_token()? {
            (token, false) => unquoted(token),
            (_, true) => None,
        }
    }

    /// A string: borrowed when it has no escapes, else unescaped.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        match self.string_token()? {
            (token, false) => unquoted(token).map(Cow::Borrowed),
            (token, true) => unescape(token).map(Cow::Owned),
        }
    }

    /// A number as JSON writes them; its text.
    fn number(&mut self) -> Option<&'a str> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits()?,
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            self.digits()?;
        }
        self.text.get(start..self.at)
    }

    /// One digit or more.
    fn digits(&mut self) -> Option<()> {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        (self.at > start).then_some(())
    }

    /// A count: an integer that fits a `u64`, written plainly (no sign, fraction or exponent).
    fn count(&mut self) -> Option<u64> {
        self.number()?.parse().ok()
    }

    /// Any value, checked as serde checks the values it ignores.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.whitespace();
        match self.peek()? {
            b'"' => {
                if let (token, true) = self.string_token()? {
                    serde_json::from_str::<IgnoredAny>(token).ok()?;
                }
            }
            b'{' => self.object(|s, _| s.skip(depth + 1))?,
            b'[' => self.array(|s| s.skip(depth + 1))?,
            b't' => self.literal("true")?,
            b'f' => self.literal("false")?,
            b'n' => self.literal("null")?,
            _ => {
                self.number()?;
            }
        }
        Some(())
    }

    fn completion(&mut self) -> Option<CompletionBody<'a>> {
        let mut body = CompletionBody {
            error: None,
            object: None,
            choices: None,
            usage: None,
        };
        let mut seen = [false; 4];
        self.object(|s, key| {
            let field = match key {
                "error" => 0,
                "object" => 1,
                "choices" => 2,
                "usage" => 3,
                _ => return s.skip(1),
            };
            // A field given twice: serde's typed reading refuses it, and its fallback reads.
            if std::mem::replace(&mut seen[field], true) {
                return None;
            }
            match field {
                // An error (and its message) is serde's to read.
                0 => s.null().then_some(())?,
                1 => body.object = s.optional(Self::string)?,
                2 => body.choices = s.optional(Self::choices)?,
                _ => body.usage = s.optional(Self::usage)?,
            }
            Some(())
        })?;
        Some(body)
    }

    fn choices(&mut self) -> Option<Vec<ChoiceBody<'a>>> {
        let mut choices = Vec::with_capacity(1);
        self.array(|s| {
            choices.push(s.choice()?);
            Some(())
        })?;
        Some(choices)
    }

    fn choice(&mut self) -> Option<ChoiceBody<'a>> {
        let mut choice = ChoiceBody {
            message: None,
            finish_reason: None,
        };
        let mut seen = [false; 2];
        self.object(|s, key| {
            let field = match key {
                "message" => 0,
                "finish_reason" => 1,
                _ => return s.skip(2),
            };
            if std::mem::replace(&mut seen[field], true) {
                return None;
            }
            if field == 0 {
                choice.message = s.optional(Self::message)?;
            } else {
                choice.finish_reason = s.optional(Self::string)?;
            }
            Some(())
        })?;
        Some(choice)
    }

    fn message(&mut self) -> Option<MessageBody<'a>> {
        let mut message = MessageBody {
            content: None,
            tool_calls: None,
        };
        let mut seen = [false; 2];
        self.object(|s, key| {
            let field = match key {
                "content" => 0,
                "tool_calls" => 1,
                _ => return s.skip(3),
            };
            if std::mem::replace(&mut seen[field], true) {
                return None;
            }
            if field == 0 {
                // Text or null; parts are serde's to read.
                message.content = s.optional(Self::string)?;
            } else {
                // Tool calls are serde's to read.
                s.null().then_some(())?;
            }
            Some(())
        })?;
        Some(message)
    }

    fn usage(&mut self) -> Option<UsageBody> {
        let mut usage = UsageBody {
            prompt_tokens: None,
            completion_tokens: None,
        };
        let mut seen = [false; 2];
        self.object(|s, key| {
            let field = match key {
                "prompt_tokens" => 0,
                "completion_tokens" => 1,
                _ => return s.skip(2),
            };
            if std::mem::replace(&mut seen[field], true) {
                return None;
            }
            let count = s.optional(Self::count)?;
            if field == 0 {
                usage.prompt_tokens = count;
            } else {
                usage.completion_tokens = count;
            }
            Some(())
        })?;
        Some(usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_testkit::random_json::{variants, RandomJson, VALUES};

    /// What serde's typed reading makes of `body`, as a reply.
    fn serde_reply(body: &str) -> Option<Result<enforce_core::Reply, enforce_core::RunnerError>> {
        serde_json::from_str::<CompletionBody<'_>>(body)
            .ok()
            .map(|typed| typed.into_reply(body))
    }

    /// Where the one-pass reading answers, serde's typed reading answers the same.
    fn agrees(body: &str) -> bool {
        match read(body) {
            Some(read) => {
                let serde = serde_reply(body);
                assert!(serde.is_some(), "read, but serde refuses: {body}");
                assert_eq!(Some(read.into_reply(body)), serde, "{body}");
                true
            }
            None => false,
        }
    }

    /// The shapes servers send are read in one pass: OpenAI's, the benchmark mock's, null
    /// content, escapes, whitespace, extra fields.
    #[test]
    fn the_common_shapes_are_read_in_one_pass() {
        let bodies = [
            r#"{"choices":[{"finish_reason":"stop","index":0,"message":{"content":"{\"name\": \"Ada\", \"age\": 36}","role":"assistant"}}],"created":0,"id":"chatcmpl-mock","model":"mock","object":"chat.completion","usage":{"completion_tokens":12,"prompt_tokens":20,"total_tokens":32}}"#,
            r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\" caf\u00e9 \ud83d\ude00","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":0}},"system_fingerprint":"fp_1"}"#,
            " {\n  \"choices\" : [ { \"message\" : { \"content\" : null , \"tool_calls\" : null } } ] ,\n \"error\": null, \"usage\": null }\n",
            r#"{"choices":[{"message":{"content":"x"},"finish_reason":"length"}],"usage":{}}"#,
            r#"{"choices":[]}"#,
            r#"{"object":"error","message":"bad model"}"#,
            r#"{"choices":[{"message":{"content":"q\" b\\ s\/ \b\f\n\r\t end"}}]}"#,
            r#"{"choices":[{"message":{"content":"q\" \u00e9 \ud83d\ude00 end"}}]}"#,
        ];
        for body in bodies {
            assert!(agrees(body), "not read in one pass: {body}");
        }
    }

    /// What the one pass leaves to serde: tool calls, content parts, an error, repeated or
    /// escaped keys, numbers that are not counts, bad JSON of every kind.
    #[test]
    fn the_rest_is_left_to_serde() {
        let bodies = [
            r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}"#,
            r#"{"error":{"message":"over quota"}}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"{"choices":[{"message":{"content":"a","content":"b"}}]}"#,
            r#"{"ch\u006fices":[]}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":2.5}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":-1}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":18446744073709551616}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"created":01}"#,
            r#"{"choices":[{"message":{"content":"bad \ud800 surrogate"}}]}"#,
            r#"{"choices":[{"message":{"content":"bad \q escape"}}]}"#,
            "{\"choices\":[{\"message\":{\"content\":\"raw \u{1} control\"}}]}",
            r#"{"choices":[{"message":{"content":"x"}}]} trailing"#,
            r#"{"choices":[{"message":{"content":"x"}},]}"#,
            r#"{"choices":[{"message":{"content":"x"}}],}"#,
            r#"{"choices":[{"message":{"content":"x"}}]"#,
            r#"[{"choices":[]}]"#,
            "",
            "nul",
        ];
        for body in bodies {
            assert!(!agrees(body), "read in one pass: {body}");
        }
    }

    /// On bodies built at random from the pieces servers send (and some they should not),
    /// whole and then cut or altered at every position, the one-pass reading answers as serde
    /// does wherever it answers, and answers often.
    #[test]
    fn the_one_pass_reading_is_serdes_wherever_it_answers() {
        const TOP: [&str; 6] = ["choices", "usage", "object", "error", "id", "created"];
        const CHOICE: [&str; 4] = ["message", "finish_reason", "index", "logprobs"];
        const MESSAGE: [&str; 4] = ["content", "tool_calls", "role", "refusal"];
        const USAGE: [&str; 3] = ["prompt_tokens", "completion_tokens", "total_tokens"];
        /// The value of `key`: mostly the shape a server sends there, sometimes anything.
        fn value(random: &mut RandomJson, depth: usize, key: &str) -> String {
            let shaped = depth < 5 && random.below(4) != 0;
            match key {
                "choices" if shaped => random.array(3, &mut |random| {
                    random.object(depth + 1, &CHOICE, &mut value)
                }),
                "message" if shaped => random.object(depth, &MESSAGE, &mut value),
                "usage" if shaped => random.object(depth, &USAGE, &mut value),
                _ if depth > 4 || random.below(3) != 0 => random.pick(&VALUES).to_string(),
                _ if random.below(2) == 0 => {
                    random.array(3, &mut |random| value(random, depth + 1, ""))
                }
                _ => random.object(depth, &TOP, &mut value),
            }
        }
        let mut random = RandomJson::new(0x2545_f491_4f6c_dd1d);
        let mut answered = 0;
        let mut bodies = 0;
        for _ in 0..3000 {
            let body = random.object(0, &TOP, &mut value);
            for variant in variants(&body) {
                bodies += 1;
                answered += usize::from(agrees(&variant));
            }
        }
        // The generator reaches the one-pass reading, not only its refusals.
        assert!(answered > 1000, "{answered} of {bodies} read in one pass");
    }
}
