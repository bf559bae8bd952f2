//! Reports to share: one snapshot's findings as a self-contained HTML file (`html.rs`: inline
//! styles and SVG charts, a few lines of script for the exact figures under the cursor, no
//! server, opens offline, embeds in a notebook) or a Markdown summary to paste into a GitHub
//! issue (`md.rs`). Both render the same [`Shareable`]: the API's report plus the few views a
//! reader needs without the dashboard (the default device's memory over its trace, the call
//! sites at its peak, the what-if replay), gathered here once from the engine's tables.

mod html;
mod md;
mod shared;

pub use html::html;
pub use md::markdown;
pub use shared::{DeviceViews, Shareable, gather};

/// The report in `format`.
pub fn render(r: &Shareable, format: api::ReportFormat) -> String {
    match format {
        api::ReportFormat::Html => html(r),
        api::ReportFormat::Md => markdown(r),
    }
}
