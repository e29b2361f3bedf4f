//! rlx-mem
