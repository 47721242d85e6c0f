//! Which runs a list shows: the run list's filter and the inbox's, and the words a text search
//! looks for. Plain data; the store turns it into its database's query.

use uuid::Uuid;

use nrllm_types::RunStatus;

/// Which runs the run list shows, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    /// Only runs of this configuration.
    pub provider: Option<String>,
    /// Only runs started by this user.
    pub requested_by: Option<String>,
    /// Only runs created at or after this time.
    pub created_from_ms: Option<i64>,
    /// Only runs created before this time.
    pub created_before_ms: Option<i64>,
    /// Only runs whose prompt or answer holds these words.
    pub search: Option<SearchWords>,
    /// Runs after this one in the list's order: (`created_at_ms`, id) of the last run seen.
    pub after: Option<(i64, Uuid)>,
    pub limit: u32,
}

/// The inbox's order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WaitingOrder {
    /// The longest waiting first.
    #[default]
    Longest,
    /// The soonest deadline first; runs without a deadline last, longest waiting first.
    Deadline,
}

/// Which waiting runs to list (the approvals inbox).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WaitingFilter {
    /// Only runs of this configuration.
    pub provider: Option<String>,
    /// Only runs whose pending turn calls this tool.
    pub tool: Option<String>,
    /// Only runs started by this user.
    pub requested_by: Option<String>,
    /// Only runs waiting in this way (`waiting_for_approval`, `waiting_for_input`).
    pub kind: Option<RunStatus>,
    /// Only runs whose prompt holds these words.
    pub search: Option<SearchWords>,
    pub order: WaitingOrder,
    /// Runs after this one in the inbox's order: (its key in that order — see
    /// [`WaitingFilter::key`] — and its id) of the last run seen.
    pub after: Option<(i64, Uuid)>,
    pub limit: u32,
}

impl WaitingFilter {
    /// A waiting run's key in `order`: when it began waiting (its last update), or its deadline
    /// (`i64::MAX` without one).
    pub fn key(order: WaitingOrder, updated_at_ms: i64, deadline_ms: Option<i64>) -> i64 {
        match order {
            WaitingOrder::Longest => updated_at_ms,
            WaitingOrder::Deadline => deadline_ms.unwrap_or(i64::MAX),
        }
    }
}

/// The words of a text search: every word must occur in the text, as a word or as the beginning
/// of one, case ignored. A word is a run of letters and digits; everything else separates words
/// (in the searched text as in the search), so the words hold nothing a query language reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchWords(Vec<String>);

impl SearchWords {
    /// Words looked for at most; more are ignored.
    pub const MAX_WORDS: usize = 8;
    /// Characters of a word at most; a longer word is cut (and still matches as a prefix).
    pub const MAX_WORD_CHARS: usize = 64;

    /// The words of `text`, lower-cased; `None` when it has none.
    pub fn parse(text: &str) -> Option<SearchWords> {
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|word| !word.is_empty())
            .map(|word| {
                word.chars()
                    .take(Self::MAX_WORD_CHARS)
                    .collect::<String>()
                    .to_lowercase()
            })
            .take(Self::MAX_WORDS)
            .collect();
        (!words.is_empty()).then_some(SearchWords(words))
    }

    pub fn words(&self) -> &[String] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_letters_and_digits_lower_cased_and_bounded() {
        let words = SearchWords::parse("  Deploy the \"FOO-bar\"* OR x:1; café_2 ").unwrap();
        assert_eq!(
            words.words(),
            ["deploy", "the", "foo", "bar", "or", "x", "1", "café", "2"][..8].to_vec()
        );
        assert_eq!(SearchWords::parse(" \"*:()- "), None);
        let long = "a".repeat(100);
        assert_eq!(
            SearchWords::parse(&long).unwrap().words()[0].len(),
            SearchWords::MAX_WORD_CHARS
        );
    }

    #[test]
    fn the_deadline_order_puts_runs_without_one_last() {
        assert_eq!(WaitingFilter::key(WaitingOrder::Longest, 5, Some(9)), 5);
        assert_eq!(WaitingFilter::key(WaitingOrder::Deadline, 5, Some(9)), 9);
        assert_eq!(
            WaitingFilter::key(WaitingOrder::Deadline, 5, None),
            i64::MAX
        );
    }
}
