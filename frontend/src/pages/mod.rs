//! One module per page; a page with tabs has a folder with one file per tab.

pub mod compare;
pub mod diff;
pub mod fit;
pub mod help;
pub mod library;
pub mod live;
pub mod not_found;
pub mod run;
pub mod snapshot;
pub mod sweep;
pub mod widgets;
