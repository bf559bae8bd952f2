//! Issue 40: a dashboard a newcomer understands without the README, and that uses the whole
//! screen. In headless Chromium: the empty library's recipe, the "?" overlay (keys and the
//! glossary, reached from a figure's label), a line per tab, the keyboard (tabs, the timeline's
//! pan, zoom and next OOM or leak, the call-site search, the incidents), and every tab in the
//! light and the dark theme at 1280 and 1920 pixels: text contrast, nothing wider than the
//! window, charts as wide as the column. Screenshots under `target/e2e-screenshots/newcomer/`.

use fantoccini::key::Key;

use crate::support::{
    CANVAS_PIXELS, Theme, browser_themed, click, console_errors, get, post, press, root,
    screenshot, start_chromedriver, start_server, upload, wait_js,
};

const TABS: [&str; 7] = [
    "overview", "timeline", "segments", "stacks", "leaks", "oom", "whatif",
];

/// A test's own server on an empty library in a fresh folder (named by `tag`), and chromedriver.
struct Lab {
    data: std::path::PathBuf,
    base: String,
    _driver: crate::support::Driver,
    port: u16,
}

async fn lab(tag: &str) -> Lab {
    let data = std::env::temp_dir().join(format!(
        "memscope-e2e-newcomer-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&data);
    let base = start_server(&data.join("lib")).await;
    let (driver, port) = start_chromedriver();
    Lab {
        data,
        base,
        _driver: driver,
        port,
    }
}

impl Lab {
    /// A headless Chromium of `size` CSS pixels on a system that prefers `theme`, with its own
    /// profile folder.
    async fn browser(&self, theme: Theme, size: (u32, u32), profile: &str) -> fantoccini::Client {
        browser_themed(self.port, &self.data.join(profile), size, 1.0, theme).await
    }
}

fn fixture(name: &str) -> std::path::PathBuf {
    root().join("tests/fixtures").join(name)
}

/// Uploads a fixture through the API; its id.
async fn upload_api(base: &str, name: &str) -> String {
    let bytes = std::fs::read(fixture(name)).unwrap();
    let (status, body) = post(base, &format!("/api/snapshots?name={name}"), bytes).await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["id"].as_str().unwrap().to_string()
}

/// The report's JSON for `id`.
async fn report(base: &str, id: &str) -> serde_json::Value {
    let (status, body) = get(base, &format!("/api/snapshots/{id}")).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The timeline window in the URL (`from`, `to`), when there is one.
async fn window(c: &fantoccini::Client) -> Option<(f64, f64)> {
    let v = c
        .execute(
            "const q = new URLSearchParams(location.search); \
             return q.has('from') ? [Number(q.get('from')), Number(q.get('to'))] : null;",
            vec![],
        )
        .await
        .unwrap();
    v.as_array()
        .map(|a| (a[0].as_f64().unwrap(), a[1].as_f64().unwrap()))
}

/// Waits until the URL's window differs from `before`; the new one.
async fn window_after(
    c: &fantoccini::Client,
    before: Option<(f64, f64)>,
    what: &str,
) -> Option<(f64, f64)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let now = window(c).await;
        if now != before {
            // The chart redrawn for it.
            wait_js(c, &format!("{CANVAS_PIXELS} > 5000"), what).await;
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the window did not change"
        );
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
}

/// How many times the page has fetched the timeline's whole trace (no allocations: the
/// overview the window is drawn within).
async fn whole_trace_fetches(c: &fantoccini::Client) -> u64 {
    c.execute(
        "return performance.getEntriesByType('resource') \
           .filter(e => e.name.includes('/timeline?') && e.name.includes('allocations=0')).length;",
        vec![],
    )
    .await
    .unwrap()
    .as_u64()
    .unwrap()
}

/// Presses `0` and waits until the URL has no window: the whole trace (`what` names the step).
async fn whole_trace(c: &fantoccini::Client, what: &str) {
    press(c, &['0']).await;
    wait_js(c, "!new URLSearchParams(location.search).has('from')", what).await;
}

/// Presses `key` until the URL's window changes (a loaded machine may still be fetching the
/// incidents the key moves between when it is first pressed); the new window.
async fn press_until_the_window_moves(c: &fantoccini::Client, key: char) -> (f64, f64) {
    let before = window(c).await;
    for _ in 0..10 {
        press(c, &[key]).await;
        for _ in 0..60 {
            if window(c).await != before {
                return window_after(c, before, &key.to_string()).await.unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    panic!("{key}: the window did not change");
}

/// Clicks the page's tab line (nothing happens there), as a person who has just opened the page
/// would before typing: the keys then go to the page.
async fn focus_page(c: &fantoccini::Client) {
    wait_js(c, "document.querySelector('.tab-about')", "the page").await;
    c.find(fantoccini::Locator::Css(".tab-about"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

async fn view_is(c: &fantoccini::Client, view: &str) {
    wait_js(
        c,
        &format!("(new URLSearchParams(location.search).get('view') || 'overview') === '{view}' && document.querySelector('.tab.active[data-tab=\"{view}\"]')"),
        view,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_finds_the_recipe_the_words_and_a_line_per_tab() {
    let lab = lab("help").await;
    let base = lab.base.clone();
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&base).await.unwrap();

    // The empty library says how to record a snapshot, in Python to copy.
    let recipe = wait_js(
        &c,
        "document.querySelector('.recipe-code')?.innerText",
        "the recipe",
    )
    .await;
    let recipe = recipe.as_str().unwrap();
    assert!(
        recipe.contains("torch.cuda.memory._record_memory_history("),
        "{recipe}"
    );
    assert!(
        recipe.contains("torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")"),
        "{recipe}"
    );
    screenshot(&c, "newcomer/empty-library-recipe").await;

    // Upload: the page lands on the answer (the OOM), then "?" opens the help.
    upload(&c, &fixture("oom_fraction.pickle")).await;
    view_is(&c, "oom").await;
    wait_js(&c, "document.querySelector('.oom.first')", "the OOM report").await;
    press(&c, &['?']).await;
    wait_js(
        &c,
        "document.querySelector('.help-overlay')",
        "the help overlay",
    )
    .await;
    let help = c
        .execute(
            "return { shortcuts: document.querySelectorAll('.help-overlay table.shortcuts tr').length, \
             terms: [...document.querySelectorAll('.glossary-entry')].map(e => e.id) };",
            vec![],
        )
        .await
        .unwrap();
    assert!(help["shortcuts"].as_u64().unwrap() >= 8, "{help}");
    for term in [
        "reserved",
        "allocated",
        "active",
        "inactive-split",
        "pending-free",
        "rounding-waste",
        "fragmentation",
        "expandable-segments",
    ] {
        let id = format!("glossary-{term}");
        assert!(
            help["terms"].as_array().unwrap().iter().any(|t| t == &id),
            "{id} missing: {help}"
        );
    }
    screenshot(&c, "newcomer/help-overlay").await;
    press(&c, &[Key::Escape.into()]).await;
    wait_js(
        &c,
        "!document.querySelector('.help-overlay')",
        "Esc to close the help",
    )
    .await;

    // A figure's label opens the glossary at its word.
    click(&c, ".tab[data-tab='overview']").await;
    view_is(&c, "overview").await;
    wait_js(
        &c,
        "document.querySelector('.kv .term[data-term=\"reserved\"]')",
        "the labelled figures",
    )
    .await;
    click(&c, ".kv .term[data-term='reserved']").await;
    let shown = wait_js(
        &c,
        "(() => { const e = document.querySelector('#glossary-reserved.marked'); if (!e) return null; \
         const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight ? e.innerText : null; })()",
        "the glossary at 'reserved', in view",
    )
    .await;
    assert!(
        shown.as_str().unwrap().contains("memory_reserved"),
        "{shown}"
    );
    click(&c, ".help-close").await;
    wait_js(
        &c,
        "!document.querySelector('.help-overlay')",
        "the close button",
    )
    .await;
    // Every labelled figure names a word the glossary has.
    let unknown = c
        .execute(
            "const ids = new Set(); document.querySelectorAll('.term').forEach(t => ids.add(t.dataset.term)); \
             return [...ids].filter(k => !document.querySelector('.term[data-term=\"' + k + '\"]').title);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(unknown, serde_json::json!([]), "terms without a meaning");

    // Each tab says what it shows, in its own words.
    let mut abouts = std::collections::HashSet::new();
    for tab in TABS {
        click(&c, &format!(".tab[data-tab='{tab}']")).await;
        view_is(&c, tab).await;
        let about = wait_js(
            &c,
            "document.querySelector('.tab-about')?.innerText",
            "the tab's line",
        )
        .await;
        let about = about.as_str().unwrap().to_string();
        assert!(about.len() > 60, "{tab}: {about}");
        assert!(abouts.insert(about), "{tab}'s line is another tab's");
    }
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyboard_moves_through_tabs_the_timeline_and_the_incidents() {
    let lab = lab("keys").await;
    let base = lab.base.clone();
    let oom = upload_api(&base, "oom_fraction.pickle").await;
    let leak = upload_api(&base, "leak_detached_cache.pickle").await;
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;

    // 2: the timeline, drawn over the whole trace.
    c.goto(&format!("{base}/s/{leak}")).await.unwrap();
    view_is(&c, "overview").await;
    focus_page(&c).await;
    press(&c, &['2']).await;
    view_is(&c, "timeline").await;
    wait_js(&c, &format!("{CANVAS_PIXELS} > 5000"), "the timeline").await;
    assert_eq!(window(&c).await, None);
    // The whole trace behind the window (the mini-map, the keys' bounds) is fetched once.
    assert_eq!(whole_trace_fetches(&c).await, 1);

    // + zooms in around the middle (half as wide each time), - back out.
    press(&c, &['+']).await;
    let (a1, b1) = window_after(&c, None, "+").await.unwrap();
    press(&c, &['+']).await;
    let (a2, b2) = window_after(&c, Some((a1, b1)), "+ again").await.unwrap();
    let ratio = (b2 - a2) / (b1 - a1);
    assert!(
        (ratio - 0.5).abs() < 0.01,
        "zoom in halves the window: {ratio}"
    );
    assert!(
        ((a2 + b2) / 2.0 - (a1 + b1) / 2.0).abs() <= (b1 - a1) * 0.01,
        "around the middle"
    );
    // → pans a quarter of the window, Shift+← a whole window back.
    press(&c, &[Key::Right.into()]).await;
    let (a3, b3) = window_after(&c, Some((a2, b2)), "→").await.unwrap();
    assert!(
        ((a3 - a2) / (b2 - a2) - 0.25).abs() < 0.01,
        "→ pans a quarter: {a2} → {a3}"
    );
    assert!(((b3 - a3) - (b2 - a2)).abs() < 2.0, "same width");
    press(&c, &[Key::Shift.into(), Key::Left.into()]).await;
    let (a4, _) = window_after(&c, Some((a3, b3)), "Shift+←").await.unwrap();
    assert!(
        ((a3 - a4) / (b3 - a3) - 1.0).abs() < 0.01,
        "Shift+← pans a window: {a3} → {a4}"
    );
    let before = window(&c).await;
    assert_eq!(before.map(|w| w.0), Some(a4));
    press(&c, &['-']).await;
    let (a5, b5) = window_after(&c, before, "-").await.unwrap();
    assert!(
        ((b5 - a5) / (b3 - a3) - 2.0).abs() < 0.01,
        "- doubles the window"
    );
    // 0: the whole trace again.
    whole_trace(&c, "0 for the whole trace").await;
    // Once more for the keys, when the first zoom wrote the axis into the address; not for each
    // key. A key that rebuilt the chart fetched the whole trace again (7 times here), and keys
    // pressed before that came back were dropped: the `+ + →` below failed so on a loaded machine.
    assert_eq!(
        whole_trace_fetches(&c).await,
        2,
        "the keys fetched the whole trace again"
    );

    // Keys pressed faster than the server answers build on each other: two `+` and a `→` in
    // one turn of the page's event loop, so that no answer can arrive between them, give the
    // middle quarter of the trace moved by a quarter of itself (read from the window drawn,
    // the second `+` zoomed the whole trace again and was lost).
    c.execute(
        "const k = key => window.dispatchEvent(new KeyboardEvent('keydown', {key})); \
         k('+'); k('+'); k('ArrowRight');",
        vec![],
    )
    .await
    .unwrap();
    // The keys set the address as they ran: it is read after them, whatever has been drawn.
    let (fast_a, fast_b) = window(&c).await.unwrap();
    let whole = 2.0 * (b1 - a1);
    let start = a1 - whole / 4.0;
    let (want_a, want_b) = (start + whole * 7.0 / 16.0, start + whole * 11.0 / 16.0);
    assert!(
        (fast_a - want_a).abs() <= 2.0 && (fast_b - want_b).abs() <= 2.0,
        "+ + → at once: {fast_a}..{fast_b}, want {want_a}..{want_b}"
    );
    whole_trace(&c, "0 for the whole trace, again").await;
    // So do the wheel's turns: two in one turn of the event loop zoom twice (0.7 × 0.7 of the
    // width), each keeping the moment under the pointer where it was.
    c.execute(
        "const c = document.getElementById('timeline-canvas'); const r = c.getBoundingClientRect(); \
         const turn = () => c.dispatchEvent(new WheelEvent('wheel', {clientX: r.left + r.width * 0.9, \
           clientY: r.top + 100, deltaY: -100, bubbles: true, cancelable: true})); \
         turn(); turn();",
        vec![],
    )
    .await
    .unwrap();
    let (wheel_a, wheel_b) = window(&c).await.unwrap();
    let ratio = (wheel_b - wheel_a) / whole;
    assert!(
        (ratio - 0.49).abs() < 0.001,
        "two wheel turns at once: {ratio} of the width, want 0.49"
    );
    // The moment that stayed under the pointer, as a fraction of the window: the same in the
    // whole trace and in the zoomed window, near the pointer's 90 %.
    let pointer = (wheel_a - start) / (whole - (wheel_b - wheel_a));
    assert!(
        (0.8..1.0).contains(&pointer),
        "the pointer's moment kept: {pointer}"
    );
    whole_trace(&c, "0 after the wheel").await;

    // n: the window moves to the leak suspect's last allocation.
    let r = report(&base, &leak).await;
    let leak_at = r["leak_suspects"][0]["last_time_us"].as_f64().unwrap();
    wait_js(
        &c,
        &format!("{CANVAS_PIXELS} > 5000"),
        "the whole trace drawn",
    )
    .await;
    let (a, b) = press_until_the_window_moves(&c, 'n').await;
    assert!(
        a <= leak_at && leak_at <= b,
        "n shows the leak: {a}..{b} ∌ {leak_at}"
    );
    assert!(
        ((a + b) / 2.0 - leak_at).abs() <= (b - a) * 0.01,
        "centred on it"
    );
    screenshot(&c, "newcomer/keys-n-to-the-leak").await;

    // /: on the timeline, its allocation filter; Esc leaves it.
    press(&c, &['/']).await;
    wait_js(
        &c,
        "document.activeElement?.classList.contains('filter')",
        "/ focuses the filter",
    )
    .await;
    c.execute("document.activeElement.blur()", vec![])
        .await
        .unwrap();

    // The OOM snapshot: 6 opens its OOM tab, n marks the incident.
    c.goto(&format!("{base}/s/{oom}")).await.unwrap();
    view_is(&c, "overview").await;
    focus_page(&c).await;
    press(&c, &['6']).await;
    view_is(&c, "oom").await;
    wait_js(&c, "document.querySelector('.oom')", "the OOM incident").await;
    press(&c, &['n']).await;
    wait_js(
        &c,
        "document.querySelector('.oom.focused')",
        "n marks the OOM",
    )
    .await;
    // Its timeline: n goes to the OOM.
    let oom_at = report(&base, &oom).await["ooms"][0]["time_us"]
        .as_f64()
        .unwrap();
    press(&c, &['2']).await;
    view_is(&c, "timeline").await;
    wait_js(&c, &format!("{CANVAS_PIXELS} > 5000"), "the timeline").await;
    let (a, b) = press_until_the_window_moves(&c, 'n').await;
    assert!(
        a <= oom_at && oom_at <= b,
        "n shows the OOM: {a}..{b} ∌ {oom_at}"
    );

    // / elsewhere: the Stacks tab, its call-site search focused; typing filters the sites (the
    // leak's snapshot: eight call sites).
    c.goto(&format!("{base}/s/{leak}")).await.unwrap();
    view_is(&c, "overview").await;
    focus_page(&c).await;
    press(&c, &['/']).await;
    view_is(&c, "stacks").await;
    wait_js(
        &c,
        "document.activeElement?.classList.contains('site-search')",
        "/ focuses the search",
    )
    .await;
    let all = wait_js(
        &c,
        "document.querySelectorAll('table.sites tr').length - 1",
        "the call sites",
    )
    .await;
    let all = all.as_u64().unwrap();
    assert!(all >= 2, "{all} sites");
    for ch in "no-such-line".chars() {
        press(&c, &[ch]).await;
    }
    wait_js(&c, "document.querySelectorAll('table.sites tr').length === 1 && /^0 of \\d+ call sites match/.test(document.querySelector('.sites-count').innerText)", "nothing matches").await;
    press(&c, &[Key::Escape.into()]).await;
    wait_js(&c, &format!("document.querySelectorAll('table.sites tr').length - 1 === {all} && document.activeElement?.classList?.contains('site-search') === false"), "Esc clears the search").await;
    for ch in "gen_snapshots.py:126".chars() {
        c.execute("document.querySelector('.site-search').focus()", vec![])
            .await
            .unwrap();
        press(&c, &[ch]).await;
    }
    let left = wait_js(&c, "(() => { const n = document.querySelectorAll('table.sites tr').length - 1; return n >= 1 ? n : 0; })()", "the line's sites").await;
    assert!(left.as_u64().unwrap() < all, "the search narrows the sites");
    let rows_match = c
        .execute(
            "return [...document.querySelectorAll('table.sites tr')].slice(1).every(r => r.innerText.includes('gen_snapshots.py:126'));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(rows_match, serde_json::json!(true));
    // Keys typed into the search are the search's, not shortcuts.
    assert!(
        c.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("view=stacks")
    );

    // ? and Esc from anywhere.
    c.execute("document.activeElement.blur()", vec![])
        .await
        .unwrap();
    press(&c, &['?']).await;
    wait_js(&c, "document.querySelector('.help-overlay')", "?").await;
    press(&c, &['3']).await; // with the help open, keys are not shortcuts
    press(&c, &[Key::Escape.into()]).await;
    wait_js(&c, "!document.querySelector('.help-overlay')", "Esc").await;
    assert!(
        c.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("view=stacks")
    );
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// The lowest text contrast on the page (WCAG 2 ratio of each visible text element's colour to
/// the first opaque background behind it), with the element that has it.
const LOWEST_CONTRAST: &str = r#"(() => {
  const rgb = s => (s.match(/[\d.]+/g) || []).map(Number);
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const bg = e => { for (; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
    if (c.length >= 3 && (c.length < 4 || c[3] > 0.5)) return c; } return [255, 255, 255]; };
  let worst = { ratio: 99, what: '' };
  for (const e of document.querySelectorAll('main *, header *')) {
    if (!e.offsetParent && e.tagName !== 'BODY') continue;
    const own = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim().length > 1);
    if (!own || e.closest('pre.cmd, .help-backdrop, header.top, option, select')) continue;
    const s = getComputedStyle(e);
    if (s.visibility === 'hidden' || Number(s.opacity) < 0.6) continue;
    const a = lum(rgb(s.color)), b = lum(bg(e));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < worst.ratio) worst = { ratio, what: e.tagName + '.' + e.className + ': ' + e.textContent.trim().slice(0, 40) };
  }
  return worst;
})()"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tab_reads_in_light_and_dark_and_fits_1280_and_1920() {
    let lab = lab("themes").await;
    let base = lab.base.clone();
    let id = upload_api(&base, "oom_fraction.pickle").await;
    let other = upload_api(&base, "fragmentation.pickle").await;
    // The other pages, beside the snapshot's tabs: (name, path, what shows it is drawn).
    let pages = [
        (
            "library",
            "/".to_string(),
            "document.querySelector('table.snapshots tr td')",
        ),
        (
            "diff",
            format!("/diff/{other}/{id}"),
            "document.querySelector('.diff table tr td')",
        ),
        (
            "fit",
            "/fit".to_string(),
            "document.querySelector('.fit h1')",
        ),
        (
            "live",
            "/live".to_string(),
            "document.querySelector('.live')",
        ),
    ];
    let mut contrast = Vec::new();
    for (theme, width) in [
        (Theme::Light, 1280),
        (Theme::Dark, 1280),
        (Theme::Light, 1920),
        (Theme::Dark, 1920),
    ] {
        let name = format!(
            "{}-{width}",
            if theme == Theme::Dark {
                "dark"
            } else {
                "light"
            }
        );
        let c = lab
            .browser(theme, (width, 1000), &format!("profile-{name}"))
            .await;
        let views = TABS
            .iter()
            .map(|t| (t.to_string(), format!("/s/{id}?view={t}"), ""))
            .chain(pages.iter().map(|(n, p, r)| (n.to_string(), p.clone(), *r)));
        for (tab, path, page_ready) in views {
            let tab = tab.as_str();
            c.goto(&format!("{base}{path}")).await.unwrap();
            if page_ready.is_empty() {
                view_is(&c, tab).await;
            }
            let ready = match tab {
                _ if !page_ready.is_empty() => page_ready,
                "timeline" => {
                    "document.querySelector('#timeline-canvas') && document.querySelectorAll('.timeline table tr').length > 1"
                }
                "segments" => "document.querySelector('.segrow .block')",
                "stacks" => "document.querySelector('table.sites tr td')",
                "leaks" => "document.querySelector('.suspect')",
                "oom" => "document.querySelector('.oom')",
                "whatif" => "document.querySelector('table.whatif-runs tr.run')",
                _ => {
                    "document.querySelector('.headline .sentence') && document.querySelector('table.settings')"
                }
            };
            wait_js(&c, ready, &format!("{tab} at {name}")).await;
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let dark = c
                .execute(
                    "return matchMedia('(prefers-color-scheme: dark)').matches;",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(dark, serde_json::json!(theme == Theme::Dark), "{name}");
            // Nothing wider than the window.
            let over = c
                .execute(
                    "return document.documentElement.scrollWidth - innerWidth;",
                    vec![],
                )
                .await
                .unwrap();
            assert!(
                over.as_i64().unwrap() <= 0,
                "{tab} at {name}: {over} px wider than the window"
            );
            let worst = c
                .execute(&format!("return {LOWEST_CONTRAST};"), vec![])
                .await
                .unwrap();
            let ratio = worst["ratio"].as_f64().unwrap();
            contrast.push(format!("{tab} {name}: {ratio:.2} ({})", worst["what"]));
            assert!(
                ratio >= 4.5,
                "{tab} at {name}: text contrast {ratio:.2} < 4.5: {}",
                worst["what"]
            );
            // The charts take the column's width.
            if width == 1920 && tab == "timeline" {
                let w = c
                    .execute("return document.getElementById('timeline-canvas').getBoundingClientRect().width;", vec![])
                    .await
                    .unwrap();
                assert!(
                    w.as_f64().unwrap() >= 1800.0,
                    "the timeline at 1920: {w} px"
                );
            }
            if width == 1920 && tab == "segments" {
                let w = c
                    .execute("return document.getElementById('segment-timeline').getBoundingClientRect().width;", vec![])
                    .await
                    .unwrap();
                assert!(
                    w.as_f64().unwrap() >= 1800.0,
                    "the segments' chart at 1920: {w} px"
                );
            }
            screenshot(&c, &format!("newcomer/{tab}-{name}")).await;
        }
        assert_eq!(console_errors(&c).await, Vec::<String>::new(), "{name}");
        c.close().await.unwrap();
    }
    eprintln!("lowest text contrast per view:\n{}", contrast.join("\n"));
}

/// The small things that broke a first impression: long library names that differ at their end,
/// a tag that is not `key=value`, renames confirmed, GPU sizes that say where they come from, the
/// "GPU size unknown" banner where a process limit stopped the run, "the timeline around it"
/// zoomed to the OOM, an unknown address answered by the app's own page, the favicon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_small_breaks_of_a_first_visit_are_fixed() {
    let lab = lab("small").await;
    let base = lab.base.clone();
    // Two names that share their first 30 characters.
    let limit = upload_api(&base, "oom_fraction.pickle").await;
    let free = upload_api(&base, "fragmentation.pickle").await;
    for (id, name) in [
        (&limit, "resnet50_bs64_fraction_half_run.limit"),
        (&free, "resnet50_bs64_fraction_half_run.free"),
    ] {
        let (status, body) = crate::support::patch(
            &base,
            &format!("/api/snapshots/{id}"),
            serde_json::json!({ "name": name }),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&base).await.unwrap();
    wait_js(
        &c,
        "document.querySelectorAll('table.snapshots input.name').length == 2",
        "the library",
    )
    .await;
    // Each name shown whole: the field as wide as its text.
    let cut = c
        .execute(
            "return [...document.querySelectorAll('table.snapshots input.name')].filter(i => i.scrollWidth > i.clientWidth + 1).map(i => i.value);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(cut, serde_json::json!([]), "names cut");
    let over = c
        .execute(
            "return document.documentElement.scrollWidth - innerWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        over.as_i64().unwrap() <= 0,
        "the library is {over} px wider than 1280"
    );
    // A tag that is not key=value: refused, saying how to write it; the field keeps what is stored.
    c.execute(
        "const i = document.querySelector('table.snapshots input.tags'); i.value = 'nightly'; i.dispatchEvent(new Event('change'));",
        vec![],
    )
    .await
    .unwrap();
    let refused = wait_js(
        &c,
        "document.querySelector('.save-status.error')?.innerText",
        "the refusal",
    )
    .await;
    assert!(
        refused
            .as_str()
            .unwrap()
            .contains("\"nightly\" is not key=value"),
        "{refused}"
    );
    // A rename is confirmed.
    c.execute(
        "const i = document.querySelector('table.snapshots input.name'); i.value = 'renamed run'; i.dispatchEvent(new Event('change'));",
        vec![],
    )
    .await
    .unwrap();
    let saved = wait_js(
        &c,
        "document.querySelector('.save-status.ok')?.innerText",
        "the rename's confirmation",
    )
    .await;
    assert!(
        saved.as_str().unwrap().contains("renamed to “renamed run”"),
        "{saved}"
    );
    screenshot(&c, "newcomer/library-names-and-tags").await;

    // The OOM of a per-process fraction: no "which GPU was it?" banner, but why it is not needed.
    c.goto(&format!("{base}/s/{limit}?view=oom")).await.unwrap();
    let note = wait_js(
        &c,
        "document.querySelector('.process-limit')?.innerText",
        "the process-limit note",
    )
    .await;
    assert!(
        note.as_str().unwrap().contains("not the GPU's size"),
        "{note}"
    );
    assert_eq!(
        c.execute(
            "return document.querySelector('.device-total') === null;",
            vec![]
        )
        .await
        .unwrap(),
        serde_json::json!(true)
    );
    // "The timeline around it": zoomed to the OOM.
    let r = report(&base, &limit).await;
    let (oom_at, first) = (
        r["ooms"][0]["time_us"].as_f64().unwrap(),
        r["devices"]["0"]["first_time_us"].as_f64().unwrap(),
    );
    click(&c, ".oom-timeline").await;
    view_is(&c, "timeline").await;
    let (a, b) = window(&c).await.unwrap();
    assert!(a <= oom_at && oom_at <= b, "{a}..{b} ∌ the OOM at {oom_at}");
    assert!(
        b - a < (oom_at - first) / 4.0,
        "zoomed: {} of {}",
        b - a,
        oom_at - first
    );
    wait_js(&c, &format!("{CANVAS_PIXELS} > 5000"), "drawn").await;
    screenshot(&c, "newcomer/timeline-around-the-oom").await;

    // GPU sizes say where they come from (the will-it-fit picker; the OOM one is the same list).
    c.goto(&format!("{base}/fit")).await.unwrap();
    let options = wait_js(
        &c,
        "(() => { const o = [...document.querySelectorAll('select.gpu-model option[data-source]')]; return o.length ? o.map(x => [x.value, x.dataset.source, x.title, x.innerText]) : null; })()",
        "the GPU presets",
    )
    .await;
    for o in options.as_array().unwrap() {
        let (name, how, title, text) = (
            o[0].as_str().unwrap(),
            o[1].as_str().unwrap(),
            o[2].as_str().unwrap(),
            o[3].as_str().unwrap(),
        );
        assert!(text.ends_with(&format!("({how})")), "{text}");
        let measured = name.starts_with("H100 (80") || name.starts_with("H200");
        assert_eq!(how, if measured { "measured" } else { "listed" }, "{name}");
        assert!(
            title.contains(if measured {
                "measured on a real device"
            } else {
                "not measured here"
            }),
            "{title}"
        );
    }

    // An address the app has no page at: its own page, status 404, with the ways in.
    let (status, _) = get(&base, "/no/such/page").await;
    assert_eq!(status, 404);
    c.goto(&format!("{base}/no/such/page")).await.unwrap();
    let text = wait_js(
        &c,
        "document.querySelector('.not-found')?.innerText",
        "the not-found page",
    )
    .await;
    assert!(text.as_str().unwrap().contains("/no/such/page"), "{text}");
    let links = c
        .execute("return [...document.querySelectorAll('.not-found a')].map(a => a.getAttribute('href'));", vec![])
        .await
        .unwrap();
    assert_eq!(links, serde_json::json!(["/", "/live", "/fit"]));
    screenshot(&c, "newcomer/not-found").await;
    // The favicon the page links to is served as an image.
    let icon = c
        .execute(
            "return fetch(document.querySelector('link[rel=icon]').href).then(r => [r.status, r.headers.get('content-type')]);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(icon, serde_json::json!([200, "image/svg+xml"]));
    // The 404 of the page itself is the one console line; nothing else went wrong.
    let errors: Vec<String> = console_errors(&c)
        .await
        .into_iter()
        .filter(|e| !(e.contains("/no/such/page") && e.contains("404")))
        .collect();
    assert_eq!(errors, Vec::<String>::new());
    c.close().await.unwrap();
}

/// Streams by name (the default stream, side stream N) wherever the segments view says which
/// stream, and `record_stream` explained where pending frees are: the multistream recording
/// (tensors used on a side stream with record_stream; a block still pending at the snapshot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_named_and_pending_frees_explained() {
    let lab = lab("streams").await;
    let base = lab.base.clone();
    let id = upload_api(&base, "multistream.pickle").await;
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&format!("{base}/s/{id}?view=segments"))
        .await
        .unwrap();
    let note = wait_js(
        &c,
        "document.querySelector('.pending-note')?.innerText",
        "the pending-free note",
    )
    .await;
    let note = note.as_str().unwrap();
    assert!(note.contains("record_stream"), "{note}");
    assert!(note.contains("freed in Python but still pending"), "{note}");
    // The state's own count of pending blocks is the note's.
    let (_, state) = get(&base, &format!("/api/snapshots/{id}/state")).await;
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    let pending = state["segments"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["blocks"].as_array().unwrap())
        .filter(|b| b["state"] == "active_pending_free")
        .count();
    assert!(pending > 0);
    assert!(
        note.starts_with(&format!("{pending} block")),
        "{pending}: {note}"
    );
    // Every event line names its stream in words.
    let lines = wait_js(
        &c,
        "(() => { const l = [...document.querySelectorAll('ol.event-list li')].map(x => x.innerText); return l.length ? l : null; })()",
        "the events around",
    )
    .await;
    for l in lines.as_array().unwrap() {
        let l = l.as_str().unwrap();
        assert!(
            l.contains("default stream") || l.contains("side stream "),
            "{l}"
        );
        assert!(!l.contains(", stream "), "{l}");
    }
    screenshot(&c, "newcomer/streams-and-pending-frees").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// A first-time user's path, counted: the empty library says how to record; choosing the file is
/// the one action; the page lands on the OOM's verdict, which names the line that kept growing
/// (the recording's truth: line 181) and what to do — under five actions, each step a screenshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_visit_goes_from_empty_library_to_the_line_to_fix_in_under_five_actions() {
    let lab = lab("path").await;
    let base = lab.base.clone();
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    let mut actions = 0;
    c.goto(&base).await.unwrap();
    // 0 actions: the recipe is the first thing the empty library says.
    wait_js(&c, "document.querySelector('.recipe-code')", "the recipe").await;
    screenshot(&c, "newcomer/path-1-empty-library").await;
    // 1: choose the file the recipe dumped.
    upload(&c, &fixture("oom_fraction.pickle")).await;
    actions += 1;
    // No click: the upload lands on its answer, the OOM's verdict.
    view_is(&c, "oom").await;
    let verdict = wait_js(
        &c,
        "document.querySelector('.oom.first .verdict')?.dataset.verdict",
        "the verdict",
    )
    .await;
    assert_eq!(verdict, "growth");
    let card = wait_js(
        &c,
        "document.querySelector('.oom.first').innerText",
        "the card",
    )
    .await;
    let card = card.as_str().unwrap();
    // The line to fix: the growing line the recording planted (gen_snapshots.py:181), and advice.
    assert!(card.contains("gen_snapshots.py:181"), "{card}");
    assert!(card.contains("What to do"), "{card}");
    screenshot(&c, "newcomer/path-2-verdict-and-line").await;
    assert!(actions < 5, "{actions} actions");
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// Every process link on the live pages leads to a page that answers (issue 40: "today every
/// pid link 404s and the page polls errors into the console"): the planted scenario, a process
/// with the agent and one NVML alone sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_link_of_the_live_pages_opens_a_page() {
    let lab = lab("livelinks").await;
    let base = lab.base.clone();
    let (mut nvml, agent) = crate::support::scenario::scenario(server::now_ms() - 119_000);
    // A process NVML alone sees and cannot name (another PID namespace, a container): no
    // name, no start time.
    let readings: Vec<wire::ProcessSample> = nvml
        .processes
        .iter()
        .filter(|p| p.pid == 200)
        .map(|p| wire::ProcessSample {
            pid: 300,
            name: None,
            start_time_ms: None,
            ..p.clone()
        })
        .collect();
    nvml.processes.extend(readings);
    assert_eq!(crate::support::post_batch(&base, &nvml).await, 200);
    assert_eq!(crate::support::post_batch(&base, &agent).await, 200);
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    let mut links = std::collections::BTreeSet::new();
    for page in ["/live", "/live/gpu/GPU-aaa"] {
        c.goto(&format!("{base}{page}")).await.unwrap();
        let found = wait_js(
            &c,
            "(() => { const l = [...document.querySelectorAll('a[href^=\"/live/process/\"]')].map(a => a.getAttribute('href')); return l.length ? l : null; })()",
            page,
        )
        .await;
        links.extend(
            found
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap().to_string()),
        );
    }
    eprintln!("process links: {links:?}");
    for link in &links {
        c.goto(&format!("{base}{link}")).await.unwrap();
        wait_js(
            &c,
            "document.querySelector('.live h1, .live h2') && !document.body.innerText.includes('loading')",
            link,
        )
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let errors = console_errors(&c).await;
        let text = c
            .execute("return document.querySelector('main').innerText;", vec![])
            .await
            .unwrap();
        assert!(errors.is_empty(), "{link}: {errors:?}\n{text}");
        assert!(
            !text.as_str().unwrap().contains("no process"),
            "{link}: {text}"
        );
    }
    c.close().await.unwrap();
}

/// Frees stuck pending, listed over the whole trace: the harness's planted `record_stream` free
/// (64 MiB, still pending at the snapshot, truth.json) is the first row; a click shows its block
/// selected in the segment map while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_frees_are_listed_and_a_click_shows_the_block_waiting() {
    let lab = lab("pending").await;
    let base = lab.base.clone();
    let id = upload_api(&base, "harness/side_stream.pickle").await;
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("harness/side_stream.truth.json")).unwrap())
            .unwrap();
    let (_, spans) = get(&base, &format!("/api/snapshots/{id}/segments")).await;
    let spans: serde_json::Value = serde_json::from_str(&spans).unwrap();
    let pending = &spans["pending"];
    assert_eq!(pending["still_pending"], 1, "{pending}");
    assert_eq!(
        pending["frees"][0]["size"],
        truth["expect"]["pending_free_bytes"]
    );
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&format!("{base}/s/{id}?view=segments&pos=0"))
        .await
        .unwrap();
    let row = wait_js(
        &c,
        "document.querySelector('tr.pending-row')?.innerText",
        "the stuck frees",
    )
    .await;
    let row = row.as_str().unwrap();
    let line = format!("scenarios.py:{}", truth["expect"]["line"]);
    assert!(
        row.contains("64.0 MiB") && row.contains("still pending") && row.contains(&line),
        "{row}"
    );
    assert!(row.contains("default stream"), "{row}");
    let summary = wait_js(
        &c,
        "document.querySelector('section.pending-frees p').innerText",
        "the summary",
    )
    .await;
    assert!(
        summary
            .as_str()
            .unwrap()
            .contains("1 free was still pending when the snapshot was taken"),
        "{summary}"
    );
    click(&c, "tr.pending-row").await;
    let n = pending["frees"][0]["allocation"].as_u64().unwrap();
    let at = pending["frees"][0]["requested_event"].as_u64().unwrap() + 1;
    wait_js(
        &c,
        &format!(
            "new URLSearchParams(location.search).get('sel') === '{n}' && new URLSearchParams(location.search).get('pos') === '{at}'"
        ),
        "the selection in the address",
    )
    .await;
    let block = wait_js(
        &c,
        "document.querySelector('.block.selected')?.className",
        "the selected block",
    )
    .await;
    assert!(
        block.as_str().unwrap().contains("active_pending_free"),
        "{block}"
    );
    let sel = wait_js(
        &c,
        "document.querySelector('.selection')?.innerText",
        "the selection's line",
    )
    .await;
    let sel = sel.as_str().unwrap();
    assert!(
        sel.contains(&format!("allocation #{n}")) && sel.contains("still pending here"),
        "{sel}"
    );
    screenshot(&c, "newcomer/stuck-frees").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// A selection follows the allocation, not the address: a block freed and its address taken by a
/// later tensor is not outlined there; going to the event that made it outlines it again. The
/// reused address is found through the API (a training loop reuses addresses every step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selection_stays_on_its_allocation_when_the_address_is_reused() {
    let lab = lab("select").await;
    let base = lab.base.clone();
    let id = upload_api(&base, "harness/steady.pickle").await;
    // Two allocations at one address: A freed, then B made there.
    let mut seen: Vec<serde_json::Value> = Vec::new();
    let mut found = None;
    'search: for n in 0..2000 {
        let (status, body) = get(&base, &format!("/api/snapshots/{id}/allocations/{n}")).await;
        if status == 400 {
            break;
        }
        assert_eq!(status, 200, "{body}");
        let b: serde_json::Value = serde_json::from_str(&body).unwrap();
        for a in &seen {
            let freed_before = a["free_event"]
                .as_u64()
                .zip(b["alloc_event"].as_u64())
                .is_some_and(|(f, m)| f < m);
            if a["address"] == b["address"] && freed_before && !a["alloc_event"].is_null() {
                found = Some((a.clone(), b.clone()));
                break 'search;
            }
        }
        seen.push(b);
    }
    let (a, b) = found.expect("an address used by two allocations");
    let (n, other) = (
        a["allocation"].as_u64().unwrap(),
        b["allocation"].as_u64().unwrap(),
    );
    // Just after B was made: its block sits where A's was.
    let end = b["alloc_event"].as_u64().unwrap() + 1;
    let (_, state) = get(&base, &format!("/api/snapshots/{id}/state?position={end}")).await;
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    let at = state["segments"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["blocks"].as_array().unwrap())
        .find(|blk| blk["address"] == a["address"] && blk["state"] == "active_allocated")
        .expect("a block at A's address");
    assert_eq!(at["allocation"].as_u64(), Some(other));
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&format!("{base}/s/{id}?view=segments&pos={end}&sel={n}"))
        .await
        .unwrap();
    let sel = wait_js(
        &c,
        "document.querySelector('.selection')?.innerText",
        "the selection's line",
    )
    .await;
    assert!(
        sel.as_str().unwrap().contains("freed before this event"),
        "{sel}"
    );
    // The map is there and outlines nothing: the block at that address is allocation `other`.
    wait_js(&c, "document.querySelector('.segmap .block')", "the map").await;
    assert_eq!(
        c.execute(
            "return document.querySelectorAll('.block.selected').length",
            vec![]
        )
        .await
        .unwrap(),
        0,
        "allocation {other} holds the address now, not {n}"
    );
    // Its allocation event: alive there, outlined (scrolled into the list's view).
    click(&c, "button.sel-alloc").await;
    let made = a["alloc_event"].as_u64().unwrap() + 1;
    wait_js(
        &c,
        &format!("new URLSearchParams(location.search).get('pos') === '{made}' && document.querySelector('.block.selected')"),
        "the block outlined where it was made",
    )
    .await;
    let alive = wait_js(
        &c,
        "document.querySelector('.selection .sel-where')?.innerText",
        "where it is",
    )
    .await;
    assert!(
        alive.as_str().unwrap().starts_with("alive at this event"),
        "{alive}"
    );
    // A click on another block selects that one instead.
    c.execute(
        "const b = [...document.querySelectorAll('.segmap .block.active_allocated')].find(b => !b.classList.contains('selected')); b.click();",
        vec![],
    )
    .await
    .unwrap();
    wait_js(
        &c,
        &format!("new URLSearchParams(location.search).get('sel') !== '{n}' && document.querySelectorAll('.block.selected').length === 1"),
        "another block selected",
    )
    .await;
    screenshot(&c, "newcomer/selection").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// Python mode is Python: a GPT step recorded with C++ and Python frames, read with Python
/// frames (the default where a snapshot has them). No call site shown is a C++ function — the
/// stacks table, the timeline's largest allocations, the segments tab's event line — and the
/// backward pass's allocations (only C++ frames, on autograd's thread) read as notes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_python_frames_no_call_site_is_a_cpp_function() {
    let lab = lab("python").await;
    let base = lab.base.clone();
    let id = upload_api(&base, "categories/gpt_bf16_adamw.all.pickle.xz").await;
    // A C++ name as a call site: `ns::Node::apply`, `XBackward0`, `op (op)`.
    let cpp = "/::|Backward\\d|\\(op\\)/";
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&format!("{base}/s/{id}?view=stacks")).await.unwrap();
    let sites = wait_js(
        &c,
        "(() => { const r = [...document.querySelectorAll('table.sites tr td:last-child')].map(t => t.innerText); return r.length ? r : null; })()",
        "the call sites",
    )
    .await;
    let sites: Vec<&str> = sites
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        sites.iter().any(|s| s.contains("(backward of")),
        "{sites:?}"
    );
    let bad = c
        .execute(
            &format!("return [...document.querySelectorAll('table.sites tr td:last-child')].map(t => t.innerText).filter(t => {cpp}.test(t));"),
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(bad, serde_json::json!([]), "C++ sites in the stacks table");
    screenshot(&c, "newcomer/python-stacks").await;
    // The timeline's largest allocations.
    c.goto(&format!("{base}/s/{id}?view=timeline"))
        .await
        .unwrap();
    let rows = wait_js(
        &c,
        "(() => { const r = [...document.querySelectorAll('table.allocs tr td:last-child')].map(t => t.innerText); return r.length ? r : null; })()",
        "the largest allocations",
    )
    .await;
    for r in rows.as_array().unwrap() {
        let r = r.as_str().unwrap();
        assert!(!r.contains("::") && !r.contains("Backward0"), "{r}");
    }
    // The segments tab at a backward allocation: its event line names the note.
    let (_, cats) = get(&base, &format!("/api/snapshots/{id}/categories?limit=5000")).await;
    let cats: serde_json::Value = serde_json::from_str(&cats).unwrap();
    let backward = cats["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| {
            a["site"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("(backward of"))
        })
        .expect("a backward allocation alive at the peak");
    let at = backward["alloc_event"].as_u64().unwrap() + 1;
    c.goto(&format!("{base}/s/{id}?view=segments&pos={at}"))
        .await
        .unwrap();
    let line = wait_js(
        &c,
        "document.querySelector('.current-event')?.innerText",
        "the event line",
    )
    .await;
    let line = line.as_str().unwrap();
    assert!(line.contains("(backward of"), "{line}");
    let around = wait_js(
        &c,
        "(() => { const l = [...document.querySelectorAll('ol.event-list li')].map(x => x.innerText); return l.length ? l : null; })()",
        "the events around",
    )
    .await;
    for l in around.as_array().unwrap() {
        let l = l.as_str().unwrap();
        assert!(!l.contains("::") && !l.contains("Backward0"), "{l}");
    }
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// Time that matters: a 70 s trace of 1 GiB tensors each alive for a few events (the wild
/// `sqattn_emptycache`, tests/fixtures/wild). At the whole-trace zoom they are narrower than a
/// pixel, so the bands show a fraction of the live memory at its highest: the chart says how
/// much, and the density strip under it shows where memory is made, every allocation counted
/// (the engine's `density::` test checks the counts against the trace rows); hover names a
/// pixel's count and bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_of_short_lived_allocations_is_drawn_as_density() {
    let lab = lab("density").await;
    let base = lab.base.clone();
    let id = upload_api(&base, "wild/sqattn_emptycache.pickle.xz").await;
    let c = lab.browser(Theme::Light, (1280, 1000), "profile").await;
    c.goto(&format!("{base}/s/{id}?view=timeline"))
        .await
        .unwrap();
    wait_js(
        &c,
        &format!("{} > 300", crate::support::canvas_pixels("density")),
        "the density strip drawn",
    )
    .await;
    let note = wait_js(
        &c,
        "document.querySelector('.density-note')?.innerText.includes('the bands show') && document.querySelector('.density-note').innerText",
        "the note on what the bands miss",
    )
    .await;
    let note = note.as_str().unwrap();
    let pct: f64 = note
        .split("the bands show ")
        .nth(1)
        .and_then(|s| s.split('%').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{note}"));
    assert!(pct < 50.0, "{note}");
    // Hover the darkest column of the strip: it names what was made there.
    let said = c
        .execute(
            "const c = document.getElementById('density'); const g = c.getContext('2d'); \
             const d = g.getImageData(0, 0, c.width, c.height).data; let best = -1, at = 0; \
             for (let x = 0; x < c.width; x++) { const i = ((c.height >> 1) * c.width + x) * 4; \
               const ink = 765 - d[i] - d[i+1] - d[i+2]; if (x > 80 && ink > best) { best = ink; at = x; } } \
             const r = c.getBoundingClientRect(); \
             c.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + at * r.width / c.width, clientY: r.top + r.height / 2, bubbles: true })); \
             return at;",
            vec![],
        )
        .await
        .unwrap();
    assert!(said.as_u64().unwrap() > 80);
    let here = wait_js(
        &c,
        "document.querySelector('.density-note')?.innerText.startsWith('Here: ') && document.querySelector('.density-note').innerText",
        "the hovered pixel's figures",
    )
    .await;
    let here = here.as_str().unwrap();
    assert!(
        here.contains("made") && here.contains("requested") && !here.starts_with("Here: 0 "),
        "{here}"
    );
    screenshot(&c, "newcomer/density").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// Compare shows change: two ranks of one harness job (rank 1 ran out of memory), their memory
/// curves overlaid (both colours drawn, by time and by event), what ended each run side by side
/// (each report's own words), and the figures coloured by meaning: more trace events is not a
/// regression, a change of peak memory is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comparison_overlays_the_curves_and_sets_the_verdicts_side_by_side() {
    let lab = lab("compare").await;
    let base = lab.base.clone();
    let a = upload_api(&base, "harness/ranks.rank0.pickle").await;
    let b = upload_api(&base, "harness/ranks.rank1.oom.pickle").await;
    let (ra, rb) = (report(&base, &a).await, report(&base, &b).await);
    let c = lab.browser(Theme::Light, (1280, 1000), "profile").await;
    c.goto(&format!("{base}/diff/{a}/{b}")).await.unwrap();
    // Both curves on one chart: pixels of A's blue and B's orange.
    let colours = "(() => { const c = document.getElementById('overlay'); if (!c) return null; \
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let blue = 0, orange = 0; \
        for (let i = 0; i < d.length; i += 4) { const [r, g, b] = [d[i], d[i+1], d[i+2]]; \
          if (b > 200 && r < 120 && g < 150) blue++; if (r > 220 && g > 80 && g < 140 && b < 60) orange++; } \
        return blue > 50 && orange > 50 ? [blue, orange] : null; })()";
    wait_js(&c, colours, "both curves drawn by time").await;
    click(&c, "button.by-event").await;
    wait_js(
        &c,
        "document.querySelector('button.by-event.active')",
        "the event axis",
    )
    .await;
    wait_js(&c, colours, "both curves drawn by event").await;
    // What ended each run, in each report's own words.
    let outcome = wait_js(
        &c,
        "(() => { const r = document.querySelector('tr.v-outcome'); return r ? [...r.querySelectorAll('td')].map(t => t.innerText) : null; })()",
        "the outcomes side by side",
    )
    .await;
    let said = |r: &serde_json::Value| {
        r["oom_outcome"]
            .as_str()
            .unwrap_or("No OOM in the trace.")
            .to_string()
    };
    assert_eq!(outcome, serde_json::json!([said(&ra), said(&rb)]));
    let fatal = wait_js(
        &c,
        "[...document.querySelectorAll('tr.v-fatal td')].map(t => t.innerText)",
        "the fatal OOMs",
    )
    .await;
    // What a setting would have done, for both: the OOM run's answer speaks of its OOM.
    let whatif = wait_js(
        &c,
        "(() => { const r = [...document.querySelectorAll('tr.v-whatif td')].map(t => t.innerText); return r.length === 2 && !r.some(t => t.startsWith('replaying')) ? r : null; })()",
        "the what-if answers",
    )
    .await;
    let b_whatif = whatif[1].as_str().unwrap();
    assert!(
        b_whatif.contains("OOM") || b_whatif.contains("out of memory"),
        "{whatif}"
    );
    let raised = rb["ooms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["recovered"] == false)
        .expect("rank 1 raised");
    assert!(
        fatal[1]
            .as_str()
            .unwrap()
            .starts_with(raised["verdict"].as_str().unwrap()),
        "{fatal}"
    );
    // Coloured by meaning: the trace-events change is neutral, a peak's change is not.
    let cells = c
        .execute(
            "return [...document.querySelectorAll('table.diff-figures tbody tr')].map(r => [r.cells[0].innerText, r.cells[3].className, r.cells[3].innerText]);",
            vec![],
        )
        .await
        .unwrap();
    let row = |name: &str| {
        cells
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("{name}: {cells}"))
            .clone()
    };
    let events = row("trace events");
    assert!(
        events[1].as_str().unwrap().contains("neutral")
            && !events[1].as_str().unwrap().contains("up")
            && !events[1].as_str().unwrap().contains("down"),
        "{events}"
    );
    let peak = row("peak reserved bytes");
    if peak[2] != "0" {
        let class = peak[1].as_str().unwrap();
        assert!(class.contains("up") || class.contains("down"), "{peak}");
    }
    screenshot(&c, "newcomer/compare").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// Idle stretches in the middle of a trace: the H200 run that kept a side stream busy 3–90 ms
/// between its allocations (tests/fixtures/pending, truth.json) has stretches with no event,
/// shaded and counted on the time axis; "fold idle time" shows the same events by index, idle
/// time taking no room, each stretch a marked break.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_stretches_mid_trace_are_marked_and_fold() {
    let lab = lab("idle").await;
    let base = lab.base.clone();
    let id = upload_api(&base, "pending/pending_one_side.pickle").await;
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&format!("{base}/s/{id}?view=timeline"))
        .await
        .unwrap();
    let note = wait_js(
        &c,
        "document.querySelector('.idle-note')?.innerText",
        "the idle note",
    )
    .await;
    let note = note.as_str().unwrap();
    let n: usize = note
        .split(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{note}"));
    // The two longest planted waits (30 and 90 ms of a 166 ms trace) at least.
    assert!(n >= 2 && note.contains("idle stretches in view"), "{note}");
    screenshot(&c, "newcomer/idle-shaded").await;
    click(&c, "button.fold-idle").await;
    let folded = wait_js(
        &c,
        "new URLSearchParams(location.search).get('axis') === 'event' && document.querySelector('.idle-note')?.innerText.startsWith('Idle time folded') && document.querySelector('.idle-note').innerText",
        "the folded view",
    )
    .await;
    assert!(
        folded
            .as_str()
            .unwrap()
            .starts_with(&format!("Idle time folded: {n} breaks")),
        "{folded} (shaded: {note})"
    );
    wait_js(
        &c,
        &format!("{CANVAS_PIXELS} > 5000"),
        "the folded chart drawn",
    )
    .await;
    screenshot(&c, "newcomer/idle-folded").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// What held memory longest: on the H200 run of `memscope_harness.held` (`planted`: 256 MiB held
/// through the run beside ten 2 GiB tensors held ~4 ms each), the stacks tab at the peak puts the
/// 2 GiB line first; weighed by bytes × time held, the 256 MiB line comes first, the headline
/// says what the boxes weigh, the table gives each site's GiB·s and average, the choice is in
/// the URL (a reload keeps it) and the CSV carries the held columns. The engine's
/// `held_flame::` tests check the figures against the run's own clock and the trace's integral.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flame_graph_weighs_what_held_memory_longest() {
    let lab = lab("held").await;
    let base = lab.base.clone();
    let id = upload_api(&base, "held/held_planted.pickle").await;
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("held/held_planted.truth.json")).unwrap())
            .unwrap();
    let line = |name: &str| format!("held.py:{}", truth["lines"][name]);
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&format!("{base}/s/{id}?view=stacks")).await.unwrap();
    let first_site = "(() => { const t = document.querySelector('table.sites tr:nth-child(2) td:last-child summary'); return t ? t.innerText : null; })()";
    let top = wait_js(&c, first_site, "the call sites at the peak").await;
    assert!(top.as_str().unwrap().contains(&line("big")), "{top}");
    c.execute(
        "const s = document.querySelector('select.stacks-weight'); s.value = 'held'; s.dispatchEvent(new Event('change'));",
        vec![],
    )
    .await
    .unwrap();
    let headline = wait_js(
        &c,
        "(() => { const h = document.querySelector('.stacks-headline'); return h && h.innerText.startsWith('What held memory longest') ? h.innerText : null; })()",
        "the held headline",
    )
    .await;
    let headline = headline.as_str().unwrap().to_string();
    assert!(
        headline.contains("·s held over the whole trace"),
        "{headline}"
    );
    assert!(
        headline.contains("1 allocation still alive at the snapshot: counted to its last event"),
        "{headline}"
    );
    let top = wait_js(
        &c,
        &first_site.replace(
            "return t ?",
            &format!("return t && t.innerText.includes('{}') ?", line("small")),
        ),
        "the long-lived line first",
    )
    .await;
    assert!(top.as_str().unwrap().contains(&line("small")), "{top}");
    let header = c
        .execute(
            "return [...document.querySelectorAll('table.sites tr:first-child th')].map(t => t.innerText);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        header,
        serde_json::json!([
            "held ▼",
            "%",
            "average",
            "allocations",
            "allocated in all",
            "call site"
        ])
    );
    let first = c
        .execute(
            "return [...document.querySelectorAll('table.sites tr:nth-child(2) td')].map(t => t.innerText);",
            vec![],
        )
        .await
        .unwrap();
    assert!(first[0].as_str().unwrap().ends_with("iB·s"), "{first}");
    assert_eq!(first[4], "256.0 MiB", "{first}");
    // The slider and "at the peak" are for a moment; hidden here.
    let hidden = c
        .execute(
            "return [document.querySelector('input.stacks-pos').offsetParent, document.querySelector('button.at-peak').offsetParent];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(hidden, serde_json::json!([null, null]), "not drawn");
    let csv = c
        .execute(
            "return decodeURIComponent(document.querySelector('a.sites-csv').href.split(',').slice(1).join(','));",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        csv.as_str()
            .unwrap()
            .starts_with("held_byte_seconds,average_bytes_held,bytes,"),
        "{csv}"
    );
    screenshot(&c, "newcomer/stacks-held").await;
    let url = c.current_url().await.unwrap();
    assert!(url.as_str().contains("weigh=held"), "{url}");
    c.refresh().await.unwrap();
    wait_js(
        &c,
        "(() => { const h = document.querySelector('.stacks-headline'); return h && h.innerText.startsWith('What held memory longest') ? true : null; })()",
        "the held view after a reload",
    )
    .await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// More than two snapshots at once: the H200 recordings of one convnet at batch 8, 16 and 24
/// (tests/fixtures/predict, each with `torch.cuda.max_memory_allocated()` from its own process),
/// ticked in the library in any order, open one comparison that reads the batch from their
/// names, orders them by it, lists each one's peaks (the GPU's own figures), overlays the three
/// curves in three colours and sets their verdicts side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_of_batch_sizes_is_compared_at_once() {
    let lab = lab("sweep").await;
    let base = lab.base.clone();
    let sizes = [24, 8, 16];
    for b in sizes {
        upload_api(&base, &format!("predict/convnet_batch.{b}.rec.pickle.xz")).await;
    }
    let c = lab.browser(Theme::Light, (1280, 1000), "profile").await;
    c.goto(&format!("{base}/")).await.unwrap();
    wait_js(
        &c,
        "document.querySelectorAll('input.pick').length === 3",
        "three snapshots listed",
    )
    .await;
    c.execute(
        "document.querySelectorAll('input.pick').forEach(b => b.click());",
        vec![],
    )
    .await
    .unwrap();
    let link = wait_js(
        &c,
        "(() => { const a = document.querySelector('a.compare'); return a && a.innerText.includes('3 ticked') ? a.innerText : null; })()",
        "the sweep link",
    )
    .await;
    assert_eq!(link, "compare the 3 ticked snapshots (a sweep)");
    click(&c, "a.compare").await;
    let title = wait_js(
        &c,
        "document.querySelector('h1.sweep-title')?.innerText",
        "the sweep page",
    )
    .await;
    assert_eq!(title, "3 runs by batch: 8, 16, 24");
    // Each run's peaks are the GPU's: max_memory_allocated / max_memory_reserved as recorded.
    let rows = wait_js(
        &c,
        "(() => { const r = [...document.querySelectorAll('tr.sweep-row')].map(r => [...r.cells].slice(0, 3).map(c => c.innerText)); return r.length === 3 ? r : null; })()",
        "the peaks",
    )
    .await;
    for (row, b) in rows.as_array().unwrap().iter().zip([8, 16, 24]) {
        let truth: serde_json::Value = serde_json::from_slice(
            &std::fs::read(fixture(&format!("predict/convnet_batch.{b}.rec.json"))).unwrap(),
        )
        .unwrap();
        let bytes = |k: &str| {
            let v = truth[k].as_f64().unwrap();
            format!("{:.1} MiB", v / (1u64 << 20) as f64)
        };
        assert_eq!(row[0].as_str().unwrap().trim(), format!("batch = {b}"));
        assert_eq!(row[1], bytes("peak_allocated_bytes"), "batch {b}");
        assert_eq!(row[2], bytes("peak_reserved_bytes"), "batch {b}");
    }
    // Three curves on one chart, a colour each (blue, orange, green).
    let colours = "(() => { const c = document.getElementById('overlay'); if (!c || c.dataset.runs !== '3') return null; \
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let blue = 0, orange = 0, green = 0; \
        for (let i = 0; i < d.length; i += 4) { const [r, g, b] = [d[i], d[i+1], d[i+2]]; \
          if (b > 200 && r < 120 && g < 150) blue++; if (r > 220 && g > 80 && g < 140 && b < 60) orange++; \
          if (g > 130 && r < 80 && b < 90) green++; } \
        return blue > 50 && orange > 50 && green > 50 ? [blue, orange, green] : null; })()";
    wait_js(&c, colours, "three curves drawn").await;
    let outcome = wait_js(
        &c,
        "(() => { const r = document.querySelector('tr.v-outcome'); return r ? [...r.querySelectorAll('td')].map(t => t.innerText) : null; })()",
        "the verdicts side by side",
    )
    .await;
    assert_eq!(outcome.as_array().unwrap().len(), 3, "{outcome}");
    // What a setting would have done, for every run: each trace replayed (the what-if tab's
    // answer in words).
    let whatif = wait_js(
        &c,
        "(() => { const r = [...document.querySelectorAll('tr.v-whatif td')].map(t => t.innerText); return r.length === 3 && !r.some(t => t.startsWith('replaying')) ? r : null; })()",
        "the what-if answers",
    )
    .await;
    for cell in whatif.as_array().unwrap() {
        let cell = cell.as_str().unwrap();
        assert!(
            cell.contains("reserve") && !cell.starts_with("not replayed"),
            "{cell}"
        );
    }
    // Three runs: the prediction takes them.
    wait_js(
        &c,
        "document.querySelector('a.will-it-fit')",
        "the fit link",
    )
    .await;
    screenshot(&c, "newcomer/sweep").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// Idle time on the run page's shared axis: two H200 runs of `memscope_harness.held` as the
/// ranks of one job (`planted` and `growing`, lined up at their starts) leave stretches where
/// neither has an event (the engine's `run::` test checks them against every rank's event
/// times); the page names them, shades them on every row, and folds each to a marked break.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_time_on_the_run_axis_is_marked_and_folds() {
    let lab = lab("runidle").await;
    let base = lab.base.clone();
    for (rank, name) in ["held/held_planted.pickle", "held/held_growing.pickle"]
        .iter()
        .enumerate()
    {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let (status, body) = post(
            &base,
            &format!("/api/snapshots?name=rank{rank}.pickle&tags=job%3Didle%2Crank%3D{rank}"),
            bytes,
        )
        .await;
        assert!(status == 200 || status == 201, "{status} {body}");
    }
    let (status, series) = get(&base, "/api/runs/idle/series?buckets=600").await;
    assert_eq!(status, 200, "{series}");
    let series: serde_json::Value = serde_json::from_str(&series).unwrap();
    let idle = series["idle"].as_array().unwrap();
    assert!(!idle.is_empty(), "{series}");
    let c = lab.browser(Theme::Light, (1280, 900), "profile").await;
    c.goto(&format!("{base}/runs/idle")).await.unwrap();
    let note = wait_js(
        &c,
        "document.querySelector('.idle-note')?.innerText",
        "the idle note",
    )
    .await;
    let note = note.as_str().unwrap();
    assert!(
        note.starts_with(&format!("{} idle stretch", idle.len()))
            && note.contains("where no rank had an event"),
        "{note}"
    );
    let px =
        "[...document.querySelectorAll('a.rank-chart canvas')].map(c => Number(c.dataset.idlePx))";
    let shaded = wait_js(
        &c,
        &format!("(() => {{ const p = {px}; return p.length === 2 && p[0] > 0 ? p : null; }})()"),
        "the stretches shaded on both rows",
    )
    .await;
    let wide = shaded[0].as_f64().unwrap();
    // As wide as their share of the axis (the plot is 1,004 px).
    let share: f64 = idle
        .iter()
        .map(|s| s[1].as_f64().unwrap() - s[0].as_f64().unwrap())
        .sum::<f64>()
        / (series["to"].as_f64().unwrap() - series["from"].as_f64().unwrap());
    assert!(
        (wide - share * 1004.0).abs() <= 2.0 * idle.len() as f64,
        "{wide} vs {share}"
    );
    screenshot(&c, "newcomer/run-idle").await;
    click(&c, "label.fold-idle input").await;
    let folded = wait_js(
        &c,
        &format!("(() => {{ const p = {px}; return p[0] < {wide} / 2 ? p : null; }})()"),
        "the stretches folded",
    )
    .await;
    // Each folded to 1.2 % of the plot.
    let n = idle.len() as f64;
    assert!(
        (folded[0].as_f64().unwrap() - n * 0.012 * 1004.0).abs() <= n,
        "{folded}"
    );
    screenshot(&c, "newcomer/run-idle-folded").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}
