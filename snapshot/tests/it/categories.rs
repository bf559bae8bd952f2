//! Issue 35's proof without a GPU: real training recorded on an H200 by
//! `collectors/harness/memscope_harness/categories.py`, with the truth of every live storage at
//! marked moments (parameters, gradients, optimizer state, what autograd saved, the batch) read
//! in the same process by address. Every moment's live allocations are labelled by the engine
//! and compared: bytes labelled right out of bytes known, per run and category (the table is
//! printed; `cargo test --release -p snapshot --test it -- categories:: --nocapture`).

use snapshot::analysis::Index;
use snapshot::analysis::categories::{Category, Rule, categories};

/// The share of every category's known bytes that must be labelled right, per run.
const GOAL: f64 = 0.95;
const TRUTH: [Category; 5] = [
    Category::Parameter,
    Category::Gradient,
    Category::OptimizerState,
    Category::Activation,
    Category::Input,
];

/// Per category: bytes labelled right, bytes known, bytes of known storages labelled it; which
/// categories the classifier split by count (it says it cannot tell those blocks apart); what
/// the rest was labelled; and how the live bytes the truth does not name were labelled.
#[derive(Default)]
struct Score {
    right: [u64; 5],
    known: [u64; 5],
    labelled: [u64; 5],
    split: [bool; 5],
    wrong: Vec<(Category, Category, u64, String)>,
    unnamed: std::collections::BTreeMap<Category, u64>,
}

fn score(stem: &str, truth: &serde_json::Value) -> Score {
    let snap = crate::support::read(&format!("categories/{stem}.pickle.xz"));
    let index = Index::new(&snap);
    let d = index.device(0).expect("device 0");
    let labels = categories(&snap, &index, d);
    if std::env::var_os("CATEGORIES_DEBUG").is_some() {
        println!("{stem}: {:?} {:?}", labels.source, labels.phases);
    }
    let mut s = Score::default();
    for m in truth["moments"].as_array().unwrap() {
        let p = m["position"].as_u64().unwrap() as u32;
        let alive: std::collections::HashMap<u64, u32> = d
            .alive_at(p)
            .into_iter()
            .map(|id| (d.addr_of(&snap.trace, id), id))
            .collect();
        let mut named = std::collections::HashSet::new();
        for c in TRUTH.iter().map(|c| c.as_str()).chain(["buffer"]) {
            for st in m["truth"][c].as_array().into_iter().flatten() {
                named.insert(st[0].as_u64().unwrap());
            }
        }
        for (&addr, &id) in &alive {
            if !named.contains(&addr) {
                *s.unnamed.entry(labels.label(id).category).or_default() +=
                    d.size_of(&snap.trace, id);
            }
        }
        for (k, c) in TRUTH.iter().enumerate() {
            for st in m["truth"][c.as_str()].as_array().unwrap() {
                let addr = st[0].as_u64().unwrap();
                let n = st[1].as_u64().unwrap();
                let Some(&id) = alive.get(&addr) else {
                    s.known[k] += n;
                    s.wrong
                        .push((*c, Category::Unknown, n, format!("{} not alive", m["name"])));
                    continue;
                };
                let size = d.size_of(&snap.trace, id);
                s.known[k] += size;
                let l = labels.label(id);
                if let Some(j) = TRUTH.iter().position(|t| *t == l.category) {
                    s.labelled[j] += size;
                    s.split[j] |= l.rule == Rule::SplitByGradientCount;
                }
                if l.category == *c {
                    s.right[k] += size;
                } else {
                    s.wrong.push((
                        *c,
                        l.category,
                        size,
                        format!("{} id {id} {:?}", m["name"], l.rule),
                    ));
                }
            }
        }
    }
    s
}

#[test]
fn every_category_is_labelled_right_on_real_training() {
    let runs = crate::support::real_runs("categories");
    assert!(runs.len() >= 12, "{} runs", runs.len());
    let mut short = Vec::new();
    println!(
        "{:<28} {}",
        "run",
        TRUTH
            .iter()
            .map(|c| format!("{:>22}", c.as_str()))
            .collect::<String>()
    );
    for (stem, truth) in &runs {
        let s = score(stem, truth);
        let mut row = format!("{stem:<28} ");
        for (k, category) in TRUTH.iter().enumerate() {
            if s.known[k] == 0 {
                row += &format!("{:>22}", "-");
                continue;
            }
            let share = s.right[k] as f64 / s.known[k] as f64;
            if s.split[k] {
                // Which same-size blocks are parameters and which optimizer state is not in
                // the trace (both made before it); their bytes by count are.
                let ratio = s.labelled[k] as f64 / s.known[k] as f64;
                row += &format!(
                    "{:>32}",
                    format!(
                        "{:.0}% by count* ({:.1}% by block)",
                        100.0 * ratio,
                        100.0 * share
                    )
                );
                if (ratio - 1.0).abs() > 0.02 {
                    short.push(format!(
                        "{stem} {} by count: {:.1}%",
                        category.as_str(),
                        100.0 * ratio
                    ));
                }
                continue;
            }
            row += &format!(
                "{:>22}",
                format!(
                    "{:.1}% of {:.0} MiB",
                    100.0 * share,
                    s.known[k] as f64 / 1048576.0
                )
            );
            if share < GOAL {
                short.push(format!(
                    "{stem} {}: {:.1}%",
                    category.as_str(),
                    100.0 * share
                ));
            }
        }
        println!("{row}");
        let mut wrong: std::collections::BTreeMap<(Category, Category), (u64, String)> =
            Default::default();
        for (want, got, n, why) in &s.wrong {
            let e = wrong.entry((*want, *got)).or_insert((0, why.clone()));
            e.0 += n;
        }
        if !s.unnamed.is_empty() {
            println!(
                "    live bytes the truth does not name, labelled: {}",
                s.unnamed
                    .iter()
                    .map(|(c, n)| format!("{} {:.1} MiB", c.as_str(), *n as f64 / 1048576.0))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for ((want, got), (n, why)) in wrong {
            println!(
                "    {} labelled {}: {:.1} MiB (e.g. {why})",
                want.as_str(),
                got.as_str(),
                n as f64 / 1048576.0
            );
        }
    }
    assert!(short.is_empty(), "below {GOAL}: {short:#?}");
}

/// Training without a leak has no leak suspect, and what is made to stay (parameters, the first
/// step's optimizer state) is left out of the search: on every real run above.
#[test]
fn real_training_has_no_leak_suspect_and_its_parameters_are_settled() {
    use snapshot::analysis::categories::settled;
    use snapshot::analysis::leaks::device_suspects;
    for (stem, _) in crate::support::real_runs("categories") {
        let snap = crate::support::read(&format!("categories/{stem}.pickle.xz"));
        let index = Index::new(&snap);
        let d = index.device(0).unwrap();
        let suspects = device_suspects(&snap, &index, d);
        assert!(suspects.is_empty(), "{stem}: {suspects:?}");
        let labels = categories(&snap, &index, d);
        let kept = settled(&snap, &index, d);
        for (id, l) in labels.labels.iter().enumerate() {
            if l.category == Category::Parameter {
                assert!(kept[id], "{stem}: parameter {id} not settled");
            }
        }
        assert!(kept.iter().any(|&k| k), "{stem}");
    }
}

/// The timeline stacked by category reaches each bucket's highest live bytes exactly: the
/// categories are read where the bucket peaks, so the stack's top is the figure the plain
/// timeline shows for that bucket.
#[test]
fn each_buckets_categories_add_up_to_its_highest_live_bytes() {
    use snapshot::analysis::categories::at_bucket_peaks;
    for stem in [
        "gpt_accumulate.python",
        "convnet_sgd.none",
        "ddp_one_rank.all",
    ] {
        let snap = crate::support::read(&format!("categories/{stem}.pickle.xz"));
        let index = Index::new(&snap);
        let d = index.device(0).unwrap();
        let n = d.len;
        let buckets: Vec<(u32, u32)> = (0..37u32)
            .map(|k| (n * k / 37, (n * (k + 1) / 37).min(n)))
            .collect();
        let totals = at_bucket_peaks(&snap, &index, d, &buckets);
        for (&(first, last), t) in buckets.iter().zip(&totals) {
            let highest = (first..=last).map(|p| d.live_at(p)).max().unwrap();
            assert_eq!(t.total(), highest, "{stem}: bucket {first}..={last}");
        }
    }
}
