//! rlx
