//! Keeping the persisted delivery ledger small.
//!
//! Upstream subtracts already-delivered event ids from each turn's history window so a live
//! session is not shown the same messages twice (#5423). Persisting that set naively would grow
//! without bound (one id per message, forever). Only ids still inside the live context window can
//! ever be re-sent, so only those are worth remembering; the rest are dropped at commit time.

use std::collections::{BTreeSet, HashSet};

/// Hard cap on remembered ids per scope, so one busy thread cannot bloat the shared store file.
/// Well above any context window upstream allows (`BUZZ_ACP_CONTEXT_MESSAGE_LIMIT` ≤ 100 plus
/// triggers), so it only bites on misuse.
pub const MAX_DELIVERED_IDS_PER_SCOPE: usize = 512;

/// The ledger to persist after a successful turn.
///
/// The union of `new_ids` (just delivered) and those `existing` ids still in `live_window` (the
/// ids the harness could show again). If that exceeds [`MAX_DELIVERED_IDS_PER_SCOPE`], `new_ids`
/// win over `existing`; among `new_ids` the later ones win (callers pass them oldest first, and the
/// oldest leave the window first). Empty ids are dropped: upstream never treats an empty id as
/// delivered. The result is sorted and unique, the form written to disk.
pub fn bound_delivered(
    existing: &[String],
    new_ids: &[String],
    live_window: &HashSet<String>,
) -> Vec<String> {
    let mut kept: BTreeSet<&str> = BTreeSet::new();
    for id in new_ids.iter().rev() {
        if kept.len() == MAX_DELIVERED_IDS_PER_SCOPE {
            break;
        }
        if !id.is_empty() {
            kept.insert(id);
        }
    }
    let still_visible = existing
        .iter()
        .filter(|id| !id.is_empty() && live_window.contains(id.as_str()));
    for id in still_visible {
        if kept.len() == MAX_DELIVERED_IDS_PER_SCOPE {
            break;
        }
        kept.insert(id);
    }
    kept.into_iter().map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn window(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn keeps_new_ids_and_existing_ids_still_in_the_window() {
        let out = bound_delivered(
            &ids(&["old-gone", "old-visible"]),
            &ids(&["new-b", "new-a", "new-a", ""]),
            &window(&["old-visible", "new-a"]),
        );
        assert_eq!(out, ids(&["new-a", "new-b", "old-visible"]));
    }

    #[test]
    fn an_empty_window_keeps_only_new_ids() {
        let out = bound_delivered(&ids(&["x", "y"]), &ids(&["z"]), &HashSet::new());
        assert_eq!(out, ids(&["z"]));
    }

    #[test]
    fn the_cap_prefers_new_ids_then_later_new_ids() {
        let existing: Vec<String> = (0..100).map(|i| format!("old-{i:04}")).collect();
        let new_ids: Vec<String> = (0..MAX_DELIVERED_IDS_PER_SCOPE + 10)
            .map(|i| format!("new-{i:04}"))
            .collect();
        let live: HashSet<String> = existing.iter().chain(&new_ids).cloned().collect();
        let out = bound_delivered(&existing, &new_ids, &live);
        assert_eq!(out.len(), MAX_DELIVERED_IDS_PER_SCOPE);
        assert!(out.iter().all(|id| id.starts_with("new-")));
        assert!(
            !out.contains(&"new-0009".to_owned()),
            "oldest new ids go first"
        );
        assert!(out.contains(&"new-0010".to_owned()));

        let few_new = ids(&["new-x"]);
        let many_old: Vec<String> = (0..MAX_DELIVERED_IDS_PER_SCOPE + 5)
            .map(|i| format!("old-{i:04}"))
            .collect();
        let live: HashSet<String> = many_old.iter().chain(&few_new).cloned().collect();
        let out = bound_delivered(&many_old, &few_new, &live);
        assert_eq!(out.len(), MAX_DELIVERED_IDS_PER_SCOPE);
        assert!(out.contains(&"new-x".to_owned()));
        let mut sorted = out.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(out, sorted);
    }
}
