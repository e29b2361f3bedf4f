//! The crate's error type: every failure names the device and the sizes involved.

use thiserror::Error;

/// Errors of the memory layer. Messages start lower case and carry the facts (device, sizes).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MemError {
    /// The provider had no memory left, even after cached blocks were released and the request retried.
    #[error(
        "out of memory on {device}: requested {requested} bytes with {in_use} bytes in use, \
         {reserved} bytes reserved, capacity {}",
        fmt_capacity(*capacity)
    )]
    OutOfMemory {
        /// Provider name, e.g. `host` or `cuda:0`.
        device: String,
        /// Bytes asked for by the caller.
        requested: usize,
        /// Bytes handed out to callers and not yet freed.
        in_use: usize,
        /// Bytes held from the provider (in use plus cached).
        reserved: usize,
        /// The provider's capacity, when it has one.
        capacity: Option<usize>,
    },
    /// A provider refused one block; the sub-allocator turns this into `OutOfMemory` after a retry.
    #[error("{device} could not provide a block of {requested} bytes: {reason}")]
    ProviderFailed {
        /// Provider name.
        device: String,
        /// Block size asked for.
        requested: usize,
        /// Why, in the provider's words.
        reason: String,
    },
    /// Alignments must be non-zero powers of two.
    #[error("alignment {align} is not a power of two")]
    BadAlignment {
        /// The alignment given.
        align: usize,
    },
    /// A size so large that rounding it overflows the address space.
    #[error("size {requested} bytes overflows the address space")]
    SizeOverflow {
        /// The size given.
        requested: usize,
    },
    /// An allocation handed to an allocator that did not make it.
    #[error("allocation at {addr:#x} does not belong to this allocator")]
    ForeignAllocation {
        /// Address of the allocation.
        addr: usize,
    },
    /// The linear arena has no room left before its next reset.
    #[error("arena full: requested {requested} bytes with {used} of {capacity} bytes used")]
    ArenaFull {
        /// Bytes asked for.
        requested: usize,
        /// Bytes already bumped since the last reset.
        used: usize,
        /// Arena size.
        capacity: usize,
    },
    /// The staging ring has no room until in-flight copies complete.
    #[error(
        "staging ring full: requested {requested} bytes with {in_flight} of {capacity} bytes in flight"
    )]
    StagingFull {
        /// Bytes asked for.
        requested: usize,
        /// Bytes held by copies not yet completed.
        in_flight: usize,
        /// Ring size.
        capacity: usize,
    },
    /// A staging slot that is not the ring's, or was already submitted.
    #[error("staging slot {seq} is unknown or already submitted")]
    UnknownStagingSlot {
        /// Sequence number of the slot.
        seq: u64,
    },
    /// Input to the static planner that cannot be planned.
    #[error("cannot plan tensor {tensor}: {reason}")]
    InvalidPlan {
        /// Index of the offending request.
        tensor: usize,
        /// What is wrong with it.
        reason: String,
    },
}

fn fmt_capacity(capacity: Option<usize>) -> String {
    match capacity {
        Some(bytes) => format!("{bytes} bytes"),
        None => "unbounded".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_names_all_sizes() {
        let err = MemError::OutOfMemory {
            device: "test".into(),
            requested: 4097,
            in_use: 12288,
            reserved: 16384,
            capacity: Some(16384),
        };
        let msg = err.to_string();
        for needle in [
            "test",
            "4097",
            "12288",
            "16384 bytes reserved",
            "capacity 16384 bytes",
        ] {
            assert!(msg.contains(needle), "{msg} lacks {needle}");
        }
        assert!(msg.starts_with(char::is_lowercase));
        assert!(!msg.ends_with('.'));
        let unbounded = MemError::OutOfMemory {
            device: "counting".into(),
            requested: 1,
            in_use: 0,
            reserved: 0,
            capacity: None,
        };
        assert!(unbounded.to_string().contains("unbounded"));
    }
}
