//! The sections of BENCHMARKS.md measured on their own (the real-model, Python, surfaces and
//! local-speed ones): their markers, and how a run replaces its section or keeps it (the full
//! peers run, which rewrites everything else).

/// Where a section starts and ends in BENCHMARKS.md, so that each run (its own and the full
/// `peers` run) replaces only its own part.
#[derive(Debug, Clone, Copy)]
pub struct Markers {
    pub begin: &'static str,
    pub end: &'static str,
}

/// `cargo xtask bench-peers --real-model`.
pub const REAL_MODEL: Markers = Markers {
    begin: "<!-- real-model:begin -->",
    end: "<!-- real-model:end -->",
};

/// `cargo xtask bench-peers --python`.
pub const PYTHON: Markers = Markers {
    begin: "<!-- python:begin -->",
    end: "<!-- python:end -->",
};

/// `cargo xtask bench-peers --surfaces` (and the full peers run, which measures it too).
pub const SURFACES: Markers = Markers {
    begin: "<!-- surfaces:begin -->",
    end: "<!-- surfaces:end -->",
};

/// `cargo xtask bench-peers --local-speed`.
pub const LOCAL_SPEED: Markers = Markers {
    begin: "<!-- local-speed:begin -->",
    end: "<!-- local-speed:end -->",
};

impl Markers {
    /// `old` with this section replaced by `section` (appended when it had none).
    pub fn splice(&self, old: &str, section: &str) -> String {
        let (begin, end) = (self.begin, self.end);
        match (old.find(begin), old.find(end)) {
            (Some(b), Some(e)) if b < e => {
                let rest = &old[e + end.len()..];
                format!(
                    "{}{}{}",
                    &old[..b],
                    section.trim_end(),
                    rest.strip_prefix('\n')
                        .map_or(rest.to_string(), |r| format!("\n{r}"))
                )
            }
            _ => {
                let mut s = old.trim_end().to_string();
                if !s.is_empty() {
                    s.push_str("\n\n");
                }
                s.push_str(section);
                s
            }
        }
    }

    /// `old` with this section replaced by `section`; when it had none, the section goes right
    /// after the section `after` (appended when that is missing too).
    pub fn splice_after(&self, old: &str, section: &str, after: &Markers) -> String {
        if self.section_of(old).is_some() {
            return self.splice(old, section);
        }
        match old
            .find(after.end)
            .filter(|_| after.section_of(old).is_some())
        {
            Some(e) => {
                let (head, rest) = old.split_at(e + after.end.len());
                let rest = if rest.is_empty() { "\n" } else { rest };
                format!("{head}\n\n{}{rest}", section.trim_end())
            }
            None => self.splice(old, section),
        }
    }

    /// This section of `old`, to keep when the full run rewrites the rest.
    pub fn section_of<'a>(&self, old: &'a str) -> Option<&'a str> {
        let b = old.find(self.begin)?;
        let e = old.find(self.end)?;
        (b < e).then(|| &old[b..e + self.end.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = REAL_MODEL.begin;
    const END: &str = REAL_MODEL.end;

    fn splice(old: &str, section: &str) -> String {
        REAL_MODEL.splice(old, section)
    }

    #[test]
    fn splice_replaces_only_the_section() {
        let old = format!("# B\n\nabove\n\n{BEGIN}\nold figures\n{END}\n\nbelow\n");
        let new = splice(&old, &format!("{BEGIN}\nnew figures\n{END}\n"));
        assert!(
            new.contains("new figures") && !new.contains("old figures"),
            "{new}"
        );
        assert!(
            new.starts_with("# B\n\nabove\n\n") && new.ends_with("\nbelow\n"),
            "{new}"
        );
        assert_eq!(
            REAL_MODEL.section_of(&new),
            Some(&*format!("{BEGIN}\nnew figures\n{END}"))
        );
    }

    #[test]
    fn each_section_is_replaced_alone() {
        let python = |x: &str| format!("{}\n{x}\n{}\n", PYTHON.begin, PYTHON.end);
        let real = format!("{BEGIN}\nreal\n{END}\n");
        let doc = PYTHON.splice(&splice("# B\n", &real), &python("py 1"));
        let doc = PYTHON.splice(&doc, &python("py 2"));
        assert_eq!(REAL_MODEL.section_of(&doc), Some(real.trim_end()));
        assert_eq!(PYTHON.section_of(&doc), Some(python("py 2").trim_end()));
        assert!(!doc.contains("py 1"), "{doc}");
    }

    #[test]
    fn a_new_section_goes_after_the_one_named() {
        let doc = format!("# B\n\n{BEGIN}\nreal\n{END}\n\n## Python\n");
        let section = |x: &str| format!("{}\n{x}\n{}\n", LOCAL_SPEED.begin, LOCAL_SPEED.end);
        let first = LOCAL_SPEED.splice_after(&doc, &section("speed 1"), &REAL_MODEL);
        assert_eq!(
            first,
            format!(
                "# B\n\n{BEGIN}\nreal\n{END}\n\n{}\nspeed 1\n{}\n\n## Python\n",
                LOCAL_SPEED.begin, LOCAL_SPEED.end
            )
        );
        let second = LOCAL_SPEED.splice_after(&first, &section("speed 2"), &REAL_MODEL);
        assert_eq!(second, first.replace("speed 1", "speed 2"));
        let appended = LOCAL_SPEED.splice_after("# B\n", &section("x"), &REAL_MODEL);
        assert!(appended.ends_with(&section("x")), "{appended}");
    }

    #[test]
    fn splice_appends_when_there_is_no_section() {
        let new = splice("# B\n\nabove\n", &format!("{BEGIN}\nx\n{END}\n"));
        assert_eq!(new, format!("# B\n\nabove\n\n{BEGIN}\nx\n{END}\n"));
        assert_eq!(REAL_MODEL.section_of("# B"), None);
    }
}
