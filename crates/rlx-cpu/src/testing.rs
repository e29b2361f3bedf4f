//! Helpers for differential tests.
