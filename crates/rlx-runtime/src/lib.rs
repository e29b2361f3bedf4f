//! rlx-runtime
