//! The evaluator's tests, by concept; expected outputs are Go's for the same text and data.

mod builtins;
mod control;
mod fields;
mod istio;
mod limits;
mod printing;
mod properties;
mod sprig;
mod support;
mod syntax;
