//! A question the run waits on, with its form: one the model asked (`ask_operator`), or one a
//! tool's server asked while a call ran (MCP elicitation: the server is named, and its question
//! may be declined or cancelled as well as answered). It posts to `nrllm_input_answer` as a plain
//! form; the first answer to arrive wins. Every text in it came from a model or a server and is
//! shown as text.

use leptos::prelude::*;

use crate::api::NrllmInputAnswer;
use crate::components::{TextArea, BUTTON_DENY, BUTTON_PRIMARY, INPUT};
use crate::field;
use crate::forms::{action, CsrfField};
use crate::page_data::{FieldView, QuestionLink, RunView};
use crate::times::deadline_line;

/// One field of a question's form; its value is posted as `<base>[<field name>]`.
#[component]
pub(crate) fn QuestionField(prefix: String, base: String, field: FieldView) -> impl IntoView {
    let id = format!("{prefix}-field-{}", field.name);
    let name = format!("{base}[{}]", field.name);
    let label = view! { <label for=id.clone() class="block text-sm font-medium">{field.label.clone()}{field.required.then_some(" *")}</label> };
    let input = match field.kind.as_str() {
        "boolean" => view! { <input type="checkbox" id=id.clone() name=name value="true" /> }.into_any(),
        "select" => view! {
            <select id=id.clone() name=name class=INPUT required=field.required>
                {(!field.required).then(|| view! { <option value="">"—"</option> })}
                {field.options.iter().map(|o| view! { <option value=o.clone()>{o.clone()}</option> }).collect_view()}
            </select>
        }.into_any(),
        "integer" | "number" => view! {
            <input type="text" inputmode="decimal" id=id.clone() name=name class=INPUT required=field.required maxlength=40 />
        }.into_any(),
        _ => view! {
            <input type="text" id=id.clone() name=name class=INPUT required=field.required maxlength=nrllm_types::RULE_VALUE_CHARS * 10 />
        }.into_any(),
    };
    view! { <div data-testid="question-field" data-name=field.name.clone()>{label}{input}</div> }
}

/// The question a run waiting for input asks, with its form: a button per choice, the fields of
/// its schema, or a box for free text. It posts to `nrllm_input_answer`; the first answer to
/// arrive wins.
///
/// `then` (from the inbox: `next?<its filters>`): where the browser goes after the answer.
#[component]
pub fn QuestionPanel(run: RunView, #[prop(optional)] then: Option<String>) -> impl IntoView {
    let Some(call) = run.pending.iter().find(|c| c.question.is_some()).cloned() else {
        return ().into_any();
    };
    let question = call.question.clone().unwrap_or_default();
    let prefix = format!("run-{}", run.summary.id);
    let heading = match &question.asked_by {
        Some(by) => format!("The MCP server {} asks you, during {}", by.server, by.tool),
        None => "The run asks you".to_owned(),
    };
    let asked = view! {
        <h2 class="font-semibold" tabindex="-1" data-panel-heading="">{heading}</h2>
        <p class="mt-1 whitespace-pre-wrap" data-testid="question">{question.text.clone()}</p>
        {question.asked_by.as_ref().map(|by| view! {
            <p class="mt-1 text-xs text-slate-500" data-testid="question-asked-by">{asked_by_note(by.held)}</p>
        })}
        {deadline_line(&run)}
    };
    let classes = "mt-4 rounded-lg border-2 border-sky-300 bg-sky-50/50 p-4 dark:border-sky-800 dark:bg-sky-950/30";
    if let Some(block) = run.decide_block.clone() {
        return view! {
            <section class=classes data-testid="question-panel">
                {asked}
                <p class="mt-2 text-sm font-medium" data-testid="cannot-decide">{block}</p>
            </section>
        }
        .into_any();
    }
    let answer = if !question.choices.is_empty() {
        view! {
            <div class="flex flex-wrap gap-2">
                {question.choices.iter().map(|choice| view! {
                    <button type="submit" name=field!(NrllmInputAnswer, answer) value=choice.clone() class=BUTTON_PRIMARY data-testid="choice">{choice.clone()}</button>
                }).collect_view()}
            </div>
        }
        .into_any()
    } else if !question.fields.is_empty() {
        view! {
            <div class="grid gap-2 sm:grid-cols-2">
                {question.fields.iter().cloned().map(|field| view! {
                    <QuestionField prefix=prefix.clone() base=field!(NrllmInputAnswer, fields).to_owned() field />
                }).collect_view()}
            </div>
            <button type="submit" class=BUTTON_PRIMARY data-testid="answer-submit">"Answer"</button>
            {question.asked_by.is_some().then(refuse_buttons)}
        }
        .into_any()
    } else if let Some(link) = question.link.clone() {
        view! { <OpenLink link /> }.into_any()
    } else {
        let id = format!("{prefix}-answer");
        view! {
            <label for=id.clone() class="block text-sm font-medium">"Your answer"</label>
            <TextArea id=id name=field!(NrllmInputAnswer, answer) rows=3 class=INPUT maxlength=nrllm_types::MAX_ANSWER_CHARS />
            <button type="submit" class=BUTTON_PRIMARY data-testid="answer-submit">"Answer"</button>
        }
        .into_any()
    };
    view! {
        <section class=classes data-testid="question-panel">
            {asked}
            <form method="post" action={action::<NrllmInputAnswer>()} class="mt-3 space-y-2">
                <CsrfField />
                <input type="hidden" name=field!(NrllmInputAnswer, run_id) value=run.summary.id.clone() />
                <input type="hidden" name=field!(NrllmInputAnswer, digest) value=run.digest.clone().unwrap_or_default() />
                <input type="hidden" name=field!(NrllmInputAnswer, call_id) value=call.call_id.clone() />
                {then.map(|then| view! { <input type="hidden" name=field!(NrllmInputAnswer, then) value=then /> })}
                {answer}
            </form>
        </section>
    }
    .into_any()
}

/// Decline and Cancel, for a server's question: posted with `action`, the form's fields not
/// required for them.
fn refuse_buttons() -> impl IntoView {
    view! {
        <button type="submit" name=field!(NrllmInputAnswer, action) value="decline" formnovalidate=true class=BUTTON_DENY data-testid="answer-decline">"Decline"</button>
        <button type="submit" name=field!(NrllmInputAnswer, action) value="cancel" formnovalidate=true class="ml-2 text-sm underline" data-testid="answer-cancel">"Cancel"</button>
    }
}

/// What becomes of the answer to a server's question: sent with the call again, or (`held`)
/// into the call the server holds open for it.
fn asked_by_note(held: bool) -> &'static str {
    match held {
        false => "Your answer goes back to the server, and the call is sent again with it. Decline if it should not have it; cancel to dismiss the question.",
        true => "The server holds its call open for your answer, which goes back to it in that call; without one by the deadline, it is told \"cancel\". Decline if it should not have it; cancel to dismiss the question.",
    }
}

/// A page the server asks the operator to open (URL mode): the link, its host said plainly, and
/// a button to say when they are done there. The link opens in a new tab, telling that page
/// nothing about ours.
#[component]
fn OpenLink(link: QuestionLink) -> impl IntoView {
    view! {
        <p class="text-sm">
            "Open "
            <a href=link.url.clone() target="_blank" rel="noopener noreferrer nofollow" class="break-all underline" data-testid="question-link">{link.url.clone()}</a>
        </p>
        <p class="text-sm font-medium" data-testid="question-host">{format!("It leads to {} — open it only if you expected this server to send you there.", link.host)}</p>
        <button type="submit" class=BUTTON_PRIMARY data-testid="answer-submit">"I am done there"</button>
        {refuse_buttons()}
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    /// A server's link and host are attribute and text, escaped: a link that tries to close its
    /// attribute stays inside it, a host that holds markup shows as text.
    #[test]
    fn a_servers_link_renders_as_a_link_and_text_never_as_markup() {
        let link = QuestionLink {
            url: "https://xn--bcher-kva.example/\"><img src=x onerror=alert(1)>".to_owned(),
            host: "<b>xn--bcher-kva.example</b>".to_owned(),
        };
        let html = view! { <OpenLink link /> }.to_html();
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
        assert!(
            html.contains("href=\"https://xn--bcher-kva.example/&quot;&gt;&lt;img")
                || html.contains("href=\"https://xn--bcher-kva.example/&quot;>&lt;img"),
            "{html}"
        );
        assert!(
            html.contains("rel=\"noopener noreferrer nofollow\""),
            "{html}"
        );
        assert!(
            html.contains("It leads to &lt;b&gt;xn--bcher-kva.example&lt;/b&gt;"),
            "{html}"
        );
        assert!(html.contains("name=\"action\" value=\"decline\""), "{html}");
    }
}
