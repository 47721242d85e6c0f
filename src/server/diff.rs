//! Before/after diffs for the approval panel, with a bounded cost: the `similar` crate's line diff
//! with a deadline (past it, the diff is coarser but still correct), hunks with a little context
//! instead of whole texts, and a cap on what a page shows. A change too big to show is summarised
//! ("N lines changed") and offered as a unified diff to download.

use std::time::Duration;

use similar::{Algorithm, ChangeTag, TextDiff};

use crate::page_data::DiffLine;

/// Time the diff algorithm may take before it settles for a coarser (still correct) diff.
pub const DIFF_DEADLINE: Duration = Duration::from_millis(200);
/// Unchanged lines shown around each change.
pub const CONTEXT_LINES: usize = 3;
/// The most diff lines a panel shows; a larger diff is offered as a download instead.
pub const MAX_SHOWN_LINES: usize = 400;
/// Texts larger than this together are not diffed line by line at all.
pub const MAX_DIFF_BYTES: usize = 8 * 1024 * 1024;

/// A diff as the panel shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownDiff {
    /// The hunks (empty when the diff is too large to show).
    pub lines: Vec<DiffLine>,
    /// Lines removed plus lines added.
    pub changed: usize,
    /// Too large to show: the panel says so and links the download.
    pub too_large: bool,
}

fn diff<'a>(before: &'a str, after: &'a str) -> TextDiff<'a, 'a, str> {
    TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .timeout(DIFF_DEADLINE)
        .diff_lines(before, after)
}

/// The diff of `before` and `after` for the panel.
pub fn shown_diff(before: &str, after: &str) -> ShownDiff {
    if before.len() + after.len() > MAX_DIFF_BYTES {
        return ShownDiff {
            lines: Vec::new(),
            changed: before.lines().count() + after.lines().count(),
            too_large: true,
        };
    }
    let diff = diff(before, after);
    let changed = diff
        .iter_all_changes()
        .filter(|c| c.tag() != ChangeTag::Equal)
        .count();
    let mut lines = Vec::new();
    for (index, group) in diff.grouped_ops(CONTEXT_LINES).iter().enumerate() {
        if index > 0 {
            lines.push(DiffLine {
                op: '…',
                text: String::new(),
            });
        }
        for op in group {
            for change in diff.iter_changes(op) {
                if lines.len() >= MAX_SHOWN_LINES {
                    return ShownDiff {
                        lines: Vec::new(),
                        changed,
                        too_large: true,
                    };
                }
                let op = match change.tag() {
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                    ChangeTag::Equal => ' ',
                };
                lines.push(DiffLine {
                    op,
                    text: change.value().trim_end_matches(['\n', '\r']).to_owned(),
                });
            }
        }
    }
    ShownDiff {
        lines,
        changed,
        too_large: false,
    }
}

/// The whole change as a unified diff (the download for a change too large to show).
pub fn unified_diff(target: &str, before: &str, after: &str) -> String {
    diff(before, after)
        .unified_diff()
        .context_radius(CONTEXT_LINES)
        .header(&format!("{target} (now)"), &format!("{target} (approved)"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_marks_removed_and_added_lines_with_context() {
        let shown = shown_diff(
            "title: Welcome\nstatus: published\n\nbody",
            "title: Hello\nstatus: published\n\nbody",
        );
        let ops: String = shown.lines.iter().map(|l| l.op).collect();
        assert_eq!(ops, "-+   ");
        assert_eq!(shown.lines[0].text, "title: Welcome");
        assert_eq!(shown.lines[1].text, "title: Hello");
        assert_eq!(shown.changed, 2);
        assert!(!shown.too_large);
        let created = shown_diff("", "a\nb");
        assert_eq!(created.lines.iter().map(|l| l.op).collect::<String>(), "++");
        let deleted = shown_diff("a", "");
        assert_eq!(deleted.lines.iter().map(|l| l.op).collect::<String>(), "-");
    }

    #[test]
    fn far_apart_changes_are_separate_hunks_without_the_lines_between() {
        let before: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        let mut after = before.clone();
        after[10] = "changed 10".into();
        after[90] = "changed 90".into();
        let shown = shown_diff(&before.join("\n"), &after.join("\n"));
        assert_eq!(shown.changed, 4);
        assert_eq!(shown.lines.iter().filter(|l| l.op == '…').count(), 1);
        // Two hunks of one change each, with three lines of context on both sides.
        assert_eq!(shown.lines.len(), 2 * (3 + 2 + 3) + 1);
        assert!(!shown.lines.iter().any(|l| l.text == "line 50"));
    }

    #[test]
    fn a_diff_too_large_to_show_is_counted_and_offered_whole() {
        let before: String = (0..2000).map(|i| format!("old {i}\n")).collect();
        let after: String = (0..2000).map(|i| format!("new {i}\n")).collect();
        let shown = shown_diff(&before, &after);
        assert!(shown.too_large);
        assert!(shown.lines.is_empty());
        assert_eq!(shown.changed, 4000);
        let unified = unified_diff("page home", &before, &after);
        assert!(unified.starts_with("--- page home (now)\n+++ page home (approved)\n"));
        assert_eq!(
            unified.lines().filter(|l| l.starts_with("-old")).count(),
            2000
        );
    }
}
