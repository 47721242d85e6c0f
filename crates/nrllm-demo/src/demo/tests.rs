use super::script::*;
use super::tasks::*;
use nrllm_core::transcript::Message;
use serde_json::json;

#[test]
fn note_tasks_go_through_whichever_notes_server_is_offered() {
    assert_eq!(
        parse_task("Write the note todo saying \"Buy milk\""),
        Task::WriteNote {
            name: Some("todo".into()),
            text: "Buy milk".into()
        }
    );
    assert_eq!(
        parse_task("Read the note todo"),
        Task::ReadNote {
            name: Some("todo".into())
        }
    );
    assert_eq!(parse_task("List the notes"), Task::ReadNote { name: None });
    assert_eq!(parse_task("Count the words in my notes"), Task::CountWords);
    let offered = ["get_page".to_owned(), "files__write_note".to_owned()];
    let write = Task::WriteNote {
        name: Some("todo".into()),
        text: "x".into(),
    };
    assert_eq!(
        parse_task("Write a note saying buy milk"),
        Task::WriteNote {
            name: None,
            text: "buy milk".into()
        }
    );
    match next(&parse_task("Write a note saying buy milk"), &[], &offered) {
        Next::CallOffered(_, args) => assert_eq!(args, json!({"text": "buy milk"})),
        _ => panic!("calls write_note without a name"),
    }
    match next(&write, &[], &offered) {
        Next::CallOffered(tool, args) => {
            assert_eq!(tool, "files__write_note");
            assert_eq!(args, json!({"name": "todo", "text": "x"}));
        }
        _ => panic!("calls the offered write_note"),
    }
    match next(&write, &[], &offered[..1]) {
        Next::Answer(text) => assert!(text.contains("no MCP notes server"), "{text}"),
        _ => panic!("answers that no notes server is offered"),
    }
}

#[test]
fn the_demo_prompts_are_understood() {
    assert_eq!(
        parse_task("Rename the home page to \"Hello\""),
        Task::Rename {
            slug: "home".into(),
            title: "Hello".into()
        }
    );
    assert_eq!(
        parse_task("Change the body of the about page to \"We are three people.\""),
        Task::Rewrite {
            slug: "about".into(),
            body: "We are three people.".into()
        }
    );
    assert_eq!(
        parse_task("Create a page faq titled \"Questions\""),
        Task::Create {
            slug: "faq".into(),
            title: "Questions".into()
        }
    );
    assert_eq!(
        parse_task("Publish the careers page and tell team@example.com"),
        Task::Publish {
            slug: "careers".into(),
            notify: Some("team@example.com".into())
        }
    );
    assert_eq!(
        parse_task("Delete the changelog page"),
        Task::Delete {
            slug: "changelog".into()
        }
    );
    assert_eq!(
        parse_task("Send a message to team@example.com saying the site is live"),
        Task::Message {
            to: "team@example.com".into(),
            text: "the site is live".into()
        }
    );
    assert_eq!(
        parse_task("Search for pricing"),
        Task::Search {
            query: "pricing".into()
        }
    );
    assert_eq!(parse_task("List the pages"), Task::List);
    assert_eq!(
        parse_task("Show the history of the home page"),
        Task::History {
            slug: "home".into()
        }
    );
    assert_eq!(parse_task("What time is it?"), Task::Time);
    assert_eq!(
        parse_task("Calculate (12 * 7) / 3"),
        Task::Calculate {
            expression: "(12 * 7) / 3".into()
        }
    );
    assert_eq!(parse_task("List the recent runs"), Task::Runs);
    assert_eq!(
        parse_task("rename home to Start"),
        Task::Rename {
            slug: "home".into(),
            title: "Start".into()
        }
    );
    assert_eq!(parse_task("Write me a poem"), Task::Unknown);
    // Non-ASCII text never splits a character.
    assert_eq!(
        parse_task("Rename the İstanbul page to \"Über\""),
        Task::Unknown
    );
    assert_eq!(
        parse_task("Rename the home page to \"Über uns\""),
        Task::Rename {
            slug: "home".into(),
            title: "Über uns".into()
        }
    );
    for prompt in DEMO_PROMPTS {
        assert_ne!(parse_task(prompt), Task::Unknown, "{prompt}");
    }
}

#[test]
fn skills_in_front_of_the_task_are_ignored() {
    let messages = vec![Message::user("<skills note=\"x\">\n<skill name=\"a\">\nrename all\n</skill>\n</skills>\n\nList the pages")];
    assert_eq!(task_text(&messages), "List the pages");
}

#[tokio::test]
async fn the_demo_model_writes_its_response_in_pieces_over_its_think_time() {
    use super::provider::DemoProvider;
    use nrllm_core::provider::{ignore_retries, ChatRequest, Delta, ModelOptions, Provider};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    let provider = DemoProvider::with_think_time(Duration::from_millis(300));
    let ask = |prompt: &str, tools: Vec<nrllm_core::tool::ToolSpec>| ChatRequest {
        messages: vec![Message::user(prompt)],
        tools,
        tool_choice: Default::default(),
        options: ModelOptions::default(),
    };
    // An answer: word by word, adding up to the text.
    let request = ask("Sing me a song", Vec::new());
    let deltas = Mutex::new(Vec::new());
    let started = Instant::now();
    let streamed = provider
        .stream(&request, &ignore_retries, &|d| {
            deltas.lock().unwrap().push(d)
        })
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "spread over the think time"
    );
    let deltas = deltas.into_inner().unwrap();
    let text: String = deltas
        .iter()
        .map(|d| match d {
            Delta::Text { text } => text.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(Some(text.as_str()), streamed.content.as_deref());
    assert!(deltas.len() > 3, "{deltas:?}");
    // The same answer as without streaming.
    let whole = provider.complete(&request, &ignore_retries).await.unwrap();
    assert_eq!(whole, streamed);
    // A call: its name first, then its arguments in pieces.
    let tools = ["get_page", "update_page"]
        .map(|name| {
            serde_json::from_value(json!({"name": name, "description": "", "parameters": {},
                "group": "pages", "enabled_by_default": true, "admin_only": false,
                "requires_approval": name == "update_page"}))
            .unwrap()
        })
        .to_vec();
    let request = ask("Rename the home page to \"Hi\"", tools);
    let deltas = Mutex::new(Vec::new());
    let streamed = provider
        .stream(&request, &ignore_retries, &|d| {
            deltas.lock().unwrap().push(d)
        })
        .await
        .unwrap();
    let call = &streamed.tool_calls[0];
    let deltas = deltas.into_inner().unwrap();
    assert!(
        matches!(&deltas[0], Delta::ToolCall { index: 0, name: Some(name), .. } if *name == call.name)
    );
    let arguments: String = deltas
        .iter()
        .filter_map(|d| match d {
            Delta::ToolCall { arguments, .. } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(arguments, call.arguments);
}

#[test]
fn keep_checking_the_time_loops_until_no_tool_is_offered() {
    assert_eq!(parse_task("Keep checking the time"), Task::Watch);
    assert_eq!(parse_task("What time is it?"), Task::Time);
    let offered = ["current_time".to_owned()];
    let reading = || Step {
        tool: "current_time".into(),
        result: "12:00".into(),
        outcome: nrllm_core::transcript::ToolOutcome::Ok,
    };
    let done = vec![reading(), reading(), reading()];
    // However many readings it has, it asks for another while the tool is offered.
    for so_far in 0..=done.len() {
        match next(&Task::Watch, &done[..so_far], &offered) {
            Next::Call(calls) => assert_eq!(calls[0].0, "current_time"),
            _ => panic!("reads the clock again after {so_far}"),
        }
    }
    // The closing round offers no tool: it answers with what it read.
    match next(&Task::Watch, &done, &[]) {
        Next::Answer(text) => {
            assert_eq!(text, "I read the clock 3 times; the last reading: 12:00.")
        }
        _ => panic!("answers when no tool is offered"),
    }
}
