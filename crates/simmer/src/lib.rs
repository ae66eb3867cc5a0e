//! MPI ranks and the network stack (SIMMer): everything the manager needs to run the `simmer`
//! policy except the loop itself.
//!
//! - [`board`]: reads the node-local shared-memory board the PMPI agent (mpi/pmpi) publishes
//!   per-rank metrics on (layout in docs/pmpi.md).
//! - [`protocol`]: which CPUs take network interrupts and softirqs and how much of their time
//!   goes there (/proc/interrupts, /proc/softirqs, /proc/stat), and steering of loopback receive
//!   processing (RPS) and IRQ affinity.
//! - [`policy`]: the three SIMMer rules (communication idleness, out-of-sync communication,
//!   cache locality) as a pure decision function with thresholds, confidence and hysteresis.
//! - [`placement`]: the rank placements of the contention study (packed, spread, blocked,
//!   cyclic, one rank per node) on a machine model.

pub mod board;
pub mod placement;
pub mod policy;
pub mod protocol;
