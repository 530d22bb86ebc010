"""The peers' own test suites, run against this library (see peer_adapters)."""
