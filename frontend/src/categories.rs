//! Memory by category in the dashboard: one colour per category, shared by everything that
//! shows categories (the timeline's stacked areas, the segment map, the OOM card, the diff), the
//! hidden set kept in the URL (`hide=temporary,unknown`), and a sentence of bytes per category.

use ::api::{Category, CategoryBytes};
use leptos::prelude::*;

/// A category's colour: long-lived model state in blues and violet, what a step makes in greens
/// and warm colours, what says little in greys.
pub fn colour(c: Category) -> &'static str {
    match c {
        Category::Parameter => "#4263eb",
        Category::Gradient => "#f76707",
        Category::OptimizerState => "#7048e8",
        Category::Activation => "#2f9e44",
        Category::Input => "#f59f00",
        Category::Temporary => "#ced4da",
        Category::AutogradDetail => "#e64980",
        Category::CudaGraph => "#1098ad",
        Category::Unknown => "#868e96",
    }
}

/// The categories named in a `hide` URL value.
pub fn parse_hidden(v: Option<String>) -> Vec<Category> {
    v.unwrap_or_default()
        .split(',')
        .filter_map(|s| Category::parse(s.trim()))
        .collect()
}

/// The `hide` URL value after toggling `c` (none when nothing is hidden).
pub fn toggled(hidden: &[Category], c: Category) -> Option<String> {
    let mut v: Vec<Category> = hidden.iter().copied().filter(|&h| h != c).collect();
    if !hidden.contains(&c) {
        v.push(c);
    }
    v.sort();
    (!v.is_empty()).then(|| v.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(","))
}

/// "parameters 1.0 GiB, gradients 1.0 GiB, …", largest first.
pub fn words(b: &CategoryBytes) -> String {
    ::api::category_words(b, crate::fmt::bytes)
}

/// What was alive by category, as a bar (one span per category, its share of the width) and a
/// sentence ("at the OOM: parameters 1.0 GiB, …").
pub fn category_bar(c: &::api::CategoryBytes, lead: &str) -> impl IntoView + use<> {
    let total = c.total().max(1) as f64;
    let spans = c
        .largest_first()
        .into_iter()
        .map(|(k, b)| {
            let style = format!(
                "width:{:.2}%;background:{}",
                100.0 * b as f64 / total,
                colour(k)
            );
            let title = format!("{} {}", k.words(), crate::fmt::bytes(b));
            view! { <span style=style title=title data-category=k.as_str()></span> }
        })
        .collect_view();
    view! {
        <div class="by-category">
            <p class="category-words">{format!("{lead}{}", words(c))}</p>
            <div class="categories">{spans}</div>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hidden_set_round_trips_through_the_url() {
        let h = parse_hidden(Some("temporary,unknown,bogus".into()));
        assert_eq!(h, vec![Category::Temporary, Category::Unknown]);
        assert_eq!(toggled(&h, Category::Unknown).as_deref(), Some("temporary"));
        assert_eq!(
            toggled(&h, Category::Parameter).as_deref(),
            Some("parameter,temporary,unknown")
        );
        assert_eq!(toggled(&[Category::Input], Category::Input), None);
        let colours: std::collections::HashSet<_> = Category::ALL.map(colour).into();
        assert_eq!(colours.len(), Category::ALL.len(), "one colour each");
    }
}
