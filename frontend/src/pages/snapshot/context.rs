//! What a snapshot page shares with its views through Leptos context, beside the URL state:
//! the library entry, and a revision that refetches the report after a change on the server.

use leptos::prelude::*;

/// Bumped when the snapshot changes on the server (a device total set): the report and the
/// entry are fetched again.
#[derive(Clone, Copy)]
pub struct Revision(pub RwSignal<u32>);

/// The library entry of the snapshot shown (name, tags, device total).
pub type InfoResource = LocalResource<Result<::api::SnapshotInfo, String>>;
