//! `memscope open FILE|DIR...`: the shortest way from a snapshot to the dashboard. Finds a
//! memscope server at the address (or starts one in this process, with a library in the user's
//! data folder), uploads the files through its HTTP API as any client would (several files, or a
//! folder, as the ranks of one run), prints what the analyses found, and opens the browser on
//! that snapshot or run; where no browser can be opened it prints the address. A server it
//! started serves until Ctrl-C.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, clap::Args)]
pub struct OpenArgs {
    /// A snapshot file; or a folder of per-rank snapshots, or several files: the ranks of one
    /// run (ranks from `rank{N}` in the names, else their order).
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// The server's address: used if a memscope server answers there, else one is started on it.
    #[arg(long, env = "MEMSCOPE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// The library of a server this command starts (default: $XDG_DATA_HOME/memscope, else
    /// ~/.local/share/memscope).
    #[arg(long, env = "MEMSCOPE_OPEN_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The write token of a server that asks for one.
    #[arg(long, env = "MEMSCOPE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The run's name (its `job=` tag) when several files are opened (default: their folder's).
    #[arg(long)]
    pub job: Option<String>,
    /// Print the address instead of opening a browser.
    #[arg(long)]
    pub no_browser: bool,
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Body>;

pub async fn open(args: OpenArgs) -> anyhow::Result<()> {
    let base = format!("http://{}", args.addr);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let server = match probe(&client, &base).await? {
        Probe::Memscope(version) => {
            eprintln!("memscope: using the memscope {version} server at {base}");
            None
        }
        Probe::Nothing => Some(start(&args, &client, &base).await?),
    };
    let page = upload_all(&client, &base, &args).await?;
    let url = format!("{base}{page}");
    if args.no_browser || !open_browser(&url) {
        println!("open {url}");
    } else {
        println!("opened {url}");
    }
    if let Some(server) = server {
        eprintln!("memscope: serving {base} until Ctrl-C");
        server.await??;
    }
    Ok(())
}

enum Probe {
    Memscope(String),
    Nothing,
}

/// What answers at `base`: a memscope server (its version), nothing, or something else (an
/// error: the address is taken).
async fn probe(client: &HttpClient, base: &str) -> anyhow::Result<Probe> {
    let req = hyper::Request::get(format!("{base}{}", api::routes::HEALTH)).body(Body::empty())?;
    let answer = match tokio::time::timeout(Duration::from_secs(3), client.request(req)).await {
        Err(_) => anyhow::bail!(
            "{base} does not answer (a process holds the port but says nothing): choose another with --addr"
        ),
        Ok(Err(e)) if e.is_connect() => return Ok(Probe::Nothing),
        Ok(Err(e)) => anyhow::bail!(
            "{base} answered but not as HTTP ({e}): choose another address with --addr"
        ),
        Ok(Ok(r)) => r,
    };
    let status = answer.status();
    let body = answer.into_body().collect().await?.to_bytes();
    match serde_json::from_slice::<api::Health>(&body) {
        Ok(h) if status.is_success() && h.ok => Ok(Probe::Memscope(h.version)),
        _ => anyhow::bail!(
            "{base} is served by something that is not memscope (GET /api/health: {status}): choose another address with --addr"
        ),
    }
}

/// Starts `memscope serve` in this process on the address and waits until it answers.
async fn start(
    args: &OpenArgs,
    client: &HttpClient,
    base: &str,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let data_dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => default_data_dir()?,
    };
    eprintln!(
        "memscope: starting a server at {base} (library in {})",
        data_dir.display()
    );
    // Every other setting as `memscope serve` would take it (its defaults, MEMSCOPE_* variables).
    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: crate::config::ServeArgs,
    }
    let mut serve = <Serve as clap::Parser>::try_parse_from(["memscope"])?.args;
    serve.addr = args.addr;
    serve.data_dir = data_dir;
    let handle = tokio::spawn(crate::serve::serve(serve));
    for _ in 0..300 {
        if handle.is_finished() {
            return Err(handle
                .await?
                .err()
                .unwrap_or_else(|| anyhow::anyhow!("the server stopped")));
        }
        if let Ok(Probe::Memscope(_)) = probe(client, base).await {
            return Ok(handle);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the server started at {base} did not answer in 30 s")
}

/// Where a server started by `open` keeps its library.
fn default_data_dir() -> anyhow::Result<PathBuf> {
    let from = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = from("XDG_DATA_HOME") {
        return Ok(d.join("memscope"));
    }
    let home = from("HOME").context("neither XDG_DATA_HOME nor HOME is set: give --data-dir")?;
    Ok(home.join(".local").join("share").join("memscope"))
}

/// Uploads the files; the dashboard page to open (the snapshot's, or the run's).
async fn upload_all(client: &HttpClient, base: &str, args: &OpenArgs) -> anyhow::Result<String> {
    if let [one] = args.files.as_slice()
        && !one.is_dir()
    {
        let up = upload(client, base, args, one, None).await?;
        // The view that answers its question, as the dashboard's own upload opens it.
        return Ok(api::routes::page::snapshot(
            &up.id,
            &[("view", up.summary.landing_view())],
        ));
    }
    let (folder, files) = crate::local::run_files(&args.files)?;
    let job = args.job.clone().unwrap_or(folder);
    let names: Vec<String> = files.iter().map(|f| file_name(f)).collect();
    let (ranks, _) = api::ranks_of_names(&names);
    for (f, rank) in files.iter().zip(ranks) {
        upload(client, base, args, f, Some((&job, rank))).await?;
    }
    Ok(api::routes::page::run(&job))
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Streams one file to `POST /api/snapshots` and prints what its report found.
async fn upload(
    client: &HttpClient,
    base: &str,
    args: &OpenArgs,
    path: &Path,
    run: Option<(&str, u32)>,
) -> anyhow::Result<api::Uploaded> {
    let name = file_name(path);
    let file = tokio::fs::File::open(path)
        .await
        .with_context(|| format!("cannot open {}", path.display()))?;
    let length = file.metadata().await?.len();
    let query = api::UploadQuery {
        name: Some(name.clone()),
        tags: run.map(|(job, rank)| format!("job={job},rank={rank}")),
        token: None,
        device_total_bytes: None,
    };
    let uri = format!(
        "{base}{}?{}",
        api::routes::SNAPSHOTS,
        serde_urlencoded::to_string(&query)?
    );
    let mut req = hyper::Request::post(uri).header(hyper::header::CONTENT_LENGTH, length);
    if let Some(t) = &args.token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = crate::http::download::file_chunks(file);
    let answer = client
        .request(req.body(Body::from_stream(body))?)
        .await
        .with_context(|| format!("uploading {name} to {base}"))?;
    let status = answer.status();
    let bytes = answer.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"].as_str().map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        anyhow::bail!("{base} refused {name} ({status}): {message}");
    }
    let up: api::Uploaded = serde_json::from_slice(&bytes).with_context(|| {
        format!("{base} answered the upload of {name} with something unexpected")
    })?;
    println!("{}", headline(&name, &up));
    Ok(up)
}

/// "snapshot.pickle: peak 5.6 GiB allocated, 6.0 GiB reserved; 1 OOM; 1 leak suspect".
fn headline(name: &str, up: &api::Uploaded) -> String {
    let s = &up.summary;
    let allocated = s.devices.values().map(|d| d.peak_allocated_bytes).max();
    let reserved = s.devices.values().map(|d| d.peak_reserved_bytes).max();
    let mut parts = vec![match (allocated, reserved) {
        (Some(a), Some(r)) => format!(
            "peak {} allocated, {} reserved",
            snapshot::analysis::human_bytes(a),
            snapshot::analysis::human_bytes(r)
        ),
        _ => format!(
            "{} reserved at the snapshot",
            snapshot::analysis::human_bytes(s.reserved_bytes)
        ),
    }];
    let count = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    parts.push(count(s.ooms, "OOM", "OOMs"));
    parts.push(count(s.leak_suspects, "leak suspect", "leak suspects"));
    if !up.created {
        parts.push("already in the library".into());
    }
    format!("{name}: {}", parts.join("; "))
}

/// Opens `url` in the user's browser: `$BROWSER` (entries separated by `:`, `%s` for the
/// address), else the desktop's opener where there is a display. Whether one was started.
fn open_browser(url: &str) -> bool {
    if let Ok(list) = std::env::var("BROWSER") {
        for entry in list.split(':').filter(|e| !e.trim().is_empty()) {
            let line = if entry.contains("%s") {
                entry.replace("%s", url)
            } else {
                format!("{entry} {url}")
            };
            let mut words = line.split_whitespace();
            let Some(program) = words.next() else {
                continue;
            };
            if spawn(program, words) {
                return true;
            }
        }
        return false;
    }
    if cfg!(target_os = "macos") {
        return spawn("open", [url].into_iter());
    }
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    display && spawn("xdg-open", [url].into_iter())
}

/// Starts a browser (or an opener); false if it cannot start or fails within two seconds. One
/// that is still running then (a browser that stays in the foreground) has opened the page.
fn spawn<'a>(program: &str, args: impl Iterator<Item = &'a str>) -> bool {
    let Ok(mut child) = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return false;
    };
    for _ in 0..40 {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => return false,
        }
    }
    true
}
