//! Which device a snapshot page shows: the URL's choice, else the first with a trace.

use crate::url::UrlState;

/// The device whose views are shown: the URL's, else the first with a trace.
pub fn shown_device(report: &::api::Report, url: UrlState) -> Option<i32> {
    url.device()
        .or_else(|| report.traced_devices().first().map(|d| d.0))
}

/// How many events the shown device's trace has.
pub fn shown_events(report: &::api::Report, url: UrlState) -> u64 {
    let device = shown_device(report, url);
    report
        .traced_devices()
        .into_iter()
        .find(|d| Some(d.0) == device)
        .map_or(0, |d| d.1)
}
