//! The online manager: the loop behind `huddle run` and `huddle attach`.
//!
//! - [`procs`] finds the program's processes and threads in /proc and what each costs.
//! - [`actuate`] pins threads (sched_setaffinity) and moves pages (move_pages).
//! - [`control`] decides when to migrate: adaptive interval, threshold, no ping-pong.
//! - [`idle`] tells which tasks do not run, so that mapping leaves them out.
//! - [`policy`] says what to aim for (`comm`, `static:ALGO`, `none`); [`simmer_policy`] runs
//!   SIMMer's rules on the PMPI agent's board.
//! - [`run`] is the loop; [`observe`] plugs a detection session into it.

pub mod actuate;
pub mod control;
pub mod idle;
pub mod observe;
pub mod policy;
pub mod procs;
pub mod run;
pub mod simmer_policy;
