//! The live pages: the fleet (every host's GPUs now, processes, alerts), one GPU over time, one
//! process over time. They refetch when the server's event stream says new data was stored (at
//! most once a second), so they update without a reload.

mod chart;
pub mod fleet;
pub mod gpu;
mod links;
pub mod process;
