//! The run list's server function: runs newest first, filtered and searched, a page at a time
//! by key.

// A server function's arguments are its form fields, one per field.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;

use crate::error::AppError;
use crate::page_data::RunList;

/// Runs, newest first. `status`, `configuration`, `requester` (a user name), `from` and `to`
/// (days, `2026-12-04`, in UTC, both included) and `q` (words of the prompt or the answer: each
/// word or a word's beginning, case ignored) filter; `after` (the `next_after` of the page
/// before) pages on. `before` (a creation time in ms) is the older way to page, kept for clients.
#[server(endpoint = "nrllm_runs_list")]
pub async fn nrllm_runs_list(
    status: Option<String>,
    before: Option<i64>,
    limit: Option<u32>,
    configuration: Option<String>,
    requester: Option<String>,
    from: Option<String>,
    to: Option<String>,
    q: Option<String>,
    after: Option<String>,
) -> Result<RunList, AppError> {
    use crate::server::present;
    crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    let filter = ssr::RunQuery {
        status,
        configuration,
        requester,
        from,
        to,
        q,
        after,
    }
    .filter(before, limit)?;
    let limit = filter.limit - 1;
    let runs = state
        .store
        .list(&filter)
        .await
        .map_err(|err| AppError::internal("listing runs", err))?;
    let more = runs.len() > limit as usize;
    let runs = &runs[..runs.len().min(limit as usize)];
    let last = runs.last().filter(|_| more);
    Ok(RunList {
        next_before: last.map(|r| r.created_at_ms),
        next_after: last.map(|r| format!("{}.{}", r.created_at_ms, r.id)),
        runs: runs.iter().map(present::summary).collect(),
    })
}

#[cfg(feature = "ssr")]
pub(crate) mod ssr {
    use nrllm_core::run_store::{RunFilter, RunStatus, SearchWords};

    use crate::api::checks::{at_most, parse_cursor, present};
    use crate::error::AppError;

    /// Characters of one filter's text at most.
    const MAX_FILTER_CHARS: usize = 200;

    /// The run list's filters as a form or a client gives them.
    #[derive(Debug, Default, serde::Deserialize)]
    pub struct RunQuery {
        pub status: Option<String>,
        pub configuration: Option<String>,
        pub requester: Option<String>,
        pub from: Option<String>,
        pub to: Option<String>,
        pub q: Option<String>,
        pub after: Option<String>,
    }

    fn day(field: &str, text: Option<String>) -> Result<Option<i64>, AppError> {
        present(text)
            .map(|text| {
                nrllm_core::clock::parse_day(&text).ok_or_else(|| {
                    AppError::invalid(field, format!("`{text}` is not a day (2026-12-04)"))
                })
            })
            .transpose()
    }

    impl RunQuery {
        /// The store's filter for these fields (one run more than `limit`: is there a next
        /// page), or the field that does not read.
        pub fn filter(
            self,
            before: Option<i64>,
            limit: Option<u32>,
        ) -> Result<RunFilter, AppError> {
            let texts = [
                ("configuration", &self.configuration),
                ("requester", &self.requester),
                ("q", &self.q),
            ];
            for (field, text) in texts {
                at_most(field, text.as_deref(), MAX_FILTER_CHARS)?;
            }
            let status = match present(self.status).filter(|s| s != "all") {
                None => None,
                Some(text) => Some(RunStatus::parse(&text).ok_or_else(|| {
                    AppError::invalid("status", format!("`{text}` is not a run status"))
                })?),
            };
            let from = day("from", self.from)?;
            // `to` is a whole day: runs created before the next one.
            let to = day("to", self.to)?.map(|ms| ms + 86_400_000);
            let created_before_ms = match (before, to) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let after = present(self.after)
                .map(|cursor| parse_cursor(&cursor))
                .transpose()?;
            Ok(RunFilter {
                status,
                provider: present(self.configuration),
                requested_by: present(self.requester),
                created_from_ms: from,
                created_before_ms,
                search: present(self.q).as_deref().and_then(SearchWords::parse),
                after,
                limit: limit.unwrap_or(25).clamp(1, 200) + 1,
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_run_list_reads_its_filters_and_names_the_field_that_does_not() {
            let filter = RunQuery {
                status: Some("completed".into()),
                from: Some("2026-11-30".into()),
                to: Some("2026-11-30".into()),
                q: Some(" Deploy, prod ".into()),
                requester: Some(" ".into()),
                ..RunQuery::default()
            }
            .filter(None, Some(10))
            .unwrap();
            assert_eq!(filter.status, Some(RunStatus::Completed));
            assert_eq!(filter.created_from_ms, Some(1_795_996_800_000));
            assert_eq!(
                filter.created_before_ms,
                Some(1_795_996_800_000 + 86_400_000)
            );
            assert_eq!(filter.requested_by, None);
            assert_eq!(filter.search.unwrap().words(), ["deploy", "prod"]);
            assert_eq!(filter.limit, 11);
            for (query, field) in [
                (
                    RunQuery {
                        status: Some("done".into()),
                        ..RunQuery::default()
                    },
                    "status",
                ),
                (
                    RunQuery {
                        from: Some("yesterday".into()),
                        ..RunQuery::default()
                    },
                    "from",
                ),
                (
                    RunQuery {
                        after: Some("x".into()),
                        ..RunQuery::default()
                    },
                    "after",
                ),
                (
                    RunQuery {
                        q: Some("w".repeat(201)),
                        ..RunQuery::default()
                    },
                    "q",
                ),
            ] {
                assert_eq!(query.filter(None, None).unwrap_err().field(), Some(field));
            }
        }
    }
}
