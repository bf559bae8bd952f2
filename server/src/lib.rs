//! memscope's server crate: the command line today (`memscope analyze`), and the dashboard server
//! (`memscope serve`) as it is built. The snapshot engine itself lives in the `snapshot` crate.

pub mod cli;
pub mod text;
