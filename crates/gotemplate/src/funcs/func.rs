//! A row of the function table, as an entry of Go's `template.FuncMap` is: a name, the parameters (the
//! Go function's signature) and the implementation.

use std::fmt;

use super::super::state::{Exec, P, R};
use super::super::value::Val;

/// An implementation: from the arguments, already evaluated and converted to the parameter types (Go's
/// `evalCall`), to the result.
pub(crate) type Apply = for<'a, 'l> fn(&mut Exec<'a, 'l>, Vec<Val<'a>>) -> R<Val<'a>>;

/// How a function is called.
#[derive(Clone, Copy)]
pub(crate) enum Call {
    /// With its arguments evaluated and converted to the parameter types.
    Args(Apply),
    /// Go's `and` (`until: false`) and `or` (`until: true`): the arguments are evaluated one at a time
    /// and the first whose truth is `until` is the result, else the last (Go's `evalCall` special-cases
    /// them the same way).
    ShortCircuit { until: bool },
}

/// A function: its name, its parameters (fixed, then an optional variadic tail) and how it is called.
pub(crate) struct Func {
    pub name: &'static str,
    pub fixed: &'static [P],
    pub variadic: Option<P>,
    pub call: Call,
}

impl Func {
    /// A function whose arguments are all evaluated before it is applied.
    pub const fn new(
        name: &'static str,
        fixed: &'static [P],
        variadic: Option<P>,
        apply: Apply,
    ) -> Func {
        Func {
            name,
            fixed,
            variadic,
            call: Call::Args(apply),
        }
    }

    /// Go's `and` or `or`: any number of `reflect.Value` arguments, at least one.
    pub const fn short_circuit(name: &'static str, until: bool) -> Func {
        Func {
            name,
            fixed: &[P::Raw],
            variadic: Some(P::Raw),
            call: Call::ShortCircuit { until },
        }
    }
}

/// The quoted name only: a parsed template's tree prints `Func("printf")`, as when it held the name.
impl fmt::Debug for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.name, f)
    }
}
