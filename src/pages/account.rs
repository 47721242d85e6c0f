//! `/login`, `/login/once` (a one-time link's page: a button, since a GET changes nothing),
//! `/account` (one's own password) and `/admin` (users and API tokens). Plain forms, so all of it
//! works without JavaScript.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::accounts::{
    nrllm_account_get, nrllm_admin_get, nrllm_me, AccountView, AdminView, NrllmLogin,
    NrllmLoginLink, NrllmPasswordSet, NrllmTokenCreate, NrllmTokenRevoke, NrllmToolSet,
    NrllmUserCreate, NrllmUserUpdate,
};
use crate::api::contacts::NrllmUserContact;
use crate::components::{
    url_error, Card, ErrorBanner, FieldError, BUTTON_PRIMARY, BUTTON_SECONDARY, INPUT,
};
use crate::field;
use crate::forms::{action, CsrfField};

/// The login form.
#[component]
pub fn LoginPage() -> impl IntoView {
    let next = use_query_map()
        .read_untracked()
        .get("next")
        .unwrap_or_else(|| "/".to_owned());
    let error = url_error();
    view! {
        <Title text="Log in — nrllm playground" />
        <div class="mx-auto max-w-sm">
            <h1 class="text-2xl font-semibold">"Log in"</h1>
            <ErrorBanner error=error.clone().filter(|e| e.field().is_none()) />
            <form method="post" action={action::<NrllmLogin>()} class="mt-4 space-y-3" data-testid="login-form">
                <CsrfField />
                <input type="hidden" name=field!(NrllmLogin, next) value=next />
                <div>
                    <label for="name" class="text-sm font-medium">"Name"</label>
                    <input id="name" name=field!(NrllmLogin, name) required=true autocomplete="username" class=INPUT maxlength=64 />
                </div>
                <div>
                    <label for="password" class="text-sm font-medium">"Password"</label>
                    <input id="password" type="password" name=field!(NrllmLogin, password) required=true autocomplete="current-password" class=INPUT maxlength=1024 />
                </div>
                <button type="submit" class=BUTTON_PRIMARY data-testid="log-in">"Log in"</button>
            </form>
            <p class="mt-4 text-sm text-slate-600 dark:text-slate-400">
                "First start? The server printed a one-time login link for the user admin in its log (or set NRLLM_ADMIN_PASSWORD before the first start)."
            </p>
        </div>
    }
}

/// A one-time login link's page.
#[component]
pub fn LoginOncePage() -> impl IntoView {
    let token = use_query_map()
        .read_untracked()
        .get("token")
        .unwrap_or_default();
    view! {
        <Title text="Log in — nrllm playground" />
        <div class="mx-auto max-w-sm">
            <h1 class="text-2xl font-semibold">"Log in with a one-time link"</h1>
            <ErrorBanner error=url_error() />
            <form method="post" action={action::<NrllmLoginLink>()} class="mt-4">
                <CsrfField />
                <input type="hidden" name=field!(NrllmLoginLink, token) value=token />
                <button type="submit" class=BUTTON_PRIMARY data-testid="use-link">"Log in"</button>
            </form>
            <p class="mt-2 text-sm text-slate-600 dark:text-slate-400">"The link works once; then set a password."</p>
        </div>
    }
}

/// One's own account: who, which role, a new password, and one's API tokens.
#[component]
pub fn AccountPage() -> impl IntoView {
    let me = Resource::new(|| (), |_| nrllm_me());
    let shown = use_query_map().read_untracked().get("shown");
    let account = Resource::new(move || shown.clone(), nrllm_account_get);
    let error = url_error();
    view! {
        <Title text="Account — nrllm playground" />
        <h1 class="text-2xl font-semibold">"Your account"</h1>
        <ErrorBanner error=error.clone().filter(|e| e.field().is_none()) />
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                me.await.ok().flatten().map(|me| view! {
                    <p class="mt-2" data-testid="account-who">{format!("{} ({})", me.name, me.role)}</p>
                })
            })}
        </Suspense>
        <form method="post" action={action::<NrllmPasswordSet>()} class="mt-4 max-w-sm space-y-3">
            <CsrfField />
            <div>
                <label for="current" class="text-sm font-medium">"Current password (if you have one)"</label>
                <input id="current" type="password" name=field!(NrllmPasswordSet, current) autocomplete="current-password" class=INPUT maxlength=1024 />
                <FieldError error=error.clone() field="current" />
            </div>
            <div>
                <label for="new-password" class="text-sm font-medium">"New password (10 characters or more)"</label>
                <input id="new-password" type="password" name=field!(NrllmPasswordSet, password) required=true autocomplete="new-password" class=INPUT maxlength=1024 />
                <FieldError error=error.clone() field="password" />
            </div>
            <button type="submit" class=BUTTON_PRIMARY>"Set password"</button>
        </form>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                account.await.ok().map(|view| view! { <OwnTokens view /> })
            })}
        </Suspense>
    }
}

/// A token made a moment ago, shown this once.
#[component]
fn NewToken(token: Option<(String, String)>) -> impl IntoView {
    token.map(|(name, token)| view! {
        <div role="status" class="mt-4 rounded-md border border-emerald-300 bg-emerald-50 p-3 dark:border-emerald-800 dark:bg-emerald-950">
            <p class="text-sm">{format!("The token {name}, shown this once — copy it now; only its hash is kept:")}</p>
            <code class="mt-1 block break-all font-mono text-sm" data-testid="new-token">{token}</code>
        </div>
    })
}

/// One token's line: name, role, whose, when; and its revoke button.
#[component]
fn TokenLine(token: crate::api::accounts::TokenView) -> impl IntoView {
    let user = match token.user.is_empty() {
        true => "nobody (it works no more)".to_owned(),
        false => token.user.clone(),
    };
    view! {
        <li class="flex flex-wrap items-center gap-2 py-2" data-testid="token">
            <span class="font-mono">{token.name.clone()}</span>
            <span class="text-sm">{token.role.clone()}</span>
            <span class="text-xs text-slate-500">{format!(
                "acts as {user}; by {} on {}; {}",
                token.created_by,
                token.created,
                token.last_used.clone().map(|at| format!("last used {at}")).unwrap_or_else(|| "never used".to_owned())
            )}</span>
            <form method="post" action={action::<NrllmTokenRevoke>()}>
                <CsrfField />
                <input type="hidden" name=field!(NrllmTokenRevoke, name) value=token.name.clone() />
                <button type="submit" class=BUTTON_SECONDARY>"Revoke"</button>
            </form>
        </li>
    }
}

/// One's own API tokens, and a form for a new one.
#[component]
fn OwnTokens(view: AccountView) -> impl IntoView {
    let tokens = view
        .tokens
        .into_iter()
        .map(|token| view! { <TokenLine token /> })
        .collect_view();
    let token_roles = role_options(&view.roles, "viewer");
    view! {
        <NewToken token=view.new_token />
        <div class="mt-6 max-w-3xl">
            <Card title="Your API tokens">
                <p class="text-sm text-slate-600 dark:text-slate-400">"A script sends a token as Authorization: Bearer <token>. It acts as you, with the lower of its role and yours, and stops working if your account is disabled."</p>
                <ul class="divide-y divide-slate-100 dark:divide-slate-800">{tokens}</ul>
                <form method="post" action={action::<NrllmTokenCreate>()} class="mt-4 flex flex-wrap items-end gap-2" data-testid="own-token-form">
                    <CsrfField />
                    <label class="text-sm">"Name" <input name=field!(NrllmTokenCreate, name) required=true class=INPUT maxlength=64 /></label>
                    <label class="text-sm">"Role" <select name=field!(NrllmTokenCreate, role) class=INPUT>{token_roles}</select></label>
                    <button type="submit" class=BUTTON_PRIMARY>"Create token"</button>
                </form>
            </Card>
        </div>
    }
}

/// Users and API tokens.
#[component]
pub fn AdminPage() -> impl IntoView {
    let shown = use_query_map().read_untracked().get("shown");
    let admin = Resource::new(move || shown.clone(), nrllm_admin_get);
    view! {
        <Title text="Admin — nrllm playground" />
        <h1 class="text-2xl font-semibold">"Admin"</h1>
        <ErrorBanner error=url_error() />
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match admin.await {
                    Ok(view) => view! { <Admin view /> }.into_any(),
                    Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

fn role_options(roles: &[(String, String)], selected: &str) -> impl IntoView {
    roles
        .iter()
        .map(|(role, describe)| {
            view! { <option value=role.clone() selected={role == selected}>{format!("{role} — {describe}")}</option> }
        })
        .collect_view()
}

/// A user's line: their role, whether they are locked out, a new password.
fn user_line(user: crate::api::accounts::UserView, roles: &[(String, String)]) -> impl IntoView {
    view! {
        <li class="py-2" data-testid="user" data-name=user.name.clone()>
            <form method="post" action={action::<NrllmUserUpdate>()} class="flex flex-wrap items-end gap-2">
                <CsrfField />
                <input type="hidden" name=field!(NrllmUserUpdate, name) value=user.name.clone() />
                <span class="w-32 font-mono">{user.name.clone()}</span>
                <select name=field!(NrllmUserUpdate, role) class=INPUT aria-label=format!("Role of {}", user.name)>
                    {role_options(roles, &user.role)}
                </select>
                <label class="flex items-center gap-1 text-sm">
                    <input type="checkbox" name=field!(NrllmUserUpdate, disabled) value="1" checked=user.disabled />
                    "locked out"
                </label>
                <input type="password" name=field!(NrllmUserUpdate, password) placeholder="new password (optional)" class=INPUT autocomplete="new-password" maxlength=1024 />
                <button type="submit" class=BUTTON_SECONDARY>"Save"</button>
                <span class="text-xs text-slate-500">{format!("since {}{}", user.created, if user.has_password { "" } else { ", no password yet" })}</span>
            </form>
            <form method="post" action={action::<NrllmUserContact>()} class="mt-1 flex flex-wrap items-end gap-2" data-testid="user-contact">
                <CsrfField />
                <input type="hidden" name=field!(NrllmUserContact, name) value=user.name.clone() />
                <span class="w-32 text-xs text-slate-500">"reached at"</span>
                <input type="email" name=field!(NrllmUserContact, email) value=user.email.clone() placeholder="email" class=INPUT maxlength=254 aria-label=format!("Email of {}", user.name) />
                <input name=field!(NrllmUserContact, slack_team_id) value=user.slack_team_id.clone() placeholder="Slack team id" class=INPUT maxlength=32 aria-label=format!("Slack team id of {}", user.name) />
                <input name=field!(NrllmUserContact, slack_user_id) value=user.slack_user_id.clone() placeholder="Slack user id" class=INPUT maxlength=32 aria-label=format!("Slack user id of {}", user.name) />
                <button type="submit" class=BUTTON_SECONDARY data-testid="save-contact">"Save addresses"</button>
            </form>
        </li>
    }
}

/// A tool's line: enabled or not.
fn tool_line(tool: crate::page_data::ToolView) -> impl IntoView {
    view! {
        <li class="py-2" data-testid="tool-setting" data-name=tool.name.clone()>
            <form method="post" action={action::<NrllmToolSet>()} class="flex flex-wrap items-center gap-2">
                <CsrfField />
                <input type="hidden" name=field!(NrllmToolSet, name) value=tool.name.clone() />
                <label class="flex w-64 items-center gap-2">
                    <input type="checkbox" name=field!(NrllmToolSet, enabled) value="1" checked=tool.enabled />
                    <span class="font-mono">{tool.name.clone()}</span>
                </label>
                <span class="text-xs text-slate-500">{format!(
                    "{}{}",
                    tool.group,
                    if tool.requires_approval { ", needs approval" } else { "" }
                )}</span>
                <button type="submit" class=BUTTON_SECONDARY>"Save"</button>
            </form>
        </li>
    }
}

#[component]
fn Admin(view: AdminView) -> impl IntoView {
    let roles = view.roles.clone();
    let users = view
        .users
        .into_iter()
        .map(|user| user_line(user, &roles))
        .collect_view();
    let tokens = view
        .tokens
        .into_iter()
        .map(|token| view! { <TokenLine token /> })
        .collect_view();
    let tools = view.tools.into_iter().map(tool_line).collect_view();
    let new_user_roles = role_options(&roles, "operator");
    let token_roles = role_options(&roles, "viewer");
    view! {
        <NewToken token=view.new_token />
        <div class="mt-4 grid gap-4">
            <Card title="Users">
                <ul class="divide-y divide-slate-100 dark:divide-slate-800">{users}</ul>
                <form method="post" action={action::<NrllmUserCreate>()} class="mt-4 flex flex-wrap items-end gap-2" data-testid="new-user">
                    <CsrfField />
                    <label class="text-sm">"Name" <input name=field!(NrllmUserCreate, name) required=true class=INPUT maxlength=64 /></label>
                    <label class="text-sm">"Password" <input type="password" name=field!(NrllmUserCreate, password) required=true class=INPUT autocomplete="new-password" maxlength=1024 /></label>
                    <label class="text-sm">"Role" <select name=field!(NrllmUserCreate, role) class=INPUT>{new_user_roles}</select></label>
                    <button type="submit" class=BUTTON_PRIMARY>"Add user"</button>
                </form>
            </Card>
            <Card title="API tokens">
                <p class="text-sm text-slate-600 dark:text-slate-400">"Scripts send a token as Authorization: Bearer <token>. A token acts as its user, with the lower of its role and theirs, and stops working when that user is disabled; decisions are recorded under the user's name, with the token's beside it."</p>
                <ul class="divide-y divide-slate-100 dark:divide-slate-800">{tokens}</ul>
                <form method="post" action={action::<NrllmTokenCreate>()} class="mt-4 flex flex-wrap items-end gap-2" data-testid="new-token-form">
                    <CsrfField />
                    <label class="text-sm">"Name" <input name=field!(NrllmTokenCreate, name) required=true class=INPUT maxlength=64 /></label>
                    <label class="text-sm">"Role" <select name=field!(NrllmTokenCreate, role) class=INPUT>{token_roles}</select></label>
                    <label class="text-sm">"For user (empty: you)" <input name=field!(NrllmTokenCreate, user) class=INPUT maxlength=64 data-testid="token-user" /></label>
                    <button type="submit" class=BUTTON_PRIMARY>"Create token"</button>
                </form>
            </Card>
            <Card title="Tools">
                <p class="text-sm text-slate-600 dark:text-slate-400">"A disabled tool is offered to no run from now on, runs already waiting for a decision included."</p>
                <ul class="divide-y divide-slate-100 dark:divide-slate-800">{tools}</ul>
            </Card>
        </div>
    }
}
