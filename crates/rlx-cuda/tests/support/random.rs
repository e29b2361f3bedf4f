//! The shared random-graph generator of the differential suites.

pub use rlx_cpu::random_graph::random_graph;
