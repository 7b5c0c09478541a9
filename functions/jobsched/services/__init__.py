"""Use cases: each takes plain values and a clock, talks to the store, and returns domain objects."""
