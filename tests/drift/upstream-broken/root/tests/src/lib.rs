//! Tests of the patched tree.
