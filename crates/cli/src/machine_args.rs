//! The machine-source options every command that needs a machine model shares.

use crate::exit::bad_input;
use std::path::PathBuf;
use topology::{LevelCosts, Machine};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct MachineArgs {
    /// Load the machine from an hwloc XML export (lstopo FILE.xml) instead of this machine
    #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
    pub xml: Option<PathBuf>,
    /// Use an hwloc synthetic description, e.g. "pack:2 l3:2 core:4 pu:2"
    #[arg(long, value_name = "DESC")]
    pub synthetic: Option<String>,
    /// Communication cost per sharing level, e.g. "l3=5,network=100" (levels: pu, core, l1,
    /// l2, l3, numa, package, machine, network; defaults 0,1,1,2,4,8,10,12,40)
    #[arg(long, value_name = "LEVEL=COST,...")]
    pub costs: Option<String>,
}

impl MachineArgs {
    pub fn load(&self) -> anyhow::Result<Machine> {
        let m =
            Machine::load(self.xml.as_deref(), self.synthetic.as_deref()).map_err(|e| match e {
                topology::TopologyError::Discovery(_) => anyhow::Error::new(e),
                _ => bad_input(e),
            })?;
        match &self.costs {
            Some(spec) => Ok(m.with_costs(LevelCosts::parse(spec).map_err(bad_input)?)),
            None => Ok(m),
        }
    }
}
