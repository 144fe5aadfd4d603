//! netfilter end-to-end tests (real namespaces, real traffic).
