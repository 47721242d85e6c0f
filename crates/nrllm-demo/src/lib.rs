//! nrllm-demo: what the playground acts on when no real model or system is connected — a small
//! website kept in the run database (pages with a change history, an outbox that sends nothing),
//! the built-in tools that read and change it (the changing ones wait for approval), and the
//! offline demo model that walks the approve/deny flow deterministically.

pub mod demo;
pub mod site;
pub mod tools;
