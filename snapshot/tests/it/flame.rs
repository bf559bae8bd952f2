//! The flame tree with Python frames only: no C++ frame left, no byte lost (allocations without
//! any Python frame gather under one node), the planted line still there.

use snapshot::analysis::{FlameFrames, Index, stacks::FlameNode, stacks_at_with};

#[test]
fn python_only_flame_keeps_every_byte_and_no_cpp_frame() {
    let snap = crate::support::read("leak_detached_cache.pickle");
    let index = Index::new(&snap);
    let device = index.traced().next().unwrap().device;
    let all = stacks_at_with(&snap, &index, device, None, 10, FlameFrames::All).unwrap();
    let py = stacks_at_with(&snap, &index, device, None, 10, FlameFrames::PythonOnly).unwrap();

    let (a, p) = (
        crate::support::flame_nodes(&all.flame),
        crate::support::flame_nodes(&py.flame),
    );
    let cpp = |n: &&FlameNode| snapshot::frames::is_cpp(&n.filename) && !n.filename.is_empty();
    assert!(a.iter().any(cpp), "this fixture records C++ frames");
    assert!(!p.iter().any(cpp));
    assert!(p.len() < a.len());

    // Same total, and every node's children add up to at most the node (none lost at the root).
    assert_eq!(py.flame.bytes, all.flame.bytes);
    assert_eq!(
        py.flame.children.iter().map(|c| c.bytes).sum::<u64>(),
        py.flame.bytes
    );
    for n in &p {
        assert!(
            n.children.iter().map(|c| c.bytes).sum::<u64>() <= n.bytes,
            "{}",
            n.name
        );
    }
    // The planted leak (gen_snapshots.py:126, 60 × 2 MiB) is a node of the Python-only tree.
    let planted = p
        .iter()
        .find(|n| n.filename.ends_with("gen_snapshots.py") && n.line == 126)
        .expect("planted line in the tree");
    assert!(planted.bytes >= 120 << 20, "{}", planted.bytes);
    // Sites with a user frame are the same either way (labelled by it); only those without a
    // Python frame read differently (a note in Python, the C++ function otherwise).
    let user = |r: &snapshot::analysis::stacks::StackReport| {
        r.sites
            .iter()
            .filter(|s| s.site.as_ref().is_some_and(|f| f.line > 0))
            .map(|s| serde_json::to_value(s).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(user(&all), user(&py));
}
