//! The MCP tools' gates kept across restarts, on both backends: what a server's tools joined
//! with is read back at the next start, one server's write replaces only its own tools.

use std::collections::BTreeMap;

use nrllm_store::mcp_gates::McpGateStore;
use nrllm_store::testing::backends;

fn gates(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
    pairs
        .iter()
        .map(|(tool, waits)| ((*tool).to_owned(), *waits))
        .collect()
}

#[tokio::test]
async fn a_servers_gates_are_kept_and_replaced_whole_without_touching_another_servers() {
    for db in backends().await {
        let store = McpGateStore::new(db.db.clone());
        assert!(store.recall().await.unwrap().is_empty(), "{}", db.name);
        store
            .remember(
                "web",
                &gates(&[("web__write_note", true), ("web__count_words", false)]),
            )
            .await
            .unwrap();
        store
            .remember("notes", &gates(&[("notes__read_note", false)]))
            .await
            .unwrap();
        // The server's tools as they joined again: one gone, one loosened and accepted.
        store
            .remember("web", &gates(&[("web__write_note", false)]))
            .await
            .unwrap();
        // What a new start reads, through another handle on the same database.
        let again = McpGateStore::new(db.db.clone()).recall().await.unwrap();
        assert_eq!(
            again,
            gates(&[("notes__read_note", false), ("web__write_note", false)]),
            "{}",
            db.name
        );
        db.cleanup().await;
    }
}
