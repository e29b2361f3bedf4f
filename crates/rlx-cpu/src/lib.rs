//! rlx-cpu
