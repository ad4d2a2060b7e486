//! Turning a conversation into the one prompt text a CLI or command reads on stdin.

use enforce_core::{Message, Role};

/// A conversation split for a prompt-only runner: the system instructions and the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptText {
    /// The system messages joined by blank lines, if any.
    pub system: Option<String>,
    /// The rest: a single user message as it is, a longer conversation as a transcript.
    pub prompt: String,
}

/// Splits `messages` into system instructions and one prompt text.
///
/// A single user message is sent unchanged. A longer conversation (earlier turns, or a stateless
/// follow-up with the previous answer and the feedback) becomes a transcript with `User:` and
/// `Assistant:` headings, ending with the last message.
///
/// ```
/// use enforce_core::Message;
/// use enforce_runner::render_prompt;
///
/// let p = render_prompt(&[Message::system("Be brief."), Message::user("Hi")]);
/// assert_eq!(p.system.as_deref(), Some("Be brief."));
/// assert_eq!(p.prompt, "Hi");
/// ```
pub fn render_prompt(messages: &[Message]) -> PromptText {
    let system: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .collect();
    let turns: Vec<&Message> = messages.iter().filter(|m| m.role != Role::System).collect();
    let prompt = match turns.as_slice() {
        [] => String::new(),
        [only] if only.role == Role::User => only.content.clone(),
        _ => {
            let mut out = String::new();
            for (i, m) in turns.iter().enumerate() {
                if i > 0 {
                    out.push_str("\n\n");
                }
                out.push_str(match m.role {
                    Role::Assistant => "Assistant:\n",
                    Role::Tool => "Tool result:\n",
                    Role::User | Role::System => "User:\n",
                });
                out.push_str(&m.content);
                // A prompt-only runner has no tools of its own to match: the calls are history.
                for call in &m.tool_calls {
                    out.push_str(&format!(
                        "\n[called tool {} with arguments {}]",
                        call.name, call.arguments
                    ));
                }
            }
            out
        }
    };
    PromptText {
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        prompt,
    }
}

/// The prompt with the system instructions in front, for a runner that has no separate channel
/// for them.
pub(crate) fn inline_system(prompt: PromptText) -> String {
    match prompt.system {
        Some(system) if !prompt.prompt.is_empty() => format!("{system}\n\n{}", prompt.prompt),
        Some(system) => system,
        None => prompt.prompt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversation_becomes_transcript() {
        let p = render_prompt(&[
            Message::user("Q"),
            Message::assistant("A"),
            Message::user("Fix it"),
        ]);
        assert_eq!(p.system, None);
        assert_eq!(p.prompt, "User:\nQ\n\nAssistant:\nA\n\nUser:\nFix it");
    }

    #[test]
    fn system_is_inlined_when_asked() {
        let p = render_prompt(&[Message::system("S"), Message::user("Q")]);
        assert_eq!(inline_system(p), "S\n\nQ");
    }
}
