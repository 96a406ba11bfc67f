"""Tests of the benchmark harness: the relays and their decoders, the targets file."""
