//! The bulk bar: approve or deny the picked rows together (with JavaScript; a row can be picked
//! once its panel was opened on this page, so that its previews were seen and its digest is
//! known). Each run is still claimed on its own; the list below says what happened to each.

use leptos::prelude::*;

use crate::components::{BUTTON_APPROVE, BUTTON_DENY, INPUT};
use crate::forms::CsrfField;

#[component]
pub fn BulkBar() -> impl IntoView {
    view! {
        <section class="mt-4 rounded-lg border border-slate-200 p-3 dark:border-slate-800" aria-labelledby="bulk-title" data-bulk="" data-needs-script="" hidden data-testid="bulk-bar">
            <h2 id="bulk-title" class="text-sm font-semibold">"Decide the picked turns together"</h2>
            <p class="text-xs text-slate-500">"A turn can be picked once its panel was opened here; each is decided as its panel showed it, or refused if it changed since."</p>
            <CsrfField />
            <div class="mt-2 flex flex-wrap items-end gap-2">
                <div class="min-w-64">
                    <label for="bulk-reason" class="text-sm font-medium">"Reason, if denied (the model reads it)"</label>
                    <input id="bulk-reason" class=INPUT maxlength=crate::page_data::MAX_REASON_CHARS />
                </div>
                <button type="button" class=BUTTON_APPROVE data-bulk-decision="approve_all">"Approve picked"</button>
                <button type="button" class=BUTTON_DENY data-bulk-decision="deny_all">"Deny picked"</button>
            </div>
            <ul class="mt-2 space-y-1 text-sm" data-bulk-results="" aria-live="polite" tabindex="-1" data-testid="bulk-results"></ul>
        </section>
    }
}
