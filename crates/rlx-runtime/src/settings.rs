//! The runtime's own knobs (the backends declare theirs in their crates' `settings`
//! modules); [`KNOBS`] is what `rlx devices --settings` lists under `runtime`.

use rlx_driver::Knob;

/// The dispatch report printed at every compile.
pub const DISPATCH_REPORT: Knob = Knob {
    name: "RLX_DISPATCH_REPORT",
    default: "0",
    help: "print the dispatch report (where each node runs) to stderr at every compile",
};

/// Every runtime knob.
pub const KNOBS: &[Knob] = &[DISPATCH_REPORT];
