//! The report as one self-contained HTML file: styles inline and scoped to the report's root
//! element (so it embeds in a notebook's output without touching the page), the memory chart as
//! inline SVG, and a short script that shows the exact figures of the bucket under the cursor
//! (each bucket's lowest and highest bytes, from the data the chart was drawn with). Nothing is
//! fetched: it opens offline.

use std::fmt::Write;

use snapshot::analysis::human_bytes as hb;
use snapshot::units::thousands;

use super::shared::{
    DeviceViews, Shareable, categories, findings, replay_words, site_words, whatif_caveat,
    whatif_outcome,
};

use api::html_escape as esc;

const STYLE: &str = r#"
.memscope-report{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;max-width:1100px;margin:0 auto;padding:24px}
.memscope-report h1{font-size:22px;margin:0 0 4px}
.memscope-report h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde6;padding-bottom:4px}
.memscope-report .sub{color:#5a6375;margin:0 0 16px}
.memscope-report .findings{background:#f4f6fa;border-left:4px solid #3b6fd8;padding:10px 14px;margin:12px 0}
.memscope-report .findings.fatal{border-left-color:#c62828;background:#fdf1f1}
.memscope-report .findings p{margin:4px 0}
.memscope-report .figures{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.memscope-report .figure{border:1px solid #d8dde6;border-radius:6px;padding:8px 12px;min-width:130px}
.memscope-report .figure .k{color:#5a6375;font-size:12px}
.memscope-report .figure .v{font-size:18px;font-weight:600}
.memscope-report table{border-collapse:collapse;width:100%;margin:8px 0}
.memscope-report th,.memscope-report td{text-align:left;padding:4px 8px;border-bottom:1px solid #e6e9ef;vertical-align:top}
.memscope-report td.num,.memscope-report th.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.memscope-report code,.memscope-report pre{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace}
.memscope-report pre{white-space:pre-wrap;background:#f4f6fa;padding:8px;border-radius:4px}
.memscope-report .verdict{font-weight:700;text-transform:uppercase}
.memscope-report .fatal .verdict,.memscope-report .tag.fatal{color:#c62828}
.memscope-report .tag{font-size:11px;font-weight:700;border:1px solid currentColor;border-radius:3px;padding:0 4px}
.memscope-report .tag.survived{color:#2e7d32}
.memscope-report .oom{border:1px solid #d8dde6;border-left:4px solid #c62828;border-radius:4px;padding:8px 12px;margin:10px 0}
.memscope-report .oom.survived{border-left-color:#2e7d32}
.memscope-report .chart{position:relative}
.memscope-report .chart svg{width:100%;height:auto;display:block}
.memscope-report .tip{position:absolute;pointer-events:none;background:#1d2330;color:#fff;font-size:12px;padding:4px 8px;border-radius:4px;white-space:nowrap;display:none}
.memscope-report .legend{font-size:12px;color:#5a6375}
.memscope-report .swatch{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px;vertical-align:middle}
.memscope-report .bar{display:flex;height:18px;border-radius:3px;overflow:hidden;margin:6px 0}
.memscope-report .muted{color:#5a6375}
.memscope-report footer{margin-top:32px;color:#5a6375;font-size:12px}
"#;

/// Each category's colour, in `api::Category::ALL`'s order.
const CATEGORY_COLOURS: [&str; 9] = [
    "#3b6fd8", "#8e44ad", "#d35400", "#27ae60", "#16a085", "#c0a000", "#7f8c8d", "#2c3e50",
    "#b0b7c3",
];

const SCRIPT: &str = r#"
(function(){
  function hb(b){var u=['B','KiB','MiB','GiB','TiB'],i=0;while(b>=1024&&i<4){b/=1024;i++;}return (i?b.toFixed(1):b)+' '+u[i];}
  function th(n){return n.toString().replace(/\B(?=(\d{3})+(?!\d))/g,',');}
  document.querySelectorAll('.memscope-report .chart').forEach(function(c){
    var d=JSON.parse(c.getAttribute('data-buckets')),svg=c.querySelector('svg'),tip=c.querySelector('.tip');
    var x0=+c.getAttribute('data-x0'),x1=+c.getAttribute('data-x1'),w=+c.getAttribute('data-w');
    svg.addEventListener('mousemove',function(e){
      var r=svg.getBoundingClientRect(),x=(e.clientX-r.left)*w/r.width;
      if(x<x0||x>x1||!d.length){tip.style.display='none';return;}
      var k=Math.min(d.length-1,Math.floor((x-x0)/(x1-x0)*d.length)),b=d[k];
      var ev=b[0]===b[1]?'after event '+th(b[0]):'after events '+th(b[0])+'\u2013'+th(b[1]);
      var live=b[2]===b[3]?hb(b[3]):hb(b[2])+'\u2013'+hb(b[3]),res=b[4]===b[5]?hb(b[5]):hb(b[4])+'\u2013'+hb(b[5]);
      tip.textContent=ev+': live '+live+', reserved '+res;
      tip.style.display='block';tip.style.left=Math.min(e.clientX-r.left+12,r.width-tip.offsetWidth)+'px';tip.style.top=(e.clientY-r.top+12)+'px';
    });
    svg.addEventListener('mouseleave',function(){tip.style.display='none';});
  });
})();
"#;

/// The whole file.
pub fn html(r: &Shareable) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · memscope report</title><style>{STYLE}</style></head><body>",
        esc(&r.name)
    );
    body(&mut o, r);
    let _ = writeln!(o, "<script>{SCRIPT}</script></body></html>");
    o
}

fn body(o: &mut String, r: &Shareable) {
    let rep = &r.report;
    let _ = write!(
        o,
        "<div class=\"memscope-report\"><h1>{}</h1><p class=\"sub\">{}</p>",
        esc(&r.name),
        esc(&format_line(rep))
    );
    let fatal = rep.ooms.iter().any(|m| !m.recovered);
    let _ = write!(
        o,
        "<div class=\"findings{}\">",
        if fatal { " fatal" } else { "" }
    );
    for f in findings(rep) {
        let _ = write!(o, "<p>{}</p>", esc(&f));
    }
    for w in &rep.warnings {
        let _ = write!(o, "<p class=\"muted\">{}</p>", esc(&w.message));
    }
    o.push_str("</div>");
    peaks(o, rep, r.device.as_ref().map(|d| d.device));
    if let Some(d) = &r.device {
        chart(o, rep, d);
        sites(o, d);
    }
    category_section(o, rep, r.device.as_ref().map(|d| d.device));
    leaks(o, rep);
    ooms(o, rep);
    whatif(o, r);
    let _ = write!(
        o,
        "<footer>memscope {} · figures from the snapshot's own trace and segments; nothing in this file is fetched.</footer></div>",
        env!("CARGO_PKG_VERSION")
    );
}

fn format_line(r: &api::Report) -> String {
    let f = &r.format;
    format!(
        "{} snapshot, {} layout, {} decoded · {} segments, {} reserved at the snapshot",
        f.encoding.as_str(),
        f.layout.as_str().replace('_', " "),
        hb(f.decoded_bytes),
        thousands(r.segments),
        hb(r.reserved_bytes)
    )
}

fn figure(o: &mut String, key: &str, value: &str) {
    let _ = write!(
        o,
        "<div class=\"figure\"><div class=\"k\">{}</div><div class=\"v\">{}</div></div>",
        esc(key),
        esc(value)
    );
}

/// PyTorch's three peaks of the device shown, and where each was reached.
fn peaks(o: &mut String, r: &api::Report, device: Option<i32>) {
    let Some((dev, d)) = device
        .or(r.shown_device())
        .and_then(|k| r.devices.get(&k).map(|d| (k, d)))
    else {
        return;
    };
    let _ = write!(o, "<h2>Peaks on cuda:{dev}</h2><div class=\"figures\">");
    let at = |p: u32| {
        if d.peaks_over == api::PeakScope::FinalState {
            String::new()
        } else {
            format!(" · event {}", thousands(p as u64))
        }
    };
    figure(
        o,
        &format!("requested{}", at(d.peak_requested_position)),
        &hb(d.peak_requested_bytes),
    );
    figure(
        o,
        &format!(
            "allocated (max_memory_allocated){}",
            at(d.peak_allocated_position)
        ),
        &hb(d.peak_allocated_bytes),
    );
    figure(
        o,
        &format!(
            "reserved (max_memory_reserved){}",
            at(d.peak_reserved_position)
        ),
        &hb(d.peak_reserved_bytes),
    );
    figure(o, "trace events", &thousands(d.entries));
    let _ = write!(
        o,
        "</div><p class=\"muted\">{}</p>",
        esc(d.peaks_over.words())
    );
}

/// Live and reserved bytes over the trace: reserved as a line of each bucket's highest, live as
/// a band from each bucket's lowest to its highest; OOMs marked.
fn chart(o: &mut String, r: &api::Report, d: &DeviceViews) {
    let b = &d.buckets;
    if b.is_empty() {
        return;
    }
    let (w, h, left, right, top, bottom) = (960.0, 280.0, 70.0, 10.0, 10.0, 26.0);
    let top_bytes = b
        .iter()
        .map(|x| x.reserved_max.max(x.live_max))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.05;
    let span = (d.events.max(1)) as f64;
    let x = |p: f64| left + (w - left - right) * p / span;
    let y = |v: u64| top + (h - top - bottom) * (1.0 - v as f64 / top_bytes);
    let _ = write!(
        o,
        "<h2>Memory over the trace (cuda:{})</h2><div class=\"chart\" data-x0=\"{left}\" data-x1=\"{}\" data-w=\"{w}\" data-buckets=\"{}\">\
         <svg viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"live and reserved bytes over the trace's events\">",
        d.device,
        w - right,
        esc(&bucket_json(b))
    );
    // Grid and y ticks at round byte values.
    for t in ticks(top_bytes) {
        let yy = y(t);
        let _ = write!(
            o,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#e6e9ef\"/><text x=\"{}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\" fill=\"#5a6375\">{}</text>",
            w - right,
            left - 6.0,
            yy + 4.0,
            esc(&hb(t))
        );
    }
    let band = {
        let mut up = String::new();
        let mut down = Vec::new();
        for k in b {
            let (x0, x1) = (x(k.first as f64), x(k.last as f64 + 1.0));
            let _ = write!(
                up,
                "L{x0:.1},{:.1}L{x1:.1},{:.1}",
                y(k.live_max),
                y(k.live_max)
            );
            down.push(format!(
                "L{x1:.1},{:.1}L{x0:.1},{:.1}",
                y(k.live_min),
                y(k.live_min)
            ));
        }
        down.reverse();
        format!("M{}{}Z", &up[1..], down.concat())
    };
    let _ = write!(
        o,
        "<path d=\"{band}\" fill=\"#3b6fd8\" fill-opacity=\"0.55\" stroke=\"#3b6fd8\" stroke-width=\"0.6\"/>"
    );
    let mut line = String::new();
    for k in b {
        let (x0, x1) = (x(k.first as f64), x(k.last as f64 + 1.0));
        let _ = write!(
            line,
            "L{x0:.1},{:.1}L{x1:.1},{:.1}",
            y(k.reserved_max),
            y(k.reserved_max)
        );
    }
    let _ = write!(
        o,
        "<path d=\"M{}\" fill=\"none\" stroke=\"#8a5a00\" stroke-width=\"1.6\"/>",
        &line[1..]
    );
    for m in r.ooms.iter().filter(|m| m.device == d.device) {
        let xx = x(m.position as f64);
        let colour = if m.recovered { "#2e7d32" } else { "#c62828" };
        let _ = write!(
            o,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{top}\" y2=\"{}\" stroke=\"{colour}\" stroke-dasharray=\"4 3\"/>",
            h - bottom
        );
    }
    // The x axis: events.
    for k in 0..=4 {
        let p = (span * k as f64 / 4.0).round();
        let anchor = match k {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{}\" font-size=\"11\" text-anchor=\"{anchor}\" fill=\"#5a6375\">{}</text>",
            x(p),
            h - 8.0,
            thousands(p as u64)
        );
    }
    let _ = write!(
        o,
        "</svg><div class=\"tip\"></div></div><p class=\"legend\"><span class=\"swatch\" style=\"background:#3b6fd8\"></span>live (requested by tensors)\
         <span class=\"swatch\" style=\"background:#8a5a00\"></span>reserved by PyTorch's allocator\
         <span class=\"swatch\" style=\"background:#c62828\"></span>out of memory · x: events of the trace · each point the lowest and highest within its events (hover for them)</p>"
    );
}

/// `[[first, last, live_min, live_max, reserved_min, reserved_max], …]`
fn bucket_json(b: &[snapshot::analysis::timeline::Bucket]) -> String {
    let rows: Vec<[u64; 6]> = b
        .iter()
        .map(|k| {
            [
                k.first as u64,
                k.last as u64,
                k.live_min,
                k.live_max,
                k.reserved_min,
                k.reserved_max,
            ]
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".into())
}

/// Round byte values under `top`: 4 or 5 of them.
fn ticks(top: f64) -> Vec<u64> {
    let raw = top / 5.0;
    let unit = 1024f64.powi((raw.max(1.0).log(1024.0)).floor() as i32);
    let step = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]
        .iter()
        .map(|m| m * unit)
        .find(|s| *s >= raw)
        .unwrap_or(raw);
    (1..)
        .map(|k| (k as f64 * step) as u64)
        .take_while(|t| (*t as f64) < top)
        .collect()
}

fn sites(o: &mut String, d: &DeviceViews) {
    let Some(s) = &d.sites else { return };
    if s.sites.is_empty() {
        return;
    }
    let _ = write!(
        o,
        "<h2>Where the memory was at the peak</h2><p class=\"muted\">{} live in {} allocations after event {}; the {} call sites holding the most, by first user frame.</p>\
         <table><thead><tr><th>call site</th><th class=\"num\">bytes</th><th class=\"num\">share</th><th class=\"num\">allocations</th></tr></thead><tbody>",
        hb(s.total_bytes),
        thousands(s.count as u64),
        thousands(s.position as u64),
        s.sites.len()
    );
    for c in &s.sites {
        let _ = write!(
            o,
            "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{:.1}%</td><td class=\"num\">{}</td></tr>",
            esc(&site_words(&c.site)),
            hb(c.bytes),
            100.0 * c.bytes as f64 / s.total_bytes.max(1) as f64,
            thousands(c.count as u64)
        );
    }
    o.push_str("</tbody></table>");
}

fn category_section(o: &mut String, r: &api::Report, device: Option<i32>) {
    let Some(c) = device
        .and_then(|k| r.devices.get(&k))
        .and_then(|d| d.categories.as_ref())
    else {
        return;
    };
    let parts = categories(&c.at_peak);
    let total = c.at_peak.total().max(1) as f64;
    if parts.is_empty() {
        return;
    }
    let _ = write!(
        o,
        "<h2>What the memory was at the peak</h2><p class=\"muted\">Live bytes after event {} by what they are in the model; read from lifetimes against the forward, backward and optimizer phases.</p><div class=\"bar\">",
        thousands(c.peak_position as u64)
    );
    let colour = |k: api::Category| {
        let i = api::Category::ALL.iter().position(|c| *c == k).unwrap_or(8);
        CATEGORY_COLOURS[i.min(8)]
    };
    for (k, bytes) in &parts {
        let _ = write!(
            o,
            "<div style=\"width:{:.3}%;background:{}\" title=\"{}: {}\"></div>",
            100.0 * *bytes as f64 / total,
            colour(*k),
            k.as_str(),
            hb(*bytes)
        );
    }
    o.push_str("</div><table><tbody>");
    for (k, bytes) in &parts {
        let _ = write!(
            o,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.1}%</td></tr>",
            colour(*k),
            k.as_str().replace('_', " "),
            hb(*bytes),
            100.0 * *bytes as f64 / total
        );
    }
    o.push_str("</tbody></table>");
}

fn leaks(o: &mut String, r: &api::Report) {
    o.push_str("<h2>Leak suspects</h2>");
    if r.leak_suspects.is_empty() {
        let _ = write!(o, "<p>{}</p>", esc(r.leak_check.no_suspects_words()));
        return;
    }
    o.push_str("<table><thead><tr><th>call site</th><th class=\"num\">alive</th><th class=\"num\">allocations</th><th>how it grew</th></tr></thead><tbody>");
    for l in r.leak_suspects.iter().take(10) {
        let _ = write!(
            o,
            "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&site_words(&l.site)),
            hb(l.bytes),
            thousands(l.count as u64),
            esc(&l.growth)
        );
    }
    o.push_str("</tbody></table>");
    if r.leak_suspects.len() > 10 {
        let _ = write!(
            o,
            "<p class=\"muted\">and {} more in the dashboard.</p>",
            r.leak_suspects.len() - 10
        );
    }
}

/// Each OOM incident, its latest OOM in full: verdict, PyTorch's message, what to do.
fn ooms(o: &mut String, r: &api::Report) {
    if r.ooms.is_empty() {
        return;
    }
    o.push_str("<h2>Out of memory</h2>");
    for (inc, m) in r.incidents() {
        let fate = if m.recovered { "survived" } else { "fatal" };
        let _ = write!(
            o,
            "<div class=\"oom {fate}\"><p><span class=\"tag {fate}\">{}</span> <span class=\"verdict\">{}</span> · {}</p>\
             <p>Tried to allocate {} at <code>{}</code>; reserved {}, allocated {}, largest free block {}.</p>\
             <p>{}</p>",
            fate.to_uppercase(),
            esc(&m.verdict.as_str().replace('_', " ")),
            esc(&inc.summary),
            hb(m.requested_bytes),
            esc(&site_words(&m.site)),
            hb(m.reserved_bytes),
            hb(m.allocated_bytes),
            hb(m.largest_free_block_bytes),
            esc(&m.explanation)
        );
        if !m.pytorch_message.is_empty() {
            let _ = write!(o, "<pre>{}</pre>", esc(&m.pytorch_message));
        }
        if !m.advice.is_empty() {
            o.push_str("<p><b>What to do</b></p><ul>");
            for a in &m.advice {
                let _ = write!(o, "<li>{}</li>", esc(a));
            }
            o.push_str("</ul>");
        }
        o.push_str("</div>");
    }
}

fn whatif(o: &mut String, r: &Shareable) {
    let Some(w) = &r.whatif else { return };
    o.push_str("<h2>What if: other allocator settings</h2>");
    let w = match w {
        Ok(w) => w,
        Err(e) => {
            let _ = write!(o, "<p class=\"muted\">No replay: {}</p>", esc(e));
            return;
        }
    };
    let limit = w
        .limit
        .as_ref()
        .map(|l| format!(" under a limit of {}", hb(l.bytes)))
        .unwrap_or_default();
    let _ = write!(
        o,
        "<p class=\"muted\">The trace replayed through a model of PyTorch's caching allocator{}; the recorded setting first, as a check of the model ({}).</p>\
         <table><thead><tr><th>PYTORCH_CUDA_ALLOC_CONF</th><th class=\"num\">peak reserved</th><th class=\"num\">vs recorded</th><th>outcome</th></tr></thead><tbody>",
        esc(&limit),
        esc(&replay_words(&w.replay_check))
    );
    for run in &w.runs {
        let name = if run.alloc_conf.is_empty() {
            "(PyTorch's defaults)".to_string()
        } else {
            run.alloc_conf.clone()
        };
        let _ = write!(
            o,
            "<tr><td><code>{}</code>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&name),
            if run.recorded {
                " <span class=\"muted\">recorded</span>"
            } else {
                ""
            },
            hb(run.peak_reserved_bytes),
            signed(-run.saving_bytes),
            esc(&whatif_outcome(w, run))
        );
    }
    o.push_str("</tbody></table>");
    if let Some(c) = whatif_caveat(w) {
        let _ = write!(o, "<p>{}</p>", esc(c));
    }
}

fn signed(d: i64) -> String {
    match d.signum() {
        1 => format!("+{}", hb(d.unsigned_abs())),
        -1 => format!("−{}", hb(d.unsigned_abs())),
        _ => "same".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_ticks_are_round() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        let gib = 1u64 << 30;
        assert_eq!(ticks(5.0 * gib as f64), [gib, 2 * gib, 3 * gib, 4 * gib]);
        assert_eq!(ticks(1000.0), [200, 400, 600, 800]);
    }
}
