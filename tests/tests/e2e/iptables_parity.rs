//! Parity with Istio golden files: the kernel state from our --dry-run equals that from the goldens.
