//! webhook end-to-end tests (real TLS, apiserver-like client).
