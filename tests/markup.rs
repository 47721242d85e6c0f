//! Guards for the places where text could leave Leptos's escaping: every `<textarea>`, every
//! `inner_html` and every `<Title>` of the app goes through the one component or helper that
//! escapes for it (`src/components.rs`). A new raw one fails here, naming the file and line.

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
}

#[test]
fn raw_text_elements_and_inner_html_are_written_only_by_the_escaping_component() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 10, "the app's sources were not found");
    let mut offences = Vec::new();
    for (path, text) in &files {
        let escaping_home = path.ends_with("src/components.rs");
        for (number, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            let raw = ["<textarea", "inner_html", "<script", "<style", "<noscript"]
                .iter()
                .any(|needle| line.contains(needle));
            // `<Title text=…>` is written raw by leptos_meta: only a literal or `page_title(…)`.
            let title = line.contains("<Title ")
                && !line.contains("<Title text=page_title(")
                && !line.contains("<Title text=\"");
            if (raw && !escaping_home) || title {
                offences.push(format!("{path}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

#[test]
fn every_form_that_posts_carries_the_csrf_field() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut posts = 0;
    let mut offences = Vec::new();
    for (path, text) in &files {
        let lines: Vec<&str> = text.lines().collect();
        for (number, line) in lines.iter().enumerate() {
            if line.contains("<form") && line.contains("method=\"post\"") {
                posts += 1;
                let carries = lines[number + 1..(number + 4).min(lines.len())]
                    .iter()
                    .any(|next| next.contains("<CsrfField"));
                if !carries {
                    offences.push(format!("{path}:{}", number + 1));
                }
            }
        }
    }
    assert!(posts >= 4, "the app's post forms were not found");
    assert!(
        offences.is_empty(),
        "forms that post without <CsrfField /> right after their opening tag: {offences:?}"
    );
}
