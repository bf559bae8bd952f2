//! Several snapshots compared at once (`/compare?ids=A,B,C…`): a sweep, say of batch sizes. What
//! was swept is read from the runs themselves: a tag every run has with a number that differs
//! (`batch=8`), else the number where their names differ (`train_bs8`, `train_bs16`); the runs
//! are ordered by it (else by upload time). The page lays their memory curves over each other,
//! their peaks against the swept value, and what ended each run, what a setting would have done
//! and their leak suspects side by side (`compare.rs`, shared with the two-snapshot diff).

use ::api::routes::page;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::compare::{Run, RunsCompared, colour};
use crate::{api, fmt};

/// Most runs one comparison draws (the palette's colours).
pub const MAX_RUNS: usize = 10;

/// What the runs differ in, and each run's value of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Swept {
    /// A tag's key, or the word before the number in the names (`bs`).
    pub by: String,
    pub from: SweptFrom,
    pub values: Vec<f64>,
}

/// Where the swept value was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweptFrom {
    Tags,
    Names,
}

impl SweptFrom {
    fn words(self) -> &'static str {
        match self {
            SweptFrom::Tags => "tags",
            SweptFrom::Names => "names",
        }
    }
}

/// The swept value of each of `runs` (name, tags), if they share one: a tag key every run has,
/// each value a number, not all equal; else the number where the names differ.
pub fn swept(runs: &[(String, Vec<::api::Tag>)]) -> Option<Swept> {
    by_tag(runs).or_else(|| by_name(runs))
}

fn by_tag(runs: &[(String, Vec<::api::Tag>)]) -> Option<Swept> {
    let (_, first) = runs.first()?;
    first.iter().filter(|t| !t.key.is_empty()).find_map(|t| {
        let values: Option<Vec<f64>> = runs
            .iter()
            .map(|(_, tags)| {
                tags.iter()
                    .find(|u| u.key == t.key)
                    .and_then(|u| u.value.trim().parse().ok())
            })
            .collect();
        values.filter(|v| differ(v)).map(|values| Swept {
            by: t.key.clone(),
            from: SweptFrom::Tags,
            values,
        })
    })
}

fn differ(v: &[f64]) -> bool {
    v.len() >= 2 && v.iter().any(|x| *x != v[0])
}

/// The number between the names' common start and end (a common start that ends in a digit,
/// or an end that starts with one, gives the digit back: `bs12`/`bs16` differ in `12`/`16`).
fn by_name(runs: &[(String, Vec<::api::Tag>)]) -> Option<Swept> {
    let names: Vec<Vec<char>> = runs.iter().map(|(n, _)| n.chars().collect()).collect();
    let first = names.first()?;
    let shortest = names.iter().map(Vec::len).min()?;
    let mut pre = (0..shortest)
        .take_while(|&i| names.iter().all(|n| n[i] == first[i]))
        .count();
    let mut suf = (0..shortest - pre)
        .take_while(|&i| {
            names
                .iter()
                .all(|n| n[n.len() - 1 - i] == first[first.len() - 1 - i])
        })
        .count();
    // Part of a number: a digit, or a point between digits (`batch.8` keeps its point out).
    let numeric = |i: usize| {
        first[i].is_ascii_digit()
            || (first[i] == '.'
                && i > 0
                && first[i - 1].is_ascii_digit()
                && first.get(i + 1).is_some_and(char::is_ascii_digit))
    };
    while pre > 0 && numeric(pre - 1) {
        pre -= 1;
    }
    while suf > 0 && numeric(first.len() - suf) {
        suf -= 1;
    }
    let values: Option<Vec<f64>> = names
        .iter()
        .map(|n| {
            let middle: String = n[pre..n.len() - suf].iter().collect();
            middle.parse().ok()
        })
        .collect();
    let values = values.filter(|v| differ(v))?;
    let word: String = first[..pre]
        .iter()
        .rev()
        .skip_while(|c| !c.is_alphanumeric())
        .take_while(|c| c.is_alphabetic())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Some(Swept {
        from: SweptFrom::Names,
        by: if word.is_empty() {
            "the number in the names".into()
        } else {
            word
        },
        values,
    })
}

/// The runs' order: by the swept value, else by upload time (the library's ticks come in any
/// order).
pub fn order(uploaded_at_ms: &[i64], swept: Option<&Swept>) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..uploaded_at_ms.len()).collect();
    match swept {
        Some(s) => idx.sort_by(|&a, &b| s.values[a].total_cmp(&s.values[b])),
        None => idx.sort_by_key(|&i| uploaded_at_ms[i]),
    }
    idx
}

/// A swept value as people write it: `8`, `0.5`.
fn value_text(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

#[component]
pub fn SweepPage() -> impl IntoView {
    api::page_scope();
    let query = use_query_map();
    let ids = Memo::new(move |_| {
        query
            .get()
            .get("ids")
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    });
    let infos = LocalResource::new(move || {
        let ids = ids.get();
        async move {
            if ids.len() < 2 || ids.len() > MAX_RUNS {
                return Err(format!(
                    "compare takes 2 to {MAX_RUNS} snapshots (ids=A,B,…); this address names {}",
                    ids.len()
                ));
            }
            let mut out = Vec::new();
            for id in ids {
                out.push(api::info(&id).await?);
            }
            Ok(out)
        }
    });
    view! {
        <section class="sweep">
            {move || match infos.get() {
                None => view! { <p>"comparing…"</p> }.into_any(),
                Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
                Some(Ok(infos)) => sweep_view(infos).into_any(),
            }}
        </section>
    }
}

fn sweep_view(infos: Vec<::api::SnapshotInfo>) -> impl IntoView {
    let named: Vec<(String, Vec<::api::Tag>)> = infos
        .iter()
        .map(|i| (i.name.clone(), i.tags.clone()))
        .collect();
    let swept = swept(&named);
    let uploaded: Vec<i64> = infos.iter().map(|i| i.uploaded_at_ms).collect();
    let order = order(&uploaded, swept.as_ref());
    let runs: Vec<Run> = order
        .iter()
        .enumerate()
        .map(|(k, &i)| Run {
            id: infos[i].id.clone(),
            name: infos[i].name.clone(),
            device: None,
            label: match &swept {
                Some(s) => format!("{} = {}", s.by, value_text(s.values[i])),
                None => infos[i].name.clone(),
            },
            colour: colour(k),
        })
        .collect();
    let heading = match &swept {
        Some(s) => format!(
            "{} runs by {}: {}",
            runs.len(),
            s.by,
            order
                .iter()
                .map(|&i| value_text(s.values[i]))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => format!("{} runs, in upload order", runs.len()),
    };
    let fit = (2..=3).contains(&runs.len()).then(|| {
        let picks: Vec<crate::pages::fit::Pick> = runs
            .iter()
            .map(|r| crate::pages::fit::Pick {
                id: r.id.clone(),
                size: None,
            })
            .collect();
        page::fit(&::api::PredictQuery {
            recordings: crate::pages::fit::recordings_param(&picks),
            ..Default::default()
        })
    });
    let peaks: Vec<(String, String, u64, u64)> = runs
        .iter()
        .zip(&order)
        .map(|(r, &i)| {
            (
                r.label.clone(),
                r.colour.to_string(),
                infos[i].peak_bytes,
                infos[i].peak_reserved_bytes,
            )
        })
        .collect();
    view! {
        <h1 class="sweep-title">{heading}</h1>
        <p class="hint">
            {match &swept {
                Some(s) => format!("Ordered by {}, read from the runs' {}. ", s.by, s.from.words()),
                None => "No tag or number in the names tells the runs apart; tag them (batch=8) to order them by it. ".to_string(),
            }}
            {runs.iter().map(|r| view! {
                <a class="run-link" href=page::snapshot_home(&r.id)>
                    <span class="swatch" style=format!("background:{}", r.colour)></span>
                    {format!(" {} ", r.name)}
                </a>
            }).collect_view()}
        </p>
        <PeaksTable peaks=peaks/>
        {fit.map(|href| view! {
            <p><a class="will-it-fit" href=href>"will a larger size fit? (predict from these runs)"</a></p>
        })}
        <RunsCompared runs=runs/>
    }
}

/// Each run's peaks (`max_memory_allocated`, `max_memory_reserved`) beside its swept value, with
/// a bar to the largest and the growth from the run before.
#[component]
fn PeaksTable(peaks: Vec<(String, String, u64, u64)>) -> impl IntoView {
    let top = peaks.iter().map(|p| p.2.max(p.3)).max().unwrap_or(1).max(1) as f64;
    let mut previous: Option<u64> = None;
    let rows = peaks
        .into_iter()
        .map(|(label, colour, allocated, reserved)| {
            let growth = previous.map(|p| fmt::signed(allocated as i64 - p as i64, true));
            previous = Some(allocated);
            view! {
                <tr class="sweep-row">
                    <td><span class="swatch" style=format!("background:{colour}")></span>{format!(" {label}")}</td>
                    <td class="num">{fmt::bytes(allocated)}</td>
                    <td class="num">{fmt::bytes(reserved)}</td>
                    <td class="num">{growth.unwrap_or_else(|| "—".into())}</td>
                    <td class="bar-cell">
                        <span class="bar allocated" style=format!("width:{:.1}%", allocated as f64 / top * 100.0)></span>
                        <span class="bar reserved" style=format!("width:{:.1}%", reserved as f64 / top * 100.0)></span>
                    </td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="sweep-peaks">
            <thead>
                <tr>
                    <th>"run"</th>
                    <th class="num" title="torch.cuda.max_memory_allocated()">"peak allocated"</th>
                    <th class="num" title="torch.cuda.max_memory_reserved()">"peak reserved"</th>
                    <th class="num">"allocated, from the run before"</th>
                    <th>"allocated (dark) and reserved, to the largest"</th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, tags: &[(&str, &str)]) -> (String, Vec<::api::Tag>) {
        (
            name.into(),
            tags.iter()
                .map(|(k, v)| ::api::Tag {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
        )
    }

    #[test]
    fn a_numeric_tag_that_differs_is_what_was_swept() {
        let runs = [
            run("a.pickle", &[("job", "x"), ("batch", "32")]),
            run("b.pickle", &[("job", "x"), ("batch", "8")]),
            run("c.pickle", &[("batch", "16"), ("job", "x")]),
        ];
        assert_eq!(
            swept(&runs),
            Some(Swept {
                by: "batch".into(),
                from: SweptFrom::Tags,
                values: vec![32.0, 8.0, 16.0]
            })
        );
        // A tag one run lacks, or equal everywhere, is not it; the names are read then.
        let runs = [
            run("train_bs12.pickle", &[("batch", "8")]),
            run("train_bs16.pickle", &[("batch", "8")]),
            run("train_bs128.pickle", &[]),
        ];
        assert_eq!(
            swept(&runs),
            Some(Swept {
                by: "bs".into(),
                from: SweptFrom::Names,
                values: vec![12.0, 16.0, 128.0]
            })
        );
    }

    #[test]
    fn names_give_their_differing_number_and_nothing_else() {
        let names = |ns: &[&str]| -> Vec<(String, Vec<::api::Tag>)> {
            ns.iter().map(|n| run(n, &[])).collect()
        };
        assert_eq!(
            swept(&names(&["seq=1024.pickle", "seq=512.pickle"])).map(|s| (s.by, s.values)),
            Some(("seq".into(), vec![1024.0, 512.0]))
        );
        assert_eq!(
            swept(&names(&[
                "predict/convnet_batch.24.rec.pickle.xz",
                "predict/convnet_batch.8.rec.pickle.xz",
            ]))
            .map(|s| (s.by, s.values)),
            Some(("batch".into(), vec![24.0, 8.0]))
        );
        assert_eq!(
            swept(&names(&["lr0.5", "lr0.25"])).map(|s| s.values),
            Some(vec![0.5, 0.25])
        );
        assert_eq!(
            swept(&names(&["8", "64"])).map(|s| s.by),
            Some("the number in the names".into())
        );
        assert_eq!(swept(&names(&["before.pickle", "after.pickle"])), None);
        assert_eq!(swept(&names(&["run7", "run7"])), None);
        assert_eq!(swept(&names(&["only"])), None);
    }

    #[test]
    fn runs_are_ordered_by_the_swept_value_else_by_upload() {
        let infos = [30, 10, 20];
        assert_eq!(order(&infos, None), vec![1, 2, 0]);
        let s = Swept {
            by: "batch".into(),
            from: SweptFrom::Tags,
            values: vec![8.0, 32.0, 16.0],
        };
        assert_eq!(order(&infos, Some(&s)), vec![0, 2, 1]);
        assert_eq!(value_text(8.0), "8");
        assert_eq!(value_text(0.25), "0.25");
    }
}
