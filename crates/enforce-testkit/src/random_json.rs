//! Random JSON bodies, for tests that hold a fast reading of a body to a full one: objects
//! whose keys come from a given list (so some repeat), values mostly of the shape the caller
//! gives for a key and sometimes anything, and every body also cut and altered along its
//! length. The same bodies on every run.
//!
//! ```
//! use enforce_testkit::random_json::{variants, RandomJson};
//!
//! let mut random = RandomJson::new(7);
//! let body = random.object(0, &["a", "b"], &mut |random, depth, _key| random.any(depth));
//! assert!(body.starts_with('{'));
//! assert!(variants(&body).len() > 1);
//! ```

/// Values of every JSON kind: escapes, numbers that are and are not counts, empty containers.
pub const VALUES: [&str; 28] = [
    "null",
    "true",
    "false",
    "0",
    "-1",
    "12",
    "1.5e3",
    "-0.25E-2",
    "\"\"",
    "\"stop\"",
    "\"caf\\u00e9 \\ud83d\\ude00\"",
    "\"a\\\"b\\\\c\\/\"",
    "\"tab\\tnew\\nline\"",
    "[]",
    "{}",
    "[1,{\"a\":[null,\"\"]}]",
    "\"chat.completion\"",
    "\"error\"",
    "\"user\"",
    "\"assistant\"",
    "\"system\"",
    "\"tool\"",
    "\"é\"",
    "18446744073709551615",
    "7",
    "\"length\"",
    "\"{\\\"a\\\": 1}\"",
    "[\"x\"]",
];

/// A deterministic generator (xorshift) of JSON text.
pub struct RandomJson {
    state: u64,
}

/// How a caller shapes the value of a key: `(generator, depth, key) -> JSON text`.
pub type Shape<'s> = dyn FnMut(&mut RandomJson, usize, &str) -> String + 's;

impl RandomJson {
    /// A generator from `seed` (0 counts as 1: xorshift never leaves 0).
    pub fn new(seed: u64) -> Self {
        RandomJson { state: seed.max(1) }
    }

    /// A number below `bound` (which must be positive).
    pub fn below(&mut self, bound: usize) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        (self.state % bound as u64) as usize
    }

    /// One of `items`.
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// An object of up to four entries, keys drawn from `keys`, values from `shape`.
    pub fn object(&mut self, depth: usize, keys: &[&str], shape: &mut Shape<'_>) -> String {
        let entries: Vec<String> = (0..self.below(5))
            .map(|_| {
                let key = self.pick(keys);
                format!("\"{key}\" : {}", shape(self, depth + 1, key))
            })
            .collect();
        format!("{{{}}}", entries.join(", "))
    }

    /// An array of up to `most - 1` items from `item`.
    pub fn array(
        &mut self,
        most: usize,
        item: &mut dyn FnMut(&mut RandomJson) -> String,
    ) -> String {
        let items: Vec<String> = (0..self.below(most)).map(|_| item(self)).collect();
        format!("[{}]", items.join(","))
    }

    /// Any value: mostly one of [`VALUES`], sometimes an array or an object of them.
    pub fn any(&mut self, depth: usize) -> String {
        match self.below(4) {
            _ if depth > 4 => self.pick(&VALUES).to_string(),
            0 => self.array(3, &mut |random| random.any(depth + 1)),
            1 => self.object(depth, &["a", "type", "text"], &mut |random, depth, _| {
                random.any(depth)
            }),
            _ => self.pick(&VALUES).to_string(),
        }
    }
}

/// `body` whole, then cut at and with a character removed at every seventh character.
pub fn variants(body: &str) -> Vec<String> {
    let mut variants = vec![body.to_string()];
    let at: Vec<usize> = body.char_indices().map(|(at, _)| at).collect();
    for &at in at.iter().step_by(7) {
        variants.push(body[..at].to_string());
        let mut altered = body.to_string();
        altered.remove(at);
        variants.push(altered);
    }
    variants
}
