//! The functions, one table per origin as Go's `template.FuncMap`: Go's built-ins (`text/template`
//! `funcs.go`), the sprig v3 functions of the subset and Istio's `InjectionFuncmap` entries (Istio's
//! `template.go`), which replace sprig's of the same name. A row holds a function's name, parameters and
//! implementation; adding a function is adding a row to its origin's table and its implementation.

mod builtins;
mod func;
mod istio;
mod lookup;
mod shared;
mod sprig;

pub(crate) use func::{Call, Func};
pub(crate) use lookup::lookup;
