//! The errors of the public face: [`ParseError`] when a text is loaded, [`ExecError`] when it is
//! evaluated (the evaluator's internal error becomes one with the template's name and line).

/// A template text was refused when it was loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The text is not valid Go template syntax (the message is Go's wording where Go has one).
    #[error("template {template:?}: line {line}: {message}")]
    Syntax {
        /// The template's name.
        template: String,
        /// 1-based line of the offending construct.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A Go template action outside the supported subset (`define`, `template`, `block`).
    #[error("template {template:?}: line {line}: unsupported action {action:?}")]
    UnsupportedAction {
        /// The template's name.
        template: String,
        /// 1-based line of the action.
        line: usize,
        /// The action keyword.
        action: String,
    },
    /// A function that is not in the supported subset (Go would call it, or fail with "not defined").
    #[error("template {template:?}: line {line}: unsupported function {function:?}")]
    UnsupportedFunction {
        /// The template's name.
        template: String,
        /// 1-based line of the call.
        line: usize,
        /// The function name.
        function: String,
    },
    /// Control structures or parentheses nested deeper than
    /// [`MAX_PARSE_DEPTH`](super::limits::MAX_PARSE_DEPTH).
    #[error("template {template:?}: line {line}: nesting deeper than {limit}")]
    TooDeep {
        /// The template's name.
        template: String,
        /// 1-based line where the bound was crossed.
        line: usize,
        /// The bound.
        limit: usize,
    },
}

/// Evaluation of a parsed template failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// An error Go's `text/template` also raises (the message is Go's wording where it matters).
    #[error("template {template:?}: line {line}: {message}")]
    Eval {
        /// The template's name.
        template: String,
        /// 1-based line of the action.
        line: usize,
        /// What failed.
        message: String,
    },
    /// A value or operation whose Go result this evaluator does not reproduce exactly.
    #[error("template {template:?}: line {line}: unsupported: {message}")]
    Unsupported {
        /// The template's name.
        template: String,
        /// 1-based line of the action.
        line: usize,
        /// What is not supported.
        message: String,
    },
    /// A bound of [`Limits`](super::limits::Limits) was exceeded.
    #[error("template {template:?}: line {line}: {what} limit {limit} exceeded")]
    Limit {
        /// The template's name.
        template: String,
        /// 1-based line of the action that crossed the bound.
        line: usize,
        /// Which bound: `depth`, `iterations`, `output bytes` or `work`.
        what: &'static str,
        /// The bound's value.
        limit: usize,
    },
    /// sprig's `fail` was called.
    #[error("template {template:?}: line {line}: fail: {message}")]
    Fail {
        /// The template's name.
        template: String,
        /// 1-based line of the call.
        line: usize,
        /// The message given to `fail`.
        message: String,
    },
}
