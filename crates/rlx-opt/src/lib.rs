//! rlx-opt
