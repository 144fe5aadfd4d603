//! How a front end's error reaches the terminal: its message, then each cause whose text the message
//! before it does not already hold.
//!
//! The library's errors put their cause into their own message (`"{file}: key {key}: {source}"`) and
//! keep it as `source` for callers that walk the chain; printing the chain as anyhow's `Debug` does
//! would say the same thing twice ("Caused by: ...").

/// The text printed for `e`: `Error: ` and its message, then one `caused by:` line per cause the
/// messages so far do not contain.
pub fn error_report(e: &anyhow::Error) -> String {
    let mut out = format!("Error: {e}");
    let mut shown = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !shown.contains(&text) {
            out.push_str("\n  caused by: ");
            out.push_str(&text);
        }
        shown = text;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("in.yaml: key templates.bad: {source}")]
    struct Repeats {
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("reading the configuration")]
    struct Hides {
        source: std::io::Error,
    }

    fn io(text: &str) -> std::io::Error {
        std::io::Error::other(text.to_string())
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e = anyhow::Error::new(Repeats {
            source: io("line 1: unrecognized character"),
        });
        assert_eq!(
            error_report(&e),
            "Error: in.yaml: key templates.bad: line 1: unrecognized character"
        );
    }

    #[test]
    fn a_cause_the_message_leaves_out_is_printed() {
        let e = anyhow::Error::new(Hides {
            source: io("no such file"),
        })
        .context("kube-inject");
        assert_eq!(
            error_report(&e),
            "Error: kube-inject\n  caused by: reading the configuration\n  caused by: no such file"
        );
    }
}
