//! rlx-driver
