//! The response a run's model is writing, as the hub keeps it: everything so far (for a browser
//! that connects mid-response) and what came since the last live message, sent at most once
//! every [`FORMING_EVERY`] (deltas in between are gathered into one message; a browser that falls
//! behind loses deltas, never a step). Dropped when the response's step lands or a retry starts
//! over. While browsers on other instances follow the run, what came since the last message to
//! them is gathered apart, for the announcement sent every [`FORMING_ELSEWHERE_EVERY`].

use std::time::{Duration, Instant};

use nrllm_core::provider::Delta;

use crate::page_data::Forming;

/// At most one live message of a forming response per run this often.
pub const FORMING_EVERY: Duration = Duration::from_millis(25);

/// At most one announcement of a forming response per run this often, to other instances.
pub const FORMING_ELSEWHERE_EVERY: Duration = Duration::from_millis(100);

/// A run's forming response.
#[derive(Debug, Default)]
pub(super) struct Writing {
    /// Everything written so far in this round.
    pub(super) so_far: Forming,
    /// What came since the last message sent.
    batch: Forming,
    sent_at: Option<Instant>,
    /// While other instances follow the run: until when, and what came since the last
    /// announcement to them.
    elsewhere: Option<Elsewhere>,
}

#[derive(Debug)]
struct Elsewhere {
    until: Instant,
    pending: Forming,
}

impl Elsewhere {
    /// The same following, for a response that starts over in `round`.
    fn restarted(self, round: u32) -> Elsewhere {
        Elsewhere {
            pending: restart(round),
            ..self
        }
    }
}

impl Writing {
    /// Adds `delta` of round `round`; the message to send now, if one is due (`live`: someone
    /// listens).
    pub(super) fn add(&mut self, round: u32, delta: &Delta, live: bool) -> Option<Forming> {
        if self.so_far.round != round {
            let elsewhere = self.elsewhere.take().map(|e| e.restarted(round));
            *self = Writing {
                elsewhere,
                ..Writing::default()
            };
            self.so_far.round = round;
            self.batch.round = round;
        }
        add(&mut self.so_far, delta);
        if let Some(elsewhere) = &mut self.elsewhere {
            add(&mut elsewhere.pending, delta);
        }
        if !live {
            return None;
        }
        add(&mut self.batch, delta);
        let due = self.sent_at.is_none_or(|at| at.elapsed() >= FORMING_EVERY);
        if due {
            self.flush()
        } else {
            None
        }
    }

    /// What came since the last message sent and was not sent yet, if anything: sent now.
    pub(super) fn flush(&mut self) -> Option<Forming> {
        let round = self.so_far.round;
        let batch = std::mem::replace(
            &mut self.batch,
            Forming {
                round,
                ..Forming::default()
            },
        );
        (!batch.is_empty()).then(|| {
            self.sent_at = Some(Instant::now());
            batch
        })
    }

    /// The response's step landed: what was written goes (other instances still get what they
    /// were not sent; the step reaches them with its commit).
    pub(super) fn landed(&mut self) {
        *self = Writing {
            elsewhere: self.elsewhere.take(),
            ..Writing::default()
        };
    }

    /// Starts the response over (a retry): the message that tells pages to drop what they show
    /// (other instances are told at their next announcement).
    pub(super) fn over(&mut self) -> Forming {
        let round = self.so_far.round;
        *self = Writing {
            elsewhere: self.elsewhere.take().map(|e| e.restarted(round)),
            ..Writing::default()
        };
        self.so_far.round = round;
        self.batch.round = round;
        restart(round)
    }

    /// Another instance follows the run, until `until` unless it says so again: with `fresh`
    /// (a browser joined there), the next announcement is everything so far.
    pub(super) fn watched_elsewhere(&mut self, fresh: bool, until: Instant) {
        match &mut self.elsewhere {
            Some(elsewhere) if !fresh => elsewhere.until = until,
            _ => {
                let pending = self
                    .snapshot()
                    .unwrap_or_else(|| restart(self.so_far.round));
                self.elsewhere = Some(Elsewhere { until, pending });
            }
        }
    }

    /// What other instances were not told yet, if anything: told now. A following nobody
    /// renewed by `now` ends.
    pub(super) fn elsewhere_due(&mut self, now: Instant) -> Option<Forming> {
        if self.elsewhere.as_ref().is_some_and(|e| e.until < now) {
            self.elsewhere = None;
        }
        let pending = &mut self.elsewhere.as_mut()?.pending;
        if pending.is_empty() && !pending.reset {
            return None;
        }
        let round = pending.round;
        Some(std::mem::replace(
            pending,
            Forming {
                round,
                ..Forming::default()
            },
        ))
    }

    /// Everything so far, as the first message of a stream that joins now (none if nothing was
    /// written yet).
    pub(super) fn snapshot(&self) -> Option<Forming> {
        (!self.so_far.is_empty()).then(|| Forming {
            reset: true,
            ..self.so_far.clone()
        })
    }
}

/// The message that starts round `round`'s response over.
fn restart(round: u32) -> Forming {
    Forming {
        round,
        reset: true,
        ..Forming::default()
    }
}

fn add(forming: &mut Forming, delta: &Delta) {
    match delta {
        Delta::Text { text } => forming.write(text, false),
        Delta::Thinking { text } => forming.write(text, true),
        Delta::ToolCall {
            index,
            name,
            arguments,
            ..
        } => forming.call(*index, name.as_deref(), arguments),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_data::FORMING_BYTES;

    fn text(text: &str) -> Delta {
        Delta::Text { text: text.into() }
    }

    #[test]
    fn deltas_are_gathered_into_one_message_per_interval_and_nothing_is_lost_in_the_sum() {
        let mut writing = Writing::default();
        let first = writing
            .add(1, &text("Hel"), true)
            .expect("the first is sent at once");
        assert_eq!(first.text, "Hel");
        // Within the interval: gathered, not sent.
        assert_eq!(writing.add(1, &text("lo"), true), None);
        assert_eq!(
            writing.add(
                1,
                &Delta::ToolCall {
                    index: 0,
                    id: None,
                    name: Some("update_page".into()),
                    arguments: "{\"slug\"".into()
                },
                true
            ),
            None
        );
        std::thread::sleep(FORMING_EVERY);
        let next = writing.add(1, &text("!"), true).expect("due again");
        assert_eq!(next.text, "lo!");
        assert_eq!(next.calls[0].name.as_deref(), Some("update_page"));
        let mut shown = first;
        shown.extend(&next);
        assert_eq!(shown.text, "Hello!");
        assert_eq!(writing.snapshot().unwrap().text, "Hello!");
        assert!(writing.snapshot().unwrap().reset);
        // A new round starts over.
        writing.add(2, &text("New"), false);
        assert_eq!(writing.snapshot().unwrap().text, "New");
        assert_eq!(writing.snapshot().unwrap().round, 2);
    }

    #[test]
    fn a_forming_response_is_bounded_and_says_it_was_cut() {
        let mut writing = Writing::default();
        let long = "é".repeat(FORMING_BYTES);
        writing.add(1, &text(&long), false);
        writing.add(1, &text("more"), false);
        let so_far = writing.snapshot().unwrap();
        assert!(so_far.text.len() <= FORMING_BYTES);
        assert!(so_far.cut);
        for index in 0..100 {
            writing.add(
                1,
                &Delta::ToolCall {
                    index,
                    id: None,
                    name: Some("t".into()),
                    arguments: String::new(),
                },
                false,
            );
        }
        assert_eq!(
            writing.snapshot().unwrap().calls.len(),
            crate::page_data::FORMING_CALLS
        );
    }

    #[test]
    fn other_instances_get_everything_so_far_then_what_came_since_and_a_retry_starts_over() {
        let now = Instant::now();
        let later = now + Duration::from_secs(10);
        let mut writing = Writing::default();
        writing.add(1, &text("Hello"), false);
        assert_eq!(
            writing.elsewhere_due(now),
            None,
            "nobody elsewhere follows it"
        );
        // A browser on another instance joins: everything so far, whole.
        writing.watched_elsewhere(true, later);
        let first = writing.elsewhere_due(now).unwrap();
        assert!(first.reset);
        assert_eq!(first.text, "Hello");
        assert_eq!(writing.elsewhere_due(now), None, "nothing new");
        writing.add(1, &text(", wor"), true);
        writing.add(1, &text("ld"), false);
        // Still followed: no snapshot, just what came since.
        writing.watched_elsewhere(false, later);
        let next = writing.elsewhere_due(now).unwrap();
        assert!(!next.reset);
        assert_eq!(next.text, ", world");
        // A retry: the other instances are told to drop what they show.
        writing.add(1, &text("half"), false);
        let over = writing.over();
        assert!(over.reset && over.is_empty());
        let told = writing.elsewhere_due(now).unwrap();
        assert!(told.reset && told.is_empty(), "{told:?}");
        // The step lands: what they were not sent still goes.
        writing.add(1, &text("Again"), false);
        writing.landed();
        assert_eq!(writing.snapshot(), None);
        assert_eq!(writing.elsewhere_due(now).unwrap().text, "Again");
        // A new round starts over there too.
        writing.add(2, &text("Next"), false);
        let round = writing.elsewhere_due(now).unwrap();
        assert!(round.reset);
        assert_eq!((round.round, round.text.as_str()), (2, "Next"));
        // Nobody renewed the following: it ends.
        writing.add(2, &text("!"), false);
        assert_eq!(writing.elsewhere_due(later + Duration::from_secs(1)), None);
        writing.add(2, &text("?"), false);
        assert_eq!(writing.elsewhere_due(now), None);
    }
}
