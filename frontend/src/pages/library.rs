//! The library page: drop or pick snapshots to upload (progress, then indexing, then a link), and
//! every stored snapshot with its figures, editable name and tags, search, delete and permalink.

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;

use crate::{api, fmt, local};

/// One upload in progress or done.
#[derive(Debug, Clone, PartialEq)]
struct Upload {
    key: u32,
    name: String,
    /// 0..1 while sending; 1 while the server indexes.
    sent: f64,
    /// 0..1 of the file the server has parsed (parsing overlaps the upload).
    indexed: f64,
    state: UploadState,
}

#[derive(Debug, Clone, PartialEq)]
enum UploadState {
    Sending,
    Indexing,
    /// Stored: its id, and whether it was new (false: the same bytes were in the library).
    Done {
        id: String,
        created: bool,
        name: String,
    },
    Failed(String),
}

fn tags_text(tags: &[::api::Tag]) -> String {
    tags.iter()
        .map(::api::Tag::text)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Opens a page (the router's navigation, kept for tasks that outlive the page's first run).
type Navigate = StoredValue<Box<dyn Fn(&str, leptos_router::NavigateOptions)>, LocalStorage>;

/// The uploads of this page: those in flight and done, the run they make, and what happens when
/// they land (every field a copyable handle).
#[derive(Clone, Copy)]
struct Uploader {
    uploads: RwSignal<Vec<Upload>>,
    next_key: StoredValue<u32>,
    /// A folder, or several files named by rank (`rank{N}`), chosen or dropped together are one
    /// run: tagged with one job and their ranks; once all have landed the page opens the run.
    batch: RwSignal<Option<(String, usize)>>,
    /// Bumped when an upload lands: the list fetches again.
    refresh: RwSignal<u32>,
    navigate: Navigate,
    /// Where the uploads of files the page also reads (`local/`) stand, for their pages.
    landings: local::Landings,
}

impl Uploader {
    fn new(refresh: RwSignal<u32>) -> Uploader {
        let go = leptos_router::hooks::use_navigate();
        Uploader {
            uploads: RwSignal::new(Vec::new()),
            next_key: StoredValue::new(0),
            batch: RwSignal::new(None),
            refresh,
            navigate: StoredValue::new_local(Box::new(move |to: &str, o| go(to, o))),
            landings: expect_context(),
        }
    }

    /// Chosen or dropped files: one upload each, the files of a run tagged with its job and
    /// ranks. A folder brings every file in it: only snapshots are uploaded.
    fn take_files(self, files: Option<web_sys::FileList>) {
        let Some(files) = files else { return };
        let mut all: Vec<web_sys::File> =
            (0..files.length()).filter_map(|i| files.get(i)).collect();
        let from_folder = all.iter().any(|f| relative_path(f).contains('/'));
        if from_folder {
            all.retain(|f| ::api::is_snapshot_file_name(&f.name()));
        }
        all.sort_by_key(|f| f.name());
        let (ranks, by_name) =
            ::api::ranks_of_names(&all.iter().map(|f| f.name()).collect::<Vec<_>>());
        // A run: a folder, or files whose names each carry their own rank. Other files chosen
        // together (two runs to compare, say) stay snapshots of their own.
        if all.len() < 2 || !(from_folder || by_name) {
            self.batch.set(None);
            // A large file chosen alone may be read in the page too, when its upload is slow:
            // its page then opens before the upload lands.
            let read = all.len() == 1 && local::worth_reading(&all[0]);
            for f in all {
                self.start(f, None, read);
            }
            return;
        }
        let job = run_job(&all);
        self.batch.set(Some((job.clone(), all.len())));
        for (f, rank) in all.into_iter().zip(ranks) {
            self.start(f, Some(format!("job={job},rank={rank}")), false);
        }
    }

    /// One upload: its line, the server's parse progress polled, the file sent; and when `read`,
    /// the file also read in the page if its upload turns out slow (`local/`).
    fn start(self, file: web_sys::File, tags: Option<String>, read: bool) {
        let key = self.next_key.get_value();
        self.next_key.set_value(key + 1);
        self.uploads.update(|u| {
            u.push(Upload {
                key,
                name: file.name(),
                sent: 0.0,
                indexed: 0.0,
                state: UploadState::Sending,
            })
        });
        let token = format!("u{}{}", key, (js_sys::Math::random() * 1e12) as u64);
        let reading = read.then(local::new_id);
        if let Some(r) = &reading {
            self.landings.set(r, local::Landing::Sending(0.0));
        }
        spawn_local(self.poll_progress(key, token.clone()));
        spawn_local(self.send(key, file, token, tags, reading));
    }

    /// Reads `file` in a worker as `reading`; if it is read before its upload lands, and this
    /// page is still shown, opens the reading's page (on the view its report calls for). Else the
    /// worker is ended: the stored snapshot answers.
    async fn read(self, reading: String, file: web_sys::File) {
        let opened = match local::open(&reading, &file).await {
            Ok(report) if self.landings.sending(&reading) => {
                let to =
                    ::api::routes::page::snapshot(&reading, &[("view", report.landing_view())]);
                self.navigate
                    .try_with_value(|go| go(&to, Default::default()))
                    .is_some()
            }
            Ok(_) => false,
            // Not an error of the page's: the upload goes on, and its answer says what the
            // server made of the file (compressed files, for one, are read only there). A
            // reading ended because the upload landed first says nothing.
            Err(e) if self.landings.sending(&reading) => {
                web_sys::console::warn_1(
                    &format!(
                        "memscope: the page did not read {reading} itself ({e}); the upload goes on"
                    )
                    .into(),
                );
                false
            }
            Err(_) => false,
        };
        if !opened {
            local::close(&reading);
        }
    }

    /// Changes upload `key`'s line. The page may be gone (an upload opened its snapshot) while
    /// its tasks still run: every access is a `try_`, and a gone page ends them.
    fn set(self, key: u32, f: &dyn Fn(&mut Upload)) {
        self.uploads.try_update(|u| {
            if let Some(x) = u.iter_mut().find(|x| x.key == key) {
                f(x)
            }
        });
    }

    /// Polls the server's parse progress while upload `key` runs.
    async fn poll_progress(self, key: u32, token: String) {
        loop {
            let running = self.uploads.try_with_untracked(|u| {
                u.iter().any(|x| {
                    x.key == key && matches!(x.state, UploadState::Sending | UploadState::Indexing)
                })
            });
            if running != Some(true) {
                break;
            }
            match api::upload_progress(&token).await {
                Ok(p) if p.finished => break,
                Ok(p) if p.total_bytes > 0 => {
                    let f = p.parsed_bytes as f64 / p.total_bytes as f64;
                    self.set(key, &|u: &mut Upload| u.indexed = f.min(1.0));
                }
                _ => {}
            }
            crate::api::sleep_ms(250).await;
        }
    }

    /// Sends the file, its progress on its line (and to its reading's page); then where it
    /// landed.
    async fn send(
        self,
        key: u32,
        file: web_sys::File,
        token: String,
        tags: Option<String>,
        reading: Option<String>,
    ) {
        let landings = self.landings;
        let (reading_of_progress, file_to_read) = (reading.clone(), file.clone());
        let started_ms = js_sys::Date::now();
        let reading_started = std::rc::Rc::new(std::cell::Cell::new(false));
        let progress = move |sent: f64, total: f64| {
            if let Some(r) = &reading_of_progress
                && total > 0.0
            {
                landings.set(r, local::Landing::Sending(sent / total));
                let elapsed_s = (js_sys::Date::now() - started_ms) / 1000.0;
                if !reading_started.get() && local::reading_pays(total, elapsed_s, sent / total) {
                    reading_started.set(true);
                    spawn_local(self.read(r.clone(), file_to_read.clone()));
                }
            }
            self.set(key, &|u: &mut Upload| {
                u.sent = if total > 0.0 { sent / total } else { 0.0 };
                if u.sent >= 1.0 {
                    u.state = UploadState::Indexing;
                }
            })
        };
        let answer = api::upload(file, &token, tags, progress).await;
        if let Some(r) = &reading {
            // The reading's page moves to the stored snapshot; a failed upload leaves the
            // reading shown, saying so.
            match &answer {
                Ok(v) => {
                    landings.set(r, local::Landing::Landed(v.id.clone()));
                    local::close(r);
                }
                Err(e) => landings.set(r, local::Landing::Failed(e.clone())),
            }
        }
        match answer {
            Ok(v) => self.landed(key, v),
            Err(e) => self.set(key, &|u: &mut Upload| {
                u.state = UploadState::Failed(e.clone())
            }),
        }
    }

    /// An upload is stored: its line says so, and the last of a run's uploads opens the run; a
    /// single new upload opens its snapshot on the view that answers its question (OOM, leak,
    /// else the timeline). A file already in the library says so and stays here; the list
    /// fetches again only when the page stays (a page left does not need it, and its two fetches
    /// would compete with the opened page's own).
    fn landed(self, key: u32, v: ::api::Uploaded) {
        let landing = v.summary.landing_view();
        let (id, created, name) = (v.id, v.created, v.snapshot.name);
        self.set(key, &|u: &mut Upload| {
            u.state = UploadState::Done {
                id: id.clone(),
                created,
                name: name.clone(),
            }
        });
        let run_done = self.uploads.try_with_untracked(|all| {
            all.iter()
                .all(|x| matches!(x.state, UploadState::Done { .. }))
        });
        if let (Some(true), Some(Some((job, n)))) = (run_done, self.batch.try_get_untracked())
            && n >= 2
        {
            self.navigate
                .try_with_value(|go| go(&::api::routes::page::run(&job), Default::default()));
            return;
        }
        let single = self.uploads.try_with_untracked(|all| all.len() == 1);
        if single == Some(true) && created {
            self.navigate.try_with_value(|go| {
                go(
                    &::api::routes::page::snapshot(&id, &[("view", landing)]),
                    Default::default(),
                )
            });
            return;
        }
        self.refresh.try_update(|r| *r += 1);
    }
}

#[component]
pub fn Library() -> impl IntoView {
    api::page_scope();
    let query = RwSignal::new(String::new());
    let refresh = RwSignal::new(0u32);
    let up = Uploader::new(refresh);
    view! {
        {dropzone(up)}
        <Runs refresh=refresh/>
        {library_section(query, refresh)}
    }
}

/// Where files are dropped or chosen (files, or a folder of ranks), and a line per upload.
fn dropzone(up: Uploader) -> impl IntoView {
    let dragging = RwSignal::new(false);
    // A file input's choice: uploaded, and the input emptied so the same choice can be made again.
    let picked = move |ev: web_sys::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        up.take_files(input.files());
        input.set_value("");
    };
    // Chromium and Firefox pick a folder with this (not a standard attribute: set on the element).
    let folder_input = NodeRef::<leptos::html::Input>::new();
    Effect::new(move |_| {
        if let Some(i) = folder_input.get() {
            let _ = i.set_attribute("webkitdirectory", "");
        }
    });
    view! {
        <section
            class="dropzone"
            class:dragging=move || dragging.get()
            on:dragover=move |ev: web_sys::DragEvent| {
                ev.prevent_default();
                dragging.set(true);
            }
            on:dragleave=move |_| dragging.set(false)
            on:drop=move |ev: web_sys::DragEvent| {
                ev.prevent_default();
                dragging.set(false);
                up.take_files(ev.data_transfer().and_then(|d| d.files()));
            }
        >
            <p>
                "Drop PyTorch memory snapshots here ("
                <code>"torch.cuda.memory._dump_snapshot"</code>
                " pickles, .gz/.zst/.xz, or JSON), or "
                <label class="button">
                    "choose a folder of ranks"
                    <input
                        id="folder-input"
                        type="file"
                        node_ref=folder_input
                        class="file-input"
                        on:change=picked
                    />
                </label>
                " or "
                <label class="button">
                    "choose files"
                    <input
                        id="file-input"
                        type="file"
                        multiple=true
                        class="file-input"
                        on:change=picked
                    />
                </label>
            </p>
            <p class="hint">"A folder of per-rank snapshots, or several files named rank0, rank1, …, chosen at once are one run: the ranks side by side."</p>
            {move || up.batch.get().map(|(job, n)| view! {
                <p class="run-batch">{format!("Run “{job}”, {n} ranks: ")}<a class="open-run" href=::api::routes::page::run(&job)>"open the run"</a></p>
            })}
            <ul class="uploads">
                {move || up.uploads.get().into_iter().map(|u| upload_line(up, u)).collect_view()}
            </ul>
        </section>
    }
}

/// One upload's line: its progress, then a link to it, or its error with a way to dismiss it.
fn upload_line(up: Uploader, u: Upload) -> impl IntoView {
    let status = match &u.state {
        UploadState::Sending => view! {
            <span>{format!("uploading {:.0}% · indexed {:.0}%", u.sent * 100.0, u.indexed * 100.0)}</span>
        }
        .into_any(),
        UploadState::Indexing => {
            view! { <span>{format!("indexing {:.0}%…", u.indexed * 100.0)}</span> }.into_any()
        }
        UploadState::Done { id, created: true, .. } => {
            view! { <a class="open" href=::api::routes::page::snapshot_home(id)>"open"</a> }.into_any()
        }
        UploadState::Done { id, created: false, name } => view! {
            <span class="duplicate">{format!("already in the library as “{name}” ")}</span>
            <a class="open" href=::api::routes::page::snapshot_home(id)>"open"</a>
        }
        .into_any(),
        UploadState::Failed(e) => {
            let key = u.key;
            let (say, more) = crate::fmt::error_parts(e);
            view! {
                <span class="error upload-error">{say}</span>
                {crate::pages::widgets::error_details(more)}
                <button
                    class="dismiss"
                    title="remove this line"
                    on:click=move |_| up.uploads.update(|all| all.retain(|x| x.key != key))
                >
                    "dismiss"
                </button>
            }
            .into_any()
        }
    };
    view! {
        <li>
            <progress max="1" value=u.sent></progress>
            <span class="name">{u.name.clone()}</span>
            {status}
        </li>
    }
}

/// The stored snapshots: search, the last rename's outcome, and the table.
fn library_section(query: RwSignal<String>, refresh: RwSignal<u32>) -> impl IntoView {
    let items = LocalResource::new(move || {
        refresh.track();
        let q = query.get();
        async move { api::snapshots(&::api::ListQuery { q: Some(q) }).await }
    });
    let saved = RwSignal::new(None::<Result<String, String>>);
    // Snapshots ticked for comparing: (id, upload time). Held here, above the table, so a
    // refresh (another upload finishing, a rename) keeps the ticks instead of clearing them.
    let picked: RwSignal<Vec<(String, i64)>> = RwSignal::new(Vec::new());
    view! {
        <section class="library">
            <div class="toolbar">
                <h2>"Library"</h2>
                <input
                    class="search"
                    type="search"
                    placeholder="filter by name, id or tag (job=…, rank=…)"
                    prop:value=move || query.get()
                    on:input=move |ev| query.set(event_target_value(&ev))
                />
            </div>
            // The last rename or retag: confirmed, or its error (the field shows what is stored).
            {move || saved.get().map(|r| match r {
                Ok(m) => view! { <p class="save-status ok">{m}</p> }.into_any(),
                Err(e) => view! { <p class="save-status error">{format!("Not saved: {e}")}</p> }.into_any(),
            })}
            {move || match items.get() {
                None => view! { <p>"loading…"</p> }.into_any(),
                Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
                Some(Ok(list)) if list.is_empty() => {
                    let q = query.get_untracked();
                    if q.trim().is_empty() {
                        recipe().into_any()
                    } else {
                        view! { <p class="empty">{format!("No snapshot matches “{}”.", q.trim())}</p> }.into_any()
                    }
                }
                Some(Ok(list)) => view! { <LibraryTable list=list refresh=refresh saved=saved picked=picked/> }.into_any(),
            }}
        </section>
    }
}

/// A name field that shows its end once drawn (`long`: the name is wider than the field), and
/// again when the user leaves it.
fn name_end(long: bool) -> NodeRef<leptos::html::Input> {
    let field = NodeRef::<leptos::html::Input>::new();
    if long {
        Effect::new(move |_| {
            if let Some(i) = field.get() {
                show_end(&i);
            }
        });
    }
    field
}

/// Scrolls a text field to its end, where names usually differ.
fn show_end(i: &web_sys::HtmlInputElement) {
    i.set_scroll_left(i.scroll_width());
}

/// The empty library: how to record a snapshot, in the three lines of Python it takes.
fn recipe() -> impl IntoView {
    view! {
        <section class="recipe">
            <p class="empty">"No snapshots yet. Record one from your training script with three lines of Python, then drop the file above:"</p>
            <pre class="cmd recipe-code">{RECIPE}</pre>
            <p class="hint">
                "memscope reads the pickle without running it. Record before the work starts, so the trace covers it; "
                <code>"max_entries"</code>
                " bounds the trace's memory on the host. In a notebook, "
                <code>"pip install memscope-agent"</code>
                " and "
                <code>"with memscope_agent.record(): …"</code>
                " does the same and dumps on an OOM too."
            </p>
        </section>
    }
}

/// What the empty library shows to copy (also what the first-use test checks).
pub const RECIPE: &str = "import torch
torch.cuda.memory._record_memory_history(max_entries=100_000)   # 1. record, before the work
train()                                                           #    your steps, as they are
torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")             # 2. dump (also after an OOM)";

#[component]
fn LibraryTable(
    list: Vec<::api::SnapshotInfo>,
    refresh: RwSignal<u32>,
    saved: RwSignal<Option<Result<String, String>>>,
    picked: RwSignal<Vec<(String, i64)>>,
) -> impl IntoView {
    // Two ticked make a diff, older one first. Ticks outlive a filter (tick one, search for
    // the other, tick it); deleting a snapshot drops its tick.
    let rows = list
        .into_iter()
        .map(|s| {
            let id = s.id.clone();
            let (id2, id3, id4) = (id.clone(), id.clone(), id.clone());
            let rename = move |ev: web_sys::Event| {
                let name = event_target_value(&ev);
                let id = id2.clone();
                spawn_local(async move {
                    let r = api::update(&id, &::api::UpdateSnapshot { name: Some(name), ..Default::default() }).await;
                    saved.set(Some(r.map(|s| format!("Saved: renamed to “{}”.", s.name))));
                    refresh.update(|r| *r += 1);
                });
            };
            let retag = move |ev: web_sys::Event| {
                let tags = ::api::parse_tags(&event_target_value(&ev));
                // Refused here with the server's own words (it refuses them too), without a
                // request that fails; the field goes back to what is stored.
                if let Some(why) = ::api::tags_problem(&tags) {
                    saved.set(Some(Err(why)));
                    refresh.update(|r| *r += 1);
                    return;
                }
                let id = id3.clone();
                spawn_local(async move {
                    let r = api::update(&id, &::api::UpdateSnapshot { tags: Some(tags), ..Default::default() }).await;
                    saved.set(Some(r.map(|s| format!("Saved: the tags of “{}” are now {}.", s.name, if s.tags.is_empty() { "none".into() } else { tags_text(&s.tags) }))));
                    refresh.update(|r| *r += 1);
                });
            };
            let remove = {
                let id = id.clone();
                move |_| {
                    let id = id.clone();
                    let ok = web_sys::window().and_then(|w| w.confirm_with_message("Delete this snapshot?").ok()).unwrap_or(false);
                    if ok {
                        picked.update(|p| p.retain(|(i, _)| *i != id));
                        spawn_local(async move {
                            let _ = api::delete(&id).await;
                            refresh.update(|r| *r += 1);
                        });
                    }
                }
            };
            let pick = {
                let (id, at) = (id.clone(), s.uploaded_at_ms);
                move |ev: web_sys::Event| {
                    let on = event_target::<web_sys::HtmlInputElement>(&ev).checked();
                    picked.update(|p| {
                        p.retain(|(i, _)| *i != id);
                        if on {
                            p.push((id.clone(), at));
                        }
                    });
                }
            };
            view! {
                <tr data-id=id.clone()>
                    <td class="nowrap">
                        <input type="checkbox" class="pick" title="compare" on:change=pick
                            prop:checked=move || picked.with(|p| p.iter().any(|(i, _)| *i == id4))/>
                        " "
                        <a class="permalink" href=::api::routes::page::snapshot_home(&id)>"open"</a>
                    </td>
                    <td>
                        // As wide as the name (up to 40 characters), so names that share a
                        // long start (`run.limit`, `run.free`) show the part that differs;
                        // a longer one is scrolled to its end, where names usually differ.
                        <input class="name" value=s.name.clone() title=s.name.clone() on:change=rename
                            size=s.name.chars().count().clamp(12, 40)
                            on:focusout=|ev| show_end(&event_target(&ev))
                            node_ref=name_end(s.name.chars().count() > 40)/>
                    </td>
                    <td class="date">{fmt::date(s.uploaded_at_ms)}</td>
                    <td class="num">{fmt::bytes(s.size_bytes)}</td>
                    <td>{s.devices.iter().map(|d| format!("cuda:{d}")).collect::<Vec<_>>().join(", ")}</td>
                    <td class="num">{fmt::count(s.entries)}</td>
                    <td class="num">{fmt::bytes(s.peak_bytes)}</td>
                    <td class="num">
                        {if s.peak_reserved_bytes == 0 && s.reserved_bytes > 0 {
                            "—".to_string()
                        } else {
                            fmt::bytes(s.peak_reserved_bytes)
                        }}
                    </td>
                    <td class="num" class:alert={s.leak_suspects > 0}>{s.leak_suspects}</td>
                    <td class="num" class:alert={s.ooms > 0}>{s.ooms}</td>
                    <td>
                        <input class="tags" value=tags_text(&s.tags) placeholder="job=…, rank=…" on:change=retag/>
                    </td>
                    <td>
                        <button class="delete" on:click=remove>"delete"</button>
                    </td>
                </tr>
            }
        })
        .collect_view();
    // Two ticked: the diff (older → newer); more: the sweep page, which orders them itself.
    let compare = move || {
        let mut p = picked.get();
        p.sort_by_key(|x| x.1);
        match p.len() {
            2 => Some((
                ::api::routes::page::diff(&p[0].0, &p[1].0, &Default::default()),
                "compare the two ticked snapshots (older → newer)".to_string(),
            )),
            n if (3..=crate::pages::sweep::MAX_RUNS).contains(&n) => {
                let ids: Vec<&str> = p.iter().map(|x| x.0.as_str()).collect();
                Some((
                    ::api::routes::page::compare(&ids),
                    format!("compare the {n} ticked snapshots (a sweep)"),
                ))
            }
            _ => None,
        }
    };
    // Two or three ticked: recordings of one program at different sizes, for Will it fit.
    let fit = move || {
        let p = picked.get();
        (2..=3).contains(&p.len()).then(|| {
            let picks: Vec<crate::pages::fit::Pick> = p
                .iter()
                .map(|(id, _)| crate::pages::fit::Pick {
                    id: id.clone(),
                    size: None,
                })
                .collect();
            ::api::routes::page::fit(&::api::PredictQuery {
                recordings: crate::pages::fit::recordings_param(&picks),
                ..Default::default()
            })
        })
    };
    view! {
        <p class="compare-bar">
            {move || match compare() {
                Some((href, words)) => view! {
                    <a class="compare" href=href>{words}</a>
                }
                .into_any(),
                None => view! {
                    <span class="hint">{format!(
                        "Tick two snapshots to compare them, up to {} to lay a sweep (of batch sizes, say) side by side, two or three of one program at different sizes to ask what fits.",
                        crate::pages::sweep::MAX_RUNS
                    )}</span>
                }
                .into_any(),
            }}
            {move || fit().map(|href| view! {
                " · "
                <a class="will-it-fit" href=href>"will a larger size fit? (predict from the ticked snapshots)"</a>
            })}
        </p>
        <table class="snapshots">
            <thead>
                <tr>
                    <th></th>
                    <th>"name"</th>
                    <th>"uploaded"</th>
                    <th class="num">"size"</th>
                    <th>"devices"</th>
                    <th class="num">"events"</th>
                    <th class="num" title="torch.cuda.max_memory_allocated(): the highest allocated bytes of any device, over the trace (or at the snapshot without one)">"peak allocated"</th>
                    <th class="num" title="torch.cuda.max_memory_reserved(): the highest reserved bytes of any device; — until a snapshot stored by an older version is opened again">"peak reserved"</th>
                    <th class="num">"leak suspects"</th>
                    <th class="num">"OOMs"</th>
                    <th>"tags"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
    }
}

/// The runs in the library: jobs whose snapshots carry two ranks or more.
#[component]
fn Runs(refresh: RwSignal<u32>) -> impl IntoView {
    let runs = LocalResource::new(move || {
        refresh.track();
        api::runs()
    });
    move || {
        match runs.get() {
        Some(Ok(list)) if !list.is_empty() => view! {
            <section class="runs">
                <h2>"Runs"</h2>
                <table class="runs-table">
                    <thead><tr><th>"job"</th><th>"ranks"</th><th class="num">"peak, lowest – highest"</th><th class="num">"OOMs"</th><th>"uploaded"</th></tr></thead>
                    <tbody>
                        {list.into_iter().map(|r| {
                            let lo = r.ranks.iter().map(|m| m.peak_bytes).min().unwrap_or(0);
                            let hi = r.ranks.iter().map(|m| m.peak_bytes).max().unwrap_or(0);
                            let ooms: u64 = r.ranks.iter().map(|m| m.ooms).sum();
                            let failing: Vec<String> = r.ranks.iter().filter(|m| m.ooms > 0).map(|m| format!("rank {}", m.rank)).collect();
                            view! {
                                <tr class="run-row" data-run=r.id.clone()>
                                    <td><a class="run-link" href=::api::routes::page::run(&r.id)>{r.id.clone()}</a></td>
                                    <td>{r.ranks.iter().map(|m| view! {
                                        <a class="rank-chip" class:failed={m.ooms > 0} href=::api::routes::page::snapshot_home(&m.snapshot_id) title=m.name.clone()>{m.rank}</a>
                                    }).collect_view()}</td>
                                    <td class="num">{format!("{} – {}", fmt::bytes(lo), fmt::bytes(hi))}</td>
                                    <td class="num" class:alert={ooms > 0}>{if failing.is_empty() { "0".to_string() } else { format!("{ooms} ({})", failing.join(", ")) }}</td>
                                    <td class="date">{fmt::date(r.uploaded_at_ms)}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </section>
        }.into_any(),
        // No runs (or the list failed: the library below says why) take no room.
        _ => ().into_any(),
    }
    }
}

/// A file's path inside the folder it was chosen with (empty for files chosen one by one).
fn relative_path(f: &web_sys::File) -> String {
    js_sys::Reflect::get(f, &"webkitRelativePath".into())
        .ok()
        .and_then(|v| v.as_string())
        .unwrap_or_default()
}

/// The job of files uploaded together: the folder that holds them, else the time.
fn run_job(files: &[web_sys::File]) -> String {
    let folder = files.first().map(relative_path).and_then(|p| {
        let mut parts: Vec<&str> = p.split('/').collect();
        parts.pop();
        parts.last().map(|s| s.to_string())
    });
    folder.filter(|f| !f.is_empty()).unwrap_or_else(|| {
        let d = js_sys::Date::new_0();
        format!(
            "run-{:04}{:02}{:02}-{:02}{:02}{:02}",
            d.get_full_year(),
            d.get_month() + 1,
            d.get_date(),
            d.get_hours(),
            d.get_minutes(),
            d.get_seconds()
        )
    })
}

/// The element an event came from, as `T`.
pub fn event_target<T: JsCast>(ev: &web_sys::Event) -> T {
    ev.target().expect("event target").unchecked_into::<T>()
}
