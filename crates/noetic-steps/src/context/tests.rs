//! The context's cancellation tree, children and item log.

use super::*;

#[test]
fn cancelling_a_parent_cancels_children_but_not_the_reverse() {
    let root = Context::new();
    let a = root.fork_child();
    let b = root.spawn_child(Vec::new());
    let grandchild = a.fork_child();
    a.cancel("a only");
    assert!(a.is_cancelled() && grandchild.is_cancelled());
    assert!(!root.is_cancelled() && !b.is_cancelled());
    assert_eq!(grandchild.cancel_reason().as_deref(), Some("a only"));
    root.cancel("root");
    assert!(b.is_cancelled());
    assert_eq!(b.cancel_reason().as_deref(), Some("root"));
    assert_eq!(a.cancel_reason().as_deref(), Some("a only"), "first reason wins");
}

#[test]
fn fork_child_copies_items_and_spawn_child_starts_empty() {
    let root = Context::new();
    root.push_item(Item::user("hi"));
    let path = root.fork_child();
    path.push_item(Item::assistant("only in path"));
    assert_eq!(root.item_count(), 1);
    assert_eq!(path.item_count(), 2);
    assert_eq!(root.spawn_child(Vec::new()).item_count(), 0);
    assert_ne!(path.execution_id(), root.execution_id());
    assert_eq!(path.parent_execution_id(), Some(root.execution_id()));
    assert_eq!(path.depth(), 1);
}

#[test]
fn a_log_keeps_its_id_while_it_only_grows_and_a_diverging_copy_gets_a_new_one() {
    let ctx = Context::builder().items(vec![Item::user("a")]).build();
    let first = ctx.history();
    let id = first.log_id();
    drop(first);
    ctx.push_item(Item::assistant("b"));
    assert_eq!(ctx.history().log_id(), id, "appending in place keeps the sequence");

    // A snapshot is alive while the log grows: the log is copied, and the copy is a new sequence.
    let snapshot = ctx.history();
    ctx.push_item(Item::user("c"));
    let grown = ctx.history();
    assert_ne!(grown.log_id(), id);
    assert_eq!((snapshot.log_id(), snapshot.len()), (id, 2));
    assert_eq!(grown.len(), 3);

    // Two logs started from one history diverge under different ids.
    let fork = ctx.fork_child();
    fork.push_item(Item::user("fork"));
    ctx.push_item(Item::user("main"));
    assert_ne!(fork.history().log_id(), ctx.history().log_id());
    assert_ne!(History::new(Vec::new()).log_id(), History::new(Vec::new()).log_id());
    assert_eq!(History::new(vec![Item::user("x")]), History::new(vec![Item::user("x")]));
}
