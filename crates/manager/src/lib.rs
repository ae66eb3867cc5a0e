//! The online manager: the loop behind `huddle run` and `huddle attach`.
//!
//! - [`procs`] (from `detect`, which attaches to them) finds the program's processes and
//!   threads in /proc and what each costs.
//! - [`actuate`] pins threads (sched_setaffinity) and moves pages (move_pages); [`ledger`]
//!   remembers the masks it changed, for `huddle attach` to put back.
//! - [`pages`] makes a migrated task's memory follow it (`--move-pages`), a budget at a time.
//! - [`control`] decides when to migrate: adaptive interval, threshold, no ping-pong.
//! - [`idle`] tells which tasks do not run, so that mapping leaves them out.
//! - [`policy`] says what to aim for (`comm`, `static:ALGO`, `none`); [`policy::simmer`] runs
//!   SIMMer's rules on the PMPI agent's board.
//! - [`run`] is the loop, in four steps: [`sample`] (where the live tasks run and may run),
//!   [`decide`] (the policy's proposal, judged), [`act`] (pinning and pages) and [`record`]
//!   (what the report keeps). It reads an [`observer::Observer`]: [`observe`] plugs a
//!   detection session into it, and [`mpi`] merges the PMPI agent's exact MPI traffic into
//!   it; [`node`] shows it one node's ranks of an MPI job (`huddle node`), and [`claims`]
//!   keeps the node managers of one machine off each other's CPUs.

#![warn(missing_docs)]

pub mod act;
pub mod actuate;
pub mod claims;
pub mod control;
pub mod decide;
pub mod idle;
pub mod ledger;
pub mod mpi;
pub mod node;
pub mod observe;
pub mod observer;
pub mod pages;
pub mod policy;
pub use detect::procs;
pub mod record;
pub mod run;
pub mod sample;
