//! The bounds of parsing and evaluation: [`Limits`] for one evaluation, the work unit of a step and the
//! parser's nesting bound (see the module documentation of `gotemplate`, "Bounds").

/// The work units one evaluation step costs (a node, a command, a call, a variable, a field, a list
/// element or map entry visited); a byte read or written costs one.
pub const WORK_PER_STEP: usize = 16;

/// The default budget of [`Limits::max_work`].
pub const DEFAULT_MAX_WORK: usize = 32 << 20;

/// Deepest nesting of control structures and parenthesised pipelines
/// [`Template::parse`](super::Template::parse) accepts.
pub const MAX_PARSE_DEPTH: usize = 100;

/// Bounds on one evaluation; a template that crosses one stops with
/// [`ExecError::Limit`](super::ExecError::Limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of control structures during evaluation and of data walked by printing, `toYaml`,
    /// `toJson` and `fromJSON` (default 64).
    pub max_depth: usize,
    /// Total `range` iterations over the whole evaluation, nested ranges included (default 100 000).
    pub max_iterations: usize,
    /// Bytes of output, and of every intermediate string (default 4 MiB).
    pub max_output_bytes: usize,
    /// Work units (see the `gotemplate` module documentation, "Bounds"): one per byte a primitive reads
    /// or writes, [`WORK_PER_STEP`] per evaluation step (default [`DEFAULT_MAX_WORK`]).
    pub max_work: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 64,
            max_iterations: 100_000,
            max_output_bytes: 4 << 20,
            max_work: DEFAULT_MAX_WORK,
        }
    }
}
