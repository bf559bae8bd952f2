//! A snapshot page's state in its URL query (view, device, window, axis, position, selected
//! allocation, filter, frames, the what-if setting and limit), so a shared link opens the same
//! view at the same moment. `merge` is the pure rule (tested on the host); `UrlState` reads and writes it through
//! the router, but for changes and event handlers, which read the browser's address as it is now (the router's
//! copy catches up only after a navigation returns).

use leptos::prelude::*;
use leptos_router::NavigateOptions;
use leptos_router::hooks::use_navigate;

/// The query keys a snapshot page keeps, in the order its URLs write them.
pub const KEYS: [&str; 17] = [
    "view",
    "device",
    "from",
    "to",
    "axis",
    "pos",
    "sel",
    "filter",
    "frames",
    "conf",
    "limit",
    "limit_kind",
    "steps",
    "by",
    "hide",
    "category",
    "weigh",
];

/// The query after `changes` (a key set to `None` is removed; other keys are kept), in `KEYS`
/// order; keys a snapshot page does not know are dropped.
pub fn merge(
    current: impl Fn(&str) -> Option<String>,
    changes: &[(&str, Option<String>)],
) -> Vec<(&'static str, String)> {
    KEYS.iter()
        .filter_map(|&key| {
            let v = match changes.iter().find(|(k, _)| *k == key) {
                Some((_, v)) => v.clone(),
                None => current(key),
            };
            v.map(|v| (key, v))
        })
        .collect()
}

fn parse_axis(v: Option<String>) -> Option<api::Axis> {
    match v.as_deref() {
        Some("event") => Some(api::Axis::Event),
        Some("time") => Some(api::Axis::Time),
        _ => None,
    }
}

/// A window needs both ends.
fn parse_window(get: impl Fn(&str) -> Option<String>) -> Option<(f64, f64)> {
    let end = |k: &str| get(k).and_then(|v| v.parse::<f64>().ok());
    end("from").zip(end("to"))
}

/// Reads and writes the snapshot page's URL query.
#[derive(Clone, Copy)]
pub struct UrlState {
    pub id: Memo<String>,
    pub query: Memo<leptos_router::params::ParamsMap>,
}

impl UrlState {
    pub fn get(&self, key: &str) -> Option<String> {
        self.query.get().get(key)
    }
    /// The device chosen in the URL (none: the server's default, the first with a trace).
    pub fn device(&self) -> Option<i32> {
        self.get("device").and_then(|v| v.parse().ok())
    }
    /// The `pos` query key: a position in the device's trace.
    pub fn position(&self) -> Option<u32> {
        self.get("pos").and_then(|v| v.parse().ok())
    }
    /// The axis chosen in the URL.
    pub fn axis(&self) -> Option<api::Axis> {
        parse_axis(self.get("axis"))
    }
    /// The window in the URL (`from`, `to`): none unless it has both ends.
    pub fn window(&self) -> Option<(f64, f64)> {
        parse_window(|k| self.get(k))
    }
    /// The query's keys as the browser's address has them now (read once), for event handlers.
    /// The router's copy (`query`) catches up only after a navigation has returned, so two
    /// changes made in one turn of the event loop (two keys pressed before the page redrew)
    /// would both start from the address before them, and the second undo the first.
    fn now(&self) -> impl Fn(&str) -> Option<String> {
        let search = web_sys::window().and_then(|w| w.location().search().ok());
        let params = search.and_then(|s| web_sys::UrlSearchParams::new_with_str(&s).ok());
        let query = self.query;
        move |key| match &params {
            Some(params) => params.get(key),
            None => query.with_untracked(|q| q.get(key)),
        }
    }
    /// [`UrlState::window`] as the address has it now ([`UrlState::now`]).
    pub fn window_now(&self) -> Option<(f64, f64)> {
        parse_window(self.now())
    }
    /// [`UrlState::axis`] as the address has it now ([`UrlState::now`]).
    pub fn axis_now(&self) -> Option<api::Axis> {
        parse_axis(self.now()("axis"))
    }
    /// This snapshot's page with exactly these query keys (a link to another view or moment).
    pub fn href<K: AsRef<str>, V: AsRef<str>>(&self, pairs: &[(K, V)]) -> String {
        api::routes::page::snapshot(&self.id.get_untracked(), pairs)
    }
    /// This page with some query keys replaced (None removes), keeping the others: a link.
    pub fn href_with(&self, changes: &[(&str, Option<String>)]) -> String {
        let q = self.query.get();
        self.href(&merge(|k| q.get(k), changes))
    }
    /// Replaces some query keys (None removes) and navigates, keeping the others.
    pub fn set(&self, changes: &[(&str, Option<String>)]) {
        let url = self.href(&merge(self.now(), changes));
        use_navigate()(
            &url,
            NavigateOptions {
                replace: true,
                scroll: false,
                ..Default::default()
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_keeps_the_other_keys_removes_nones_and_drops_unknown_ones() {
        let current = |k: &str| match k {
            "view" => Some("timeline".to_string()),
            "from" => Some("10".to_string()),
            "to" => Some("20".to_string()),
            "junk" => Some("x".to_string()),
            _ => None,
        };
        let got = merge(
            current,
            &[("pos", Some("7".into())), ("from", None), ("to", None)],
        );
        assert_eq!(
            got,
            vec![("view", "timeline".to_string()), ("pos", "7".to_string())]
        );
        let same = merge(current, &[]);
        assert_eq!(same.len(), 3);
        assert_eq!(
            api::routes::page::snapshot("abc", &same),
            "/s/abc?view=timeline&from=10&to=20"
        );
    }
}
