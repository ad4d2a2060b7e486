//! The sections of BENCHMARKS.md measured by runs of their own (the real-model section, the
//! surfaces section): their markers, and how a run replaces its section or keeps the others
//! (the full peers run rewrites everything else).

/// Where the section starts and ends in BENCHMARKS.md, so that each run (this one and the full
/// `peers` run) replaces only its own part.
pub const BEGIN: &str = "<!-- real-model:begin -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- real-model:end -->";

/// Where the surfaces section (`cargo xtask bench-peers --surfaces`) starts and ends.
pub const SURFACES_BEGIN: &str = "<!-- surfaces:begin -->";
/// See [`SURFACES_BEGIN`].
pub const SURFACES_END: &str = "<!-- surfaces:end -->";

/// `old` with its real-model section replaced by `section` (appended when it had none).
pub fn splice(old: &str, section: &str) -> String {
    splice_between(old, section, (BEGIN, END))
}

/// `old` with the section between the markers `(begin, end)` replaced by `section`
/// (appended when it had none).
pub fn splice_between(old: &str, section: &str, (begin, end): (&str, &str)) -> String {
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

/// The real-model section of `old`, to keep when the full run rewrites the rest.
pub fn section_of(old: &str) -> Option<&str> {
    section_between(old, (BEGIN, END))
}

/// The section of `old` between the markers `(begin, end)`.
pub fn section_between<'a>(old: &'a str, (begin, end): (&str, &str)) -> Option<&'a str> {
    let b = old.find(begin)?;
    let e = old.find(end)?;
    (b < e).then(|| &old[b..e + end.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

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
            section_of(&new),
            Some(&*format!("{BEGIN}\nnew figures\n{END}"))
        );
    }

    #[test]
    fn splice_appends_when_there_is_no_section() {
        let new = splice("# B\n\nabove\n", &format!("{BEGIN}\nx\n{END}\n"));
        assert_eq!(new, format!("# B\n\nabove\n\n{BEGIN}\nx\n{END}\n"));
        assert_eq!(section_of("# B"), None);
    }
}
