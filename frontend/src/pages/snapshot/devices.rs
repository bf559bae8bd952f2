//! Which device a snapshot page shows: the URL's choice, else the one that held the most memory
//! (the report's `default_device`).

use crate::url::UrlState;

/// The device whose views are shown: the URL's, else the report's default.
pub fn shown_device(report: &::api::Report, url: UrlState) -> Option<i32> {
    url.device().or_else(|| report.shown_device())
}

/// The shown device's steps, when its trace shows a loop.
pub fn shown_steps(report: &::api::Report, url: UrlState) -> Option<::api::Steps> {
    let device = shown_device(report, url)?;
    report.devices.get(&device)?.steps.clone()
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
