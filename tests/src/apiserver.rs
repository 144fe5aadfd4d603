//! A client that behaves like the kube-apiserver calling a webhook (owned by the webhook engineer).
