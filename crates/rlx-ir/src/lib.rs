//! rlx-ir
