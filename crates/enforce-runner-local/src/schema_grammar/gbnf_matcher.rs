//! A tiny GBNF matcher for the grammars this module writes, so the tests check what a
//! grammar accepts, not how it is spelled.

use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Node {
    Lit(Vec<char>),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Rule(String),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Repeat(Box<Node>, usize, Option<usize>),
}

pub struct Grammar(HashMap<String, Node>);

impl Grammar {
    pub fn parse(text: &str) -> Grammar {
        let mut rules = HashMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (name, body) = line.split_once("::=").expect("a rule");
            let chars: Vec<char> = body.chars().collect();
            let mut p = Parser { s: &chars, i: 0 };
            let node = p.alt();
            p.ws();
            assert_eq!(p.i, chars.len(), "unparsed rest in {line}");
            rules.insert(name.trim().to_string(), node);
        }
        Grammar(rules)
    }

    pub fn accepts(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        self.ends(&Node::Rule("root".into()), &chars, 0, 0)
            .contains(&chars.len())
    }

    /// Every position where `node` can end when started at `at`.
    fn ends(&self, node: &Node, s: &[char], at: usize, depth: usize) -> Vec<usize> {
        assert!(depth < 400, "grammar recursion too deep");
        let mut out = match node {
            Node::Lit(l) => {
                if s[at..].starts_with(l) {
                    vec![at + l.len()]
                } else {
                    vec![]
                }
            }
            Node::Class { negated, ranges } => match s.get(at) {
                Some(c) if ranges.iter().any(|(a, b)| a <= c && c <= b) != *negated => {
                    vec![at + 1]
                }
                _ => vec![],
            },
            Node::Rule(name) => {
                let rule = self.0.get(name).unwrap_or_else(|| panic!("no rule {name}"));
                self.ends(rule, s, at, depth + 1)
            }
            Node::Seq(items) => {
                let mut here = vec![at];
                for item in items {
                    let mut next = Vec::new();
                    for p in here {
                        next.extend(self.ends(item, s, p, depth + 1));
                    }
                    next.sort_unstable();
                    next.dedup();
                    here = next;
                }
                here
            }
            Node::Alt(options) => options
                .iter()
                .flat_map(|o| self.ends(o, s, at, depth + 1))
                .collect(),
            Node::Repeat(inner, min, max) => {
                let mut all = Vec::new();
                let mut here = vec![at];
                let mut n = 0;
                loop {
                    if n >= *min {
                        all.extend(here.iter().copied());
                    }
                    if max.is_some_and(|m| n >= m) || here.is_empty() {
                        break;
                    }
                    let mut next: Vec<usize> = here
                        .iter()
                        .flat_map(|p| self.ends(inner, s, *p, depth + 1))
                        .collect();
                    next.sort_unstable();
                    next.dedup();
                    if next == here && n >= *min {
                        break;
                    }
                    here = next;
                    n += 1;
                    if n > s.len() + 2 {
                        break;
                    }
                }
                all
            }
        };
        out.sort_unstable();
        out.dedup();
        out
    }
}

struct Parser<'a> {
    s: &'a [char],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_whitespace()) {
            self.i += 1;
        }
    }
    fn alt(&mut self) -> Node {
        let mut options = vec![self.seq()];
        loop {
            self.ws();
            if self.s.get(self.i) == Some(&'|') {
                self.i += 1;
                options.push(self.seq());
            } else {
                return Node::Alt(options);
            }
        }
    }
    fn seq(&mut self) -> Node {
        let mut items = Vec::new();
        loop {
            self.ws();
            match self.s.get(self.i) {
                None | Some('|') | Some(')') => return Node::Seq(items),
                _ => {
                    let atom = self.atom();
                    items.push(self.postfix(atom));
                }
            }
        }
    }
    fn postfix(&mut self, atom: Node) -> Node {
        match self.s.get(self.i) {
            Some('?') => {
                self.i += 1;
                Node::Repeat(Box::new(atom), 0, Some(1))
            }
            Some('*') => {
                self.i += 1;
                Node::Repeat(Box::new(atom), 0, None)
            }
            Some('+') => {
                self.i += 1;
                Node::Repeat(Box::new(atom), 1, None)
            }
            Some('{') => {
                self.i += 1;
                let mut text = String::new();
                while self.s[self.i] != '}' {
                    text.push(self.s[self.i]);
                    self.i += 1;
                }
                self.i += 1;
                let (min, max) = match text.split_once(',') {
                    Some((a, "")) => (a.parse().unwrap(), None),
                    Some((a, b)) => (a.parse().unwrap(), Some(b.parse().unwrap())),
                    None => (text.parse().unwrap(), Some(text.parse().unwrap())),
                };
                Node::Repeat(Box::new(atom), min, max)
            }
            _ => atom,
        }
    }
    fn escaped(&mut self) -> char {
        let c = self.s[self.i];
        self.i += 1;
        if c != '\\' {
            return c;
        }
        let e = self.s[self.i];
        self.i += 1;
        match e {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'x' | 'u' => {
                let len = if e == 'x' { 2 } else { 4 };
                let hex: String = self.s[self.i..self.i + len].iter().collect();
                self.i += len;
                char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap()
            }
            other => other,
        }
    }
    fn atom(&mut self) -> Node {
        match self.s[self.i] {
            '"' => {
                self.i += 1;
                let mut lit = Vec::new();
                while self.s[self.i] != '"' {
                    lit.push(self.escaped());
                }
                self.i += 1;
                Node::Lit(lit)
            }
            '[' => {
                self.i += 1;
                let negated = self.s[self.i] == '^';
                if negated {
                    self.i += 1;
                }
                let mut ranges = Vec::new();
                while self.s[self.i] != ']' {
                    let a = self.escaped();
                    if self.s[self.i] == '-' && self.s[self.i + 1] != ']' {
                        self.i += 1;
                        let b = self.escaped();
                        ranges.push((a, b));
                    } else {
                        ranges.push((a, a));
                    }
                }
                self.i += 1;
                Node::Class { negated, ranges }
            }
            '(' => {
                self.i += 1;
                let inner = self.alt();
                self.ws();
                assert_eq!(self.s[self.i], ')');
                self.i += 1;
                inner
            }
            _ => {
                let start = self.i;
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '-')
                {
                    self.i += 1;
                }
                assert!(self.i > start, "unexpected {:?}", self.s[self.i]);
                Node::Rule(self.s[start..self.i].iter().collect())
            }
        }
    }
}
