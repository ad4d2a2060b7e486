//! The real-model section of BENCHMARKS.md: its markers, and how a run replaces it (the
//! real-model run) or keeps it (the full peers run, which rewrites everything else).

/// Where the section starts and ends in BENCHMARKS.md, so that each run (this one and the full
/// `peers` run) replaces only its own part.
pub const BEGIN: &str = "<!-- real-model:begin -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- real-model:end -->";

/// `old` with its real-model section replaced by `section` (appended when it had none).
pub fn splice(old: &str, section: &str) -> String {
    match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            let rest = &old[e + END.len()..];
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
    let b = old.find(BEGIN)?;
    let e = old.find(END)?;
    (b < e).then(|| &old[b..e + END.len()])
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
