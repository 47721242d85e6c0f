//! The built-in tools' registry, in their groups.

use super::messages::*;
use super::read_pages::*;
use super::system::*;
use super::write_pages::*;
use crate::site::SiteStore;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_store::RunStore;
use std::sync::Arc;

/// Registers every built-in tool.
pub fn builtin_registry(site: SiteStore, runs: Arc<dyn RunStore>) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let results = [
        registry.register(ListPages(site.clone())).map(|_| ()),
        registry.register(GetPage(site.clone())).map(|_| ()),
        registry.register(SearchPages(site.clone())).map(|_| ()),
        registry.register(PageHistory(site.clone())).map(|_| ()),
        registry.register(SiteStatsTool(site.clone())).map(|_| ()),
        registry.register(ListOutbox(site.clone())).map(|_| ()),
        registry.register(CurrentTime).map(|_| ()),
        registry.register(Calculate).map(|_| ()),
        registry.register(ListRuns(Arc::clone(&runs))).map(|_| ()),
        registry.register(GetRunSummary(runs)).map(|_| ()),
        registry.register(UpdatePage(site.clone())).map(|_| ()),
        registry.register(CreatePage(site.clone())).map(|_| ()),
        registry.register(PublishPage(site.clone())).map(|_| ()),
        registry.register(DeletePage(site.clone())).map(|_| ()),
        registry.register(SendMessage(site)).map(|_| ()),
        registry
            .register(nrllm_core::question::AskOperator)
            .map(|_| ()),
    ];
    // The names above are distinct; a clash would be a programming error caught by the tests.
    debug_assert!(results.iter().all(Result::is_ok));
    registry
}
