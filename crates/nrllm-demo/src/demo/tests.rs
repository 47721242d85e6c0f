use super::script::*;
use super::tasks::*;
use nrllm_core::transcript::Message;
use serde_json::json;

#[test]
fn note_tasks_go_through_whichever_notes_server_is_offered() {
    assert_eq!(
        parse_task("Write the note todo saying \"Buy milk\""),
        Task::WriteNote {
            name: "todo".into(),
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
    let offered = ["get_page".to_owned(), "files__write_note".to_owned()];
    let write = Task::WriteNote {
        name: "todo".into(),
        text: "x".into(),
    };
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
