//! Network-namespace test hosts: create, run commands inside, destroy (owned by the iptables engineers).
