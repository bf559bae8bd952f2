//! Indexing while parsing (`follow.rs`) gives the index that building it after the parse gives,
//! on every fixture and variant, and follows the plain files (the shape `_dump_snapshot` writes).

use snapshot::analysis::Index;

/// Every snapshot file under `tests/fixtures`, by path relative to it.
pub(crate) fn all_files() -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                if name.contains(".pickle") || name.ends_with("multistream.json") {
                    out.push(p);
                }
            }
        }
    }
    let root = crate::support::fixtures();
    let mut out = Vec::new();
    walk(&root, &mut out);
    let mut names: Vec<String> = out
        .iter()
        .map(|p| p.strip_prefix(&root).unwrap().to_string_lossy().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn the_index_built_while_parsing_is_the_index_built_after() {
    let files = all_files();
    assert!(files.len() > 50, "fixtures: {}", files.len());
    let (mut followed, mut not_followed) = (Vec::new(), Vec::new());
    for name in &files {
        let path = crate::support::fixture(name);
        let bytes = std::fs::read(&path).unwrap();
        let Ok(plain) = snapshot::read(&bytes[..]) else {
            // Files that are meant to be refused are refused the same way.
            assert!(
                snapshot::read_indexed_with_limits(&bytes[..], Default::default()).is_err(),
                "{name}"
            );
            continue;
        };
        let after = Index::new(&plain);
        let (snap, during) =
            snapshot::read_indexed_with_limits(&bytes[..], Default::default()).unwrap();
        assert_eq!(snap.content_hash, plain.content_hash, "{name}");
        // The same tables: the memo a followed parse keeps compact (big_python's trace fills
        // enough of it to be) reads back what a plain parse's does.
        assert_eq!(
            format!("{:?}", snap.trace),
            format!("{:?}", plain.trace),
            "{name}"
        );
        assert_eq!(
            format!("{:?}", during.devices),
            format!("{:?}", after.devices),
            "{name}"
        );
        assert_eq!(after.built_while_parsing, 0);
        let traced = snap.devices.iter().filter(|d| !d.rows.is_empty()).count();
        if traced > 0 {
            if during.built_while_parsing == traced {
                followed.push(name.clone());
            } else {
                not_followed.push(name.clone());
            }
        }
    }
    // Every file as `_dump_snapshot` writes it, and its protocol, compression and layout
    // variants (a trace written as a tuple too), is followed; rows in two lists are indexed
    // after the parse.
    assert_eq!(not_followed, ["variants/shared_entries.pickle"]);
    assert!(followed.len() > 50, "followed: {followed:?}");
}
