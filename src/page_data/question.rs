//! A question for the operator as the pages show it: the run's own (`ask_operator`) or a tool's
//! server's (MCP elicitation, a form or a link to open).

use serde::{Deserialize, Serialize};

/// A question the run asks the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionView {
    pub text: String,
    /// Answer with one of these (buttons)…
    pub choices: Vec<String>,
    /// … or fill these fields (from the question's JSON Schema) …
    pub fields: Vec<FieldView>,
    // … or, with neither, free text.
    /// A tool's server asked it while a call ran (MCP elicitation): the server's name and the
    /// tool the call is of. Such a question may be declined or cancelled too.
    #[serde(default)]
    pub asked_by: Option<AskedBy>,
    /// The server asks the operator to open a page (URL mode) and say when they are done there.
    #[serde(default)]
    pub link: Option<QuestionLink>,
}

/// A page a server asks the operator to open: `https`, its host as shown (punycode for a name
/// that is not ASCII).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionLink {
    pub url: String,
    pub host: String,
}

/// The server that asks, and the tool whose call it asks during.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskedBy {
    pub server: String,
    pub tool: String,
    /// It asked inside its open call (a server before MCP 2026-07-28), which is held open
    /// for the answer until the run's deadline, when it is answered `cancel`.
    #[serde(default)]
    pub held: bool,
}

/// One field of a question's form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldView {
    pub name: String,
    /// Its description, or its name.
    pub label: String,
    /// `text`, `number`, `integer`, `boolean` or `select` (with `options`).
    pub kind: String,
    pub options: Vec<String>,
    pub required: bool,
}
